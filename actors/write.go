// The session actor's write pipeline: pushes and work queued, one batch
// decided, folded and appended at a time, and what a write's end or
// failure does (session.go has the actor's overview).

package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/a2-runtime/a2/actors/sessionpb"
	"github.com/a2-runtime/a2/internal/wire"
	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

type writeDone struct {
	stored []protocol.Event
	err    error
}

type flushTick struct{}

// holdTick ends a hold (startHold): a start's, or a finished step's.
type holdTick struct{}

// startHold is how long a generation's start waits to be written with its
// lane's first chunks or end, and a step's chunks after its finish chunk
// wait for its end (tryFlush).
const startHold = 5 * time.Millisecond

// flushNow starts the next write (see flushSoon).
type flushNow struct{}

// onPush answers a replay at once (R-LOG-09), refuses a conflicting reuse
// of IDs (R-LOG-10) and queues new events. A push that cannot be a
// resubmission is queued without a lookup unless verify (pushcheck.go).
func (s *sessionActor) onPush(c actor.Context, m *sessionpb.PushRequest, verify bool) {
	if s.stopping || s.releasing {
		c.Respond(&stoppingReply{})
		return
	}
	events := wire.EventsFromPB(m.Events)
	ids := make([]string, len(events))
	for i, ev := range events {
		ids[i] = ev.ID
	}
	// A session's first write also claims it (owner.go), durably even
	// when its batch is refused: its pushes are looked up first.
	unchecked := !verify && s.owned && !s.rt.clock.Now().Before(s.lookupUntil) && !s.recent.hasAny(ids)
	var stored []protocol.Event
	var err error
	if !unchecked {
		s.rt.dispatcher.blocking(func() { stored, err = s.store.Lookup(context.Background(), ids) })
	}
	if err != nil {
		c.Respond(&sessionpb.PushResponse{Error: wire.ToPBError(fmt.Errorf("%w: %v", ErrUnavailable, err))})
		return
	}
	if len(stored) > 0 {
		if len(stored) == len(events) {
			same := true
			for i := range events {
				if !protocol.SameContent(events[i], stored[i]) {
					same = false
				}
			}
			if same {
				out := make([]*sessionpb.Event, len(stored))
				for i, ev := range stored {
					out[i] = wire.EventToPB(ev)
				}
				c.Respond(&sessionpb.PushResponse{Events: out})
				return
			}
		}
		c.Respond(&sessionpb.PushResponse{Error: wire.ToPBError(fmt.Errorf("%w: an event ID is already used with other content, action or session, or a batch mixes stored and new events", persistence.ErrPartialDuplicateBatch))})
		return
	}
	var pending int64 // the bytes of the pushes not yet in the log
	for _, p := range append(append([]*pendingPush{}, s.queue...), s.inflight...) {
		for _, ev := range p.events {
			pending += eventBytes(ev)
			for _, id := range ids {
				if ev.ID == id {
					c.Respond(&sessionpb.PushResponse{Error: wire.ToPBError(fmt.Errorf("%w: event %q is being written; retry the push to replay it", ErrUnavailable, id))})
					return
				}
			}
		}
	}
	if max := s.rt.opts.MaxSessionBytes; max > 0 && !m.Trusted {
		// Clients' pushes only: the application's own (trusted) events,
		// a tool's or a handler's, and A2's go on.
		var size int64
		for _, ev := range events {
			size += eventBytes(ev)
		}
		if s.logBytes+pending+size > max {
			c.Respond(&sessionpb.PushResponse{Error: wire.ToPBError(fmt.Errorf("%w: the session's log holds %d bytes, and these events' %d would take it past its quota of %d; nothing was appended",
				ErrQuota, s.logBytes+pending, size, max))})
			return
		}
	}
	s.queue = append(s.queue, &pendingPush{events: events, reply: c.Sender(), span: s.admitSpan(m, events), unchecked: unchecked})
	s.flushSoon()
}

// queueWork adds events of A2's own handlers to the next batch. Their IDs
// are derived, so an event queued again before the first is durable (two
// reconciliations between writes) is the same event: it is kept once.
func (s *sessionActor) queueWork(evs ...protocol.Event) {
	for _, ev := range evs {
		if s.pendingIDs[ev.ID] {
			continue
		}
		if s.pendingIDs == nil {
			s.pendingIDs = map[string]bool{}
		}
		s.pendingIDs[ev.ID] = true
		s.workQueue = append(s.workQueue, ev)
	}
}

