package actors

import (
	"context"
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
// each session (one at a time, so that memory stays bounded), and the
// session, having superseded what the stop cut short and started its work
// again, stays; one with nothing to do passivates at once. The agent of a
// session is its owner (owner.go); a session without a claim is scanned
// only when one agent of the runtime uses its store.
//
// The scan reads every session of the stores, its snapshot and the log
// after it (BenchmarkStartupRecovery: 0.2 ms for a session of one short
// turn). Options.SkipRecovery turns it off,
// for a node whose sessions are resumed by their clients anyway (a stream
// that opens wakes its session).

// recoverSessions runs the start-up scan until it has visited every session
// or ctx ends.
func (r *Runtime) recoverSessions(ctx context.Context) {
	defer close(r.recovered)
	byStore := map[persistence.Store][]*Agent{}
	var stores []persistence.Store
	for _, a := range r.agents {
		st := r.storeOf(a)
		if _, ok := byStore[st]; !ok {
			stores = append(stores, st)
		}
		byStore[st] = append(byStore[st], a)
	}
	began, woken, visited := time.Now(), 0, 0
	for _, st := range stores {
		agents := byStore[st]
		for after := ""; ctx.Err() == nil; {
			ids, err := st.Sessions(ctx, after, 256)
			if err != nil {
				if ctx.Err() == nil {
					r.opts.Logger.Warn("start-up recovery could not list the sessions", "err", err)
				}
				break
			}
			if len(ids) == 0 {
				break
			}
			after = ids[len(ids)-1]
			for _, id := range ids {
				if ctx.Err() != nil {
					break // Close: no more lookups, nothing logged
				}
				if protocol.IsA2ID(id) {
					continue // an ownership claim's log
				}
				a := r.ownerAmong(ctx, st, agents, id)
				if a == nil {
					continue
				}
				// Only a session nobody else has activated: one in use
				// already runs its work, and a probe must not passivate it.
				p, spawned, err := r.spawn(a, id)
				if err != nil || !spawned {
					continue
				}
				visited++
				res, err := r.await(r.system.Root.RequestFuture(p, &recoverProbe{}, r.opts.RequestTimeout), r.doneOf(p))
				if err != nil {
					r.opts.Logger.Warn("start-up recovery could not activate a session", "session", id, "agent", a.Name(), "err", err)
					continue
				}
				if rep, ok := res.(*recoverReply); ok && rep.busy {
					woken++
					continue
				}
				// Passivating: one session at a time in memory.
				select {
				case <-r.doneOf(p):
				case <-ctx.Done():
				}
			}
		}
	}
	if visited > 0 {
		r.opts.Logger.Info("start-up recovery done", "sessions", visited, "resumed", woken, "took", time.Since(began))
	}
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
