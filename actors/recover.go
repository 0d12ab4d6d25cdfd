package actors

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// Start-up recovery.
//
// A session's pending work (a model step, a tool call, an application
// handler) runs while its actor is active. When a node stops part way
// (a crash, a deploy), that work resumes when the session activates again.
// So that it does not wait for the session's next request, the runtime
// scans its stores once when it starts, in the background: it activates
// each session (a few at a time, so that memory stays bounded), and the
// session, having superseded what the stop cut short and started its work
// again, stays; one with nothing to do passivates at once. The agent of a
// session is its owner (owner.go); a session without a claim is scanned
// only when one agent of the runtime uses its store.
//
// With a store that keeps the index of sessions with work
// (persistence.WorkIndexer: the Pebble and PostgreSQL stores), the scan
// reads only the sessions in it, so a store of a million idle sessions
// starts as fast as an empty one. Without it, or on a store written before
// the index existed, the scan reads every session of the stores, its
// snapshot and the log after it (BenchmarkStartupRecovery: 0.1 ms for a
// session of one short turn, two at a time on two cores), and marks the
// index complete once it has reached them all. A cluster member's node
// runs ResumeWork itself, at start and after each change of the members,
// with the scan of New turned off. Options.SkipRecovery turns it off,
// for a node whose sessions are resumed by their clients anyway (a stream
// that opens wakes its session).

// recoverSessions runs the start-up scan until it has visited every session
// with work or ctx ends.
func (r *Runtime) recoverSessions(ctx context.Context) {
	defer close(r.recovered)
	r.ResumeWork(ctx)
}

// ResumeWork activates, a few at a time, the sessions of the runtime's
// stores that may have work and that this runtime places (Options.Place),
// so that their work resumes without waiting for a request, and returns
// when it has visited them all or ctx ends. A store that keeps a complete
// index of sessions with work (persistence.WorkIndexer) is read through it,
// so the scan's cost follows the sessions with work, not all sessions; any
// other store, or one whose index is not complete yet (written before it
// existed), is read whole, and its activations repair the index; a full
// scan that activated every session marks the index complete. A cluster
// member calls it again whenever the cluster's members change, to take
// over the sessions with work the hash now places on it.
func (r *Runtime) ResumeWork(ctx context.Context) {
	byStore := map[persistence.Store][]*Agent{}
	var stores []persistence.Store
	for _, a := range r.agents {
		st := r.storeOf(a)
		if _, ok := byStore[st]; !ok {
			stores = append(stores, st)
		}
		byStore[st] = append(byStore[st], a)
	}
	began := time.Now()
	var (
		mu             sync.Mutex
		woken, visited int
		wg             sync.WaitGroup
	)
	// A few sessions at a time: the visits overlap one session's reads
	// with another's fold, and memory stays bounded.
	slots := make(chan struct{}, recoveryParallelism())
	for _, st := range stores {
		agents := byStore[st]
		list, indexed := st.Sessions, false
		index, ok := st.(persistence.WorkIndexer)
		if ok {
			if complete, err := index.WorkIndexComplete(ctx); err == nil && complete {
				list, indexed = index.SessionsWithWork, true
			}
		}
		// A full scan marks the index complete only if it reached every
		// session: each listed, activated (or active already) and not
		// refused.
		var missed atomic.Int64
		listed := false
		for after := ""; ctx.Err() == nil; {
			ids, err := list(ctx, after, 256)
			if err != nil {
				if ctx.Err() == nil {
					r.opts.Logger.Warn("resuming sessions with work: could not list the sessions", "err", err)
				}
				missed.Add(1)
				break
			}
			if len(ids) == 0 {
				listed = true
				break
			}
			after = ids[len(ids)-1]
			for _, id := range ids {
				if ctx.Err() != nil {
					break // Close: no more lookups, nothing logged
				}
				if protocol.IsA2ID(id) {
					continue // an ownership claim's or the store identity's log
				}
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					continue
				}
				wg.Add(1)
				go func() {
					defer func() { <-slots; wg.Done() }()
					a := r.ownerAmong(ctx, st, agents, id)
					if a == nil {
						missed.Add(1)
						return
					}
					busy, ok, reached := r.recoverOne(ctx, a, id)
					if !reached {
						missed.Add(1)
					}
					mu.Lock()
					defer mu.Unlock()
					if ok {
						visited++
					}
					if busy {
						woken++
					}
				}()
			}
		}
		wg.Wait()
		if ok && !indexed && listed && missed.Load() == 0 && ctx.Err() == nil {
			if err := index.MarkWorkIndexComplete(ctx); err != nil {
				r.opts.Logger.Warn("could not mark the work index complete; the next start scans every session again", "err", err)
			} else {
				r.opts.Logger.Info("the index of sessions with work is complete: later starts read only it")
			}
		}
	}
	if visited > 0 {
		r.opts.Logger.Info("resumed sessions with work", "sessions", visited, "resumed", woken, "took", time.Since(began))
	}
}

// recoveryParallelism is how many sessions the start-up scan visits at a
// time.
func recoveryParallelism() int { return max(2, runtime.GOMAXPROCS(0)) }

// recoverOne activates session, unless something else has, and waits
// until it has either passivated (nothing to do) or reported work it
// resumed (busy). visited is false when it was not activated here;
// reached is false when it could not be activated (refused, or failed):
// a session active already was reached.
func (r *Runtime) recoverOne(ctx context.Context, a *Agent, id string) (busy, visited, reached bool) {
	// Only a session nobody else has activated: one in use already runs
	// its work, and a probe must not passivate it.
	p, spawned, err := r.spawn(a, id)
	if err != nil || !spawned {
		return false, false, err == nil
	}
	res, err := r.await(r.system.Root.RequestFuture(p, &recoverProbe{}, r.opts.RequestTimeout), r.doneOf(p))
	if err != nil {
		r.opts.Logger.Warn("start-up recovery could not activate a session", "session", id, "agent", a.Name(), "err", err)
		return false, true, false
	}
	if rep, ok := res.(*recoverReply); ok && rep.busy {
		return true, true, true
	}
	// Passivating: it leaves memory before its slot is reused.
	select {
	case <-r.doneOf(p):
	case <-ctx.Done():
	}
	return false, true, true
}

// ownerAmong returns the agent among agents (those of one store) that owns
// session, or, for a session without a claim, the store's only agent; nil
// when another agent owns it or the owner is ambiguous.
func (r *Runtime) ownerAmong(ctx context.Context, st persistence.Store, agents []*Agent, session string) *Agent {
	owner, err := sessionOwner(ctx, st, session)
	if err != nil {
		r.opts.Logger.Warn("start-up recovery could not read a session's owner", "session", session, "err", err)
		return nil
	}
	if owner == "" {
		if len(agents) == 1 {
			return agents[0]
		}
		return nil
	}
	for _, a := range agents {
		if a.Name() == owner {
			return a
		}
	}
	return nil
}