// flushSoon starts the next write once the actor has handled the messages
// already in its mailbox: a self-addressed flushNow goes to the back of the
// queue. Idle, that is at once; under load, every chunk, command and
// result that queued behind the first one joins the same write, so that
// batches grow with the load instead of the first message starting a write
// of its own (1,000 steady streams on two cores: 1.65 chunks per progress
// event, was 1.5; docs/benchmarks.md).
func (s *sessionActor) flushSoon() {
	if s.flushQueued || s.writing || s.stopping {
		return // the queued flushNow, or the write's end, flushes
	}
	s.flushQueued = true
	s.ctx.Send(s.self, &flushNow{})
}

// tryFlush starts the next write when none is in flight and the batching
// policy (decideFlush) says so; otherwise it arranges to look again when
// the policy's wait ends.
func (s *sessionActor) tryFlush() {
	if s.writing || s.stopping {
		return
	}
	clk := s.rt.clock
	now := clk.Now()
	v := decideFlush(s.flushInput(now))
	if !v.write {
		self, sys := s.self, s.rt.system
		switch {
		case v.wake.IsZero():
		case v.tick:
			if !s.tickPending {
				s.tickPending = true
				clk.AfterFunc(v.wake.Sub(now), func() { sys.Root.Send(self, &flushTick{}) })
			}
		case !s.holdPending:
			s.holdPending = true
			clk.AfterFunc(v.wake.Sub(now), func() { sys.Root.Send(self, &holdTick{}) })
		}
		return
	}
	batch, pushes, err := s.assemble()
	spent := s.spent
	s.spent = nil
	if err != nil {
		s.fail(pushes, err)
		return
	}
	// Folded: the chunks the progress events were built from are no longer
	// needed, and no copy of the batch refers to them.
	for i := range batch {
		batch[i] = batch[i].Plain()
	}
	recycleChunkBufs(spent)
	if len(batch) == 0 {
		for _, f := range s.takeWriteTrace(nil).after {
			f()
		}
		s.replyPushes(pushes, nil)
		return
	}
	s.writing = true
	s.publishWriting()
	s.inflight = pushes
	store, session, expected, self, sys := s.store, s.id, s.index, s.self, s.rt.system
	logger := s.rt.opts.Logger
	claim, agent := !s.owned, s.agent.Name()
	s.owned = true // or the write fails, which stops the actor
	// The batch is folded into s.state: whether the session has work after
	// it goes into the store's work index with it.
	opts := []persistence.AppendOption{persistence.WithWork(s.hasWork()), persistence.WithEpoch(s.lease.Epoch)}
	wt, began, n := s.takeWriteTrace(pushes), time.Now(), len(batch)
	done := func(stored []protocol.Event, err error) {
		endWrite(wt, began, n, stored, err)
		if err != nil && logger.Enabled(context.Background(), slog.LevelDebug) {
			ids := make([]string, len(batch))
			for i, ev := range batch {
				ids[i] = ev.Type + " " + ev.ID
			}
			logger.Debug("batch not written", "session", session, "expected", expected, "events", ids)
		}
		sys.Root.Send(self, &writeDone{stored: stored, err: err})
	}
	ctx := context.Background()
	if claim {
		// The session's first write: its ownership claim precedes the
		// batch, in the same synced write on a store that can.
		opts = append(opts, persistence.Preceded(sessionClaim(ctx, store, agent, session)))
	}
	// The store's committer tells the actor when the batch is durable: no
	// goroutine waits for it.
	_, _ = store.Append(ctx, session, expected, batch, append(opts, persistence.Async(done))...)
}

// flushInput gathers what decideFlush reads, at now. Its lanes reuse the
// actor's scratch slice: a flush allocates nothing for its decision.
func (s *sessionActor) flushInput(now time.Time) flushInput {
	lanes := s.flushLanes[:0]
	for _, l := range s.lanes {
		lanes = append(lanes, laneFlush{chunks: len(l.chunks), boundary: l.boundary, ended: l.end != nil, pre: len(l.pre),
			started: l.startedEv != nil, startedAt: l.startedAt, finishedAt: l.finishedAt})
	}
	s.flushLanes = lanes
	return flushInput{now: now, queued: len(s.queue) + len(s.workQueue), lanes: lanes,
		maxDelay: time.Duration(s.agent.progress.MaxDelayMs) * time.Millisecond, maxChunks: s.agent.progress.MaxChunks, lastWrite: s.lastWrite}
}

// assemble turns the queue into one batch, folding as it goes.
func (s *sessionActor) assemble() ([]protocol.Event, []*pendingPush, error) {
	c := s.agent.contract
	var batch []protocol.Event
	add := func(evs ...protocol.Event) error {
		for _, ev := range evs {
			ev.Session = s.id
			if err := c.Fold(s.state, ev); err != nil {
				return err
			}
			batch = append(batch, ev)
		}
		return nil
	}
	// Commands and the control lane's steps are decided on the state
	// itself (no copy per command, whose cost grows with the history): the
	// events come back folded. An error leaves the state partly changed,
	// and the caller stops the actor, which reloads from the store.
	folded := func(evs []protocol.Event) {
		for _, ev := range evs {
			ev.Session = s.id
			batch = append(batch, ev)
		}
	}
	step := func() error {
		more, err := c.StepInPlace(s.agent.toolbox().policy, s.state)
		if err != nil {
			return err
		}
		folded(more)
		return nil
	}
	pushes := s.queue
	s.queue = nil
	if s.index == 0 && s.state.AI.Session.Status == protocol.SessionStatusNew && (len(pushes) > 0 || len(s.workQueue) > 0) {
		// The session's first write creates it: the runtime is the trusted
		// server code that appends ai.session.created (R-STATE-12,
		// R-INPUT-18), in the same write, so session.status is open from
		// the session's first event on.
		if err := add(protocol.Event{ID: protocol.DeriveID("session-created", s.id), Type: protocol.TypeSessionCreated, Payload: json.RawMessage(`{}`)}); err != nil {
			return nil, pushes, err
		}
	}
	for _, p := range pushes {
		start := len(batch)
		for _, ev := range p.events {
			ev.Session = s.id
			if ev.Type == protocol.TypeControlRequested {
				out, err := c.DecideInPlace(s.agent.toolbox().policy, s.state, ev)
				if err != nil {
					return nil, pushes, err
				}
				folded(append([]protocol.Event{ev}, out...))
				continue
			}
			if err := add(ev); err != nil {
				return nil, pushes, err
			}
		}
		if err := step(); err != nil {
			return nil, pushes, err
		}
		if p.span != nil {
			s.traceDecided(p, batch[start:])
		}
	}
	if err := add(s.laneEvents()...); err != nil {
		return nil, pushes, err
	}
	work := s.workQueue
	s.workQueue = nil
	if err := add(work...); err != nil {
		return nil, pushes, err
	}
	if err := step(); err != nil {
		return nil, pushes, err
	}
	if err := add(s.claimsOfBatch(batch)...); err != nil {
		return nil, pushes, err
	}
	return batch, pushes, nil
}

func (s *sessionActor) onWriteDone(m *writeDone) {
	s.writing = false
	s.lastWrite = s.rt.clock.Now()
	pushes := s.inflight
	s.inflight = nil
	if m.err != nil {
		s.fail(pushes, m.err)
		return
	}
	if anyUnchecked(pushes) && len(m.stored) > 0 && m.stored[0].Index <= s.index {
		// The batch was stored already (a replay): an unchecked push was a
		// resubmission, and the state folded it again (pushcheck.go).
		s.recheck(pushes, "a batch with a push admitted without a lookup replayed stored events")
		return
	}
	for _, p := range pushes {
		for _, ev := range p.events {
			s.recent.add(ev.ID)
		}
	}
	for _, ev := range m.stored {
		if ev.Index > s.index { // not an event the log had (a replay)
			s.logBytes += eventBytes(ev) // read only under a quota
		}
	}
	if len(m.stored) > 0 {
		s.index = m.stored[len(m.stored)-1].Index
	}
	if !s.wroteOnce {
		s.wroteOnce = true
		s.rt.wrote(s.agent.Name(), s.id)
	}
	s.publishStatus()
	s.rt.opts.Logger.Debug("batch durable", "session", s.id, "events", len(m.stored), "index", s.index)
	for _, ev := range m.stored {
		delete(s.pendingIDs, ev.ID)
	}
	s.replyPushes(pushes, m.stored)
	for _, w := range s.waiters {
		s.ctx.Send(w, s.stateResponse())
	}
	for _, w := range s.idleWaiters {
		s.ctx.Send(w, s.statusReply())
	}
	s.waiters, s.idleWaiters = nil, nil
	s.maybeSnapshot(m.stored)
	if s.releasing {
		s.stop()
		return
	}
	s.reconcile()
	s.traceTurns()
	s.flushSoon()
}

// replyPushes answers each push with its own persisted events.
func (s *sessionActor) replyPushes(pushes []*pendingPush, stored []protocol.Event) {
	byID := make(map[string]protocol.Event, len(stored))
	for _, ev := range stored {
		byID[ev.ID] = ev
	}
	for _, p := range pushes {
		resp := &sessionpb.PushResponse{}
		var mine []protocol.Event
		for _, ev := range p.events {
			if st, ok := byID[ev.ID]; ok {
				resp.Events = append(resp.Events, wire.EventToPB(st))
				if p.span != nil {
					mine = append(mine, st)
				}
			}
		}
		endAdmit(p, mine, nil)
		s.ctx.Send(p.reply, resp)
	}
}

// fail answers the pushes of a failed batch and stops the actor: its state
// ran ahead of the store and must be rebuilt from it.
func (s *sessionActor) fail(pushes []*pendingPush, err error) {
	if anyUnchecked(pushes) && !errors.Is(err, persistence.ErrLeaseLost) && !errors.Is(err, ErrSessionOwned) &&
		!errors.Is(err, persistence.ErrIndexConflict) && !errors.Is(err, persistence.ErrFailed) && !errors.Is(err, persistence.ErrClosed) {
		// A stored ID of an unchecked push (the store's refusal, or the
		// fold's of an event it holds already) fails the batch the same
		// way as a client's mistake would: the pushes are asked again,
		// looked up first (pushcheck.go), and the next activation tells
		// which.
		s.recheck(pushes, err.Error())
		return
	}
	notOwner := errors.Is(err, ErrSessionOwned)
	code := err
	if errors.Is(err, persistence.ErrLeaseLost) {
		// Another member took the session over: nothing to restart here;
		// the pushes go to the new owner.
		s.rt.opts.Logger.Warn("a session's write was refused: its lease was taken over; its work stops here", "session", s.id, "err", err)
		s.lease = persistence.Lease{}
		s.stopCause = errLeaseLost
		s.lostLease.Store(true)
		for _, p := range pushes {
			endAdmit(p, nil, ErrMoved)
			s.ctx.Send(p.reply, &sessionpb.PushResponse{Error: wire.ToPBError(ErrMoved)})
		}
		s.stop()
		return
	}
	if errors.Is(err, persistence.ErrIndexConflict) {
		// Another runtime on the store wrote the session: the attempts and
		// tool executions running here are stale. They are cancelled at
		// once, with the superseded reason, as the actor stops
		// (R-DELIVERY-05); the next activation reads what the other wrote.
		// The batch's pushes were not written: they are answered as by a
		// stopped session, so the runtime sends them to that activation,
		// which decides them on the log as it now is.
		s.writtenElsewhere.Store(true)
		s.rt.opts.Logger.Warn("another writer appended to the session; restarting from the store", "session", s.id, "err", err)
		s.askAgain(pushes)
		s.failed = true
		s.stop()
		return
	}
	if notOwner {
		// Not a failure of the store: another agent claimed the session
		// first. The next activation refuses every request.
		s.rt.opts.Logger.Warn("session belongs to another agent; nothing written", "session", s.id, "agent", s.agent.Name(), "err", err)
	} else {
		s.rt.opts.Logger.Error("session write failed; restarting from the store", "session", s.id, "err", err)
		if !errors.Is(err, persistence.ErrPartialDuplicateBatch) {
			code = fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	for _, p := range pushes {
		endAdmit(p, nil, code)
		s.ctx.Send(p.reply, &sessionpb.PushResponse{Error: wire.ToPBError(code)})
	}
	s.failed = !notOwner
	s.stop()
}

// anyUnchecked reports whether a batch holds a push admitted without a
// lookup.
func anyUnchecked(pushes []*pendingPush) bool {
	for _, p := range pushes {
		if p.unchecked {
			return true
		}
	}
	return false
}

// recheck stops the actor after a batch with an unchecked push failed or
// replayed: its state ran ahead of the store. The batch's pushes are
// answered stoppingReply; the runtime sends them again to the next
// activation, which looks their IDs up first (pushcheck.go).
func (s *sessionActor) recheck(pushes []*pendingPush, why string) {
	s.rt.opts.Logger.Info("a session restarts to look up the IDs of pushes it admitted unchecked", "session", s.id, "why", why)
	s.askAgain(pushes)
	s.stop()
}

// askAgain answers a batch's pushes, which were not written, as a stopped
// session does: the runtime sends them to the next activation (verified:
// looked up first).
func (s *sessionActor) askAgain(pushes []*pendingPush) {
	for _, p := range pushes {
		endAdmit(p, nil, nil)
		s.ctx.Send(p.reply, &stoppingReply{})
	}
}
