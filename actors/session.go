package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

	"github.com/a2-runtime/a2/actors/sessionpb"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/telemetry"
)

// sessionActor is the single writer of one session log.
//
// The append pipeline. Everything that must be appended (pushed commands
// and events, the generation lane's progress and terminal events, the
// control lane's own reactions) is queued; when no write is in flight, the
// whole queue becomes one batch: each item is decided or folded into the
// state in order (so a command sees the events queued before it), and the
// batch is appended with one conditional, synced store write. At most one
// write is in flight; what arrives meanwhile joins the next batch. The
// state therefore runs ahead of the store by at most the batch in flight,
// and nothing is acted on while a write is in flight: callers are answered,
// subscribers see events (through the store) and children are started or
// cancelled only after the write is durable. A write failure stops the
// actor; the next request activates it again from the store, so it never
// continues on state the store does not have.
type sessionActor struct {
	rt    *Runtime
	agent *Agent
	id    string
	store persistence.Store // the agent's (Runtime.storeOf)
	self  *actor.PID
	ctx   actor.Context

	state *protocol.SessionState
	index uint64

	queue     []*pendingPush
	workQueue []protocol.Event
	writing   bool
	inflight  []*pendingPush
	waiters   []*actor.PID
	// idleWaiters wait for the end of the write in flight to learn
	// whether the session is idle (statusRequest).
	idleWaiters []*actor.PID
	lanes       map[string]*lane
	// prompts keeps the settled messages' share of each step's prompt,
	// for the lanes (in memory only: a new activation starts empty).
	prompts     harness.PromptCache
	toolRuns    map[string]*toolRun
	lastWrite   time.Time
	tickPending bool
	holdPending bool
	flushQueued bool // a flushNow is in the mailbox
	stopping    bool
	// releasing: the session stops once its write in flight is durable
	// (releaseSession); it admits nothing more meanwhile.
	releasing bool
	// lease is the session's ownership (lease.go): its epoch fences the
	// appends. stopCause is what the actor's stop cancels its work with
	// (errSessionStopped unless the lease was lost).
	lease     persistence.Lease
	stopCause error
	// heldUntil is when the lease of the member that owns the session,
	// which refused the activation, ends.
	heldUntil time.Time
	// lostLease is set, before the stop, when the lease was lost: the
	// children read it from their own goroutines (childStopCause).
	lostLease atomic.Bool
	// writtenElsewhere is set, before the stop, when a write was refused
	// because another runtime appended to the session first.
	writtenElsewhere atomic.Bool

	sinceSnapshot      int
	sinceSnapshotBytes int
	// lastSnapshotBytes is the size of the last snapshot this actor saved
	// (0 before its first).
	lastSnapshotBytes int

	// owned: this agent owns the session's log (owner.go); until it does,
	// the first write claims it.
	owned bool

	// broken is the activation error: requests are answered with it until
	// the actor stops (after a second), and the next request activates it
	// again.
	broken error

	metaTried map[string]bool
	lookups   int

	// handlerRuns are the application events whose handler runs, has
	// completed (its completion not folded yet) or rests; stopHandlers
	// cancels the runs (see handlers.go).
	handlerRuns  map[string]handlerState
	handlerCtx   context.Context
	stopHandlers context.CancelCauseFunc

	// spent are the lanes' chunk batches the batch being assembled was built
	// from, recycled once it is folded (see chunkBufs).
	spent [][]protocol.UIMessageChunk

	// workBuf is reconcile's (and claimsOfBatch's) slice of pending work, reused from one call to
	// the next; markBuf is hasWork's.
	workBuf []protocol.Work
	markBuf []protocol.Work

	// pendingIDs are the IDs of the work events queued or being written.
	pendingIDs map[string]bool
	// failed is set when a write failed: the runtime activates the session
	// again after the actor stopped, so its durable work goes on without
	// waiting for a request (R-GEN-17).
	failed    bool
	wroteOnce bool

	// trace is the session's trace bookkeeping (trace.go).
	trace sessionTrace
}

// pendingPush is a push waiting for its batch to be durable.
type pendingPush struct {
	events []protocol.Event
	reply  *actor.PID
	// span is the push's admit span (nil without a trace).
	span trace.Span
}

// stoppingReply answers a request that reached a session while it stops;
// the runtime retries on a fresh activation.
type stoppingReply struct{}

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

// passivateIdle asks a session to passivate now if it is idle.
type passivateIdle struct{}

// releaseSession asks a session to stop once its write in flight, if any,
// is durable, busy or not (Runtime.Release, Runtime.Close): what it has
// queued is answered as by a stopped session, and the work it runs stops
// with it, to be superseded and resumed by its next activation.
type releaseSession struct{}

// recoverProbe asks a session the start-up scan activated whether it has
// work to do (recover.go); it answers a recoverReply and passivates if not.
type recoverProbe struct{}

type recoverReply struct{ busy bool }

func (s *sessionActor) Receive(c actor.Context) {
	s.ctx = c
	switch m := c.Message().(type) {
	case *actor.Started:
		s.self = c.Self()
		s.lanes = map[string]*lane{}
		telemetry.Metrics().SessionsActive.Add(context.Background(), 1)
		began := time.Now()
		err := s.activate()
		telemetry.Metrics().Activation.Record(context.Background(), time.Since(began).Seconds())
		if err != nil {
			if errors.Is(err, ErrSessionOwned) || errors.Is(err, ErrLeaseHeld) || errors.Is(err, ErrNotServing) {
				s.broken = err
			} else {
				s.rt.opts.Logger.Error("session activation failed", "session", s.id, "err", err)
				s.broken = fmt.Errorf("%w: session %q cannot be read: %v", ErrUnavailable, s.id, err)
			}
			// A broken actor answers with its error for a second (or, when
			// another member owns the session, until that member's lease
			// ends), then stops, however many requests keep arriving, so
			// that the next request activates the session again.
			wait := time.Second
			if !s.heldUntil.IsZero() {
				wait = time.Until(s.heldUntil)
			}
			self, sys := s.self, s.rt.system
			time.AfterFunc(wait, func() { sys.Root.Send(self, &passivateIdle{}) })
			return
		}
		c.SetReceiveTimeout(s.rt.opts.PassivateAfter)
		s.reconcile()
		s.flushSoon()
	case *memberLeaseLost:
		s.loseLease(m.why)
	case *sessionpb.PushRequest:
		if s.broken != nil {
			c.Respond(&sessionpb.PushResponse{Error: toPBError(s.broken)})
			return
		}
		s.onPush(c, m)
	case *statusRequest:
		s.answerDurable(c, func() any { return &statusReply{err: s.broken} }, &s.idleWaiters, func() any { return s.statusReply() })
	case *sessionpb.StateRequest:
		s.answerDurable(c, func() any { return &sessionpb.StateResponse{Error: toPBError(s.broken)} }, &s.waiters, func() any { return s.stateResponse() })
	case *writeDone:
		s.onWriteDone(m)
	case *laneStarted, *laneChunk, *laneEnd, *laneEvent:
		s.onLane(m)
	case *frontierRequest:
		// During a write the state holds the write's events already
		// (assemble folds them first), which are past the index.
		var st *protocol.AIState
		if s.index == m.index && !s.writing && s.broken == nil && !s.stopping {
			st = s.state.AI.Clone()
		}
		m.reply <- st
	case *toolEnd:
		s.onToolEnd(m)
	case *toolPreliminary:
		s.onToolPreliminary(m)
	case *metadataDone:
		s.onMetadataDone(m)
	case *handlerDone:
		s.onHandlerDone(m)
	case *handlerResting:
		s.onHandlerResting(m)
	case *wakeHandlers:
		if s.stopping {
			c.Respond(&stoppingReply{}) // the runtime asks the next activation
			return
		}
		s.onWakeHandlers()
		c.Respond(&handlersWoken{})
	case *flushTick:
		s.tickPending = false
		s.tryFlush()
	case *holdTick:
		s.holdPending = false
		s.tryFlush()
	case *flushNow:
		s.flushQueued = false
		s.tryFlush()
	case *releaseSession:
		s.releasing = true
		if !s.writing {
			s.stop()
		}
	case *actor.ReceiveTimeout, *passivateIdle:
		if s.broken != nil {
			s.stop()
			return
		}
		if s.idle() {
			telemetry.Metrics().Passivations.Add(context.Background(), 1)
			s.stop() // passivate: the next request activates it from the store
		}
	case *recoverProbe:
		busy := s.broken == nil && !s.idle()
		c.Respond(&recoverReply{busy: busy})
		if !busy {
			s.stop()
		}
	case *actor.Stopping:
		s.stopping = true
		cause := errSessionStopped
		if s.stopCause != nil {
			cause = s.stopCause
		}
		// Lanes are child actors: stopping stops them, and each cancels its
		// step's context (laneActor, on Stopping).
		for _, r := range s.toolRuns {
			s.cancelRun(r, cause)
			endTool(r, "aborted", nil, nil)
		}
		for _, l := range s.lanes {
			o, reason := abortOutcome(s.childStopCause())
			endGeneration(l, o, reason, "")
		}
		for _, f := range s.takeWriteTrace(nil).after {
			f() // spans whose write will not happen
		}
		s.endTurn("session stopped")
		if s.stopHandlers != nil {
			s.stopHandlers(cause)
		}
		for _, p := range append(s.queue, s.inflight...) {
			endAdmit(p, nil, nil)
			c.Send(p.reply, &stoppingReply{})
		}
		for _, w := range append(s.waiters, s.idleWaiters...) {
			c.Send(w, &stoppingReply{})
		}
		s.queue, s.inflight, s.waiters, s.idleWaiters = nil, nil, nil, nil
	case *actor.Stopped:
		telemetry.Metrics().SessionsActive.Add(context.Background(), -1)
		s.releaseLease()
		s.rt.forget(s.agent.Name(), s.id, s.self)
		s.rt.stopped(s.self)
		if s.failed {
			s.rt.reactivateLater(s.agent, s.id)
		}
		s.rt.wg.Done()
	}
}

// idle reports whether the session has nothing to do: no write, no queued
// event, no running child or handler.
func (s *sessionActor) idle() bool {
	return !s.writing && len(s.queue) == 0 && len(s.workQueue) == 0 && len(s.lanes) == 0 && len(s.toolRuns) == 0 && s.lookups == 0 && !s.handlersRunning()
}

func (s *sessionActor) stop() {
	if !s.stopping {
		s.stopping = true
		s.ctx.Stop(s.self)
	}
}

// activate loads the latest snapshot for the current reducer name and folds
// the log tail; a missing or unreadable snapshot is rebuilt from the log
// (R-CONTRACT-10, R-CONTRACT-11).
func (s *sessionActor) activate() (err error) {
	// The store's reads (and a claim's write) wait on I/O: outside the
	// dispatcher's bound (dispatcher.go).
	s.rt.dispatcher.blocking(func() { err = s.load() })
	return err
}

func (s *sessionActor) load() error {
	if err := s.takeLease(); err != nil {
		return err
	}
	claimed, err := checkOwner(context.Background(), s.store, s.agent.Name(), s.id)
	if err != nil {
		return err
	}
	st, index, err := replay(context.Background(), s.store, s.agent.contract, s.id, 0, func(msg string, err error) {
		s.rt.opts.Logger.Warn(msg, "session", s.id, "err", err)
	})
	if err != nil {
		return err
	}
	if !claimed && index > 0 {
		// A log written before claims existed: its first agent claims it.
		if err := claimSession(context.Background(), s.store, s.agent.Name(), s.id); err != nil {
			return err
		}
		claimed = true
	}
	s.state, s.index, s.owned = st, index, claimed
	s.repairWorkMark()
	return nil
}

// hasWork reports whether the session's state (with what is queued folded
// in) has pending work: the mark its next append writes in the store's
// index of sessions with work (persistence.WorkIndexer).
func (s *sessionActor) hasWork() bool {
	s.markBuf = protocol.AppendPending(s.markBuf[:0], s.agent.work, s.state.AI)
	return resumable(s.markBuf)
}

// resumable reports whether work holds something that must resume without
// a client asking: anything but a model-metadata lookup, which waits for
// the session's next activation (a node without a catalog leaves lookups
// pending for good, and every session would stay in the index).
func resumable(work []protocol.Work) bool {
	for _, w := range work {
		if w.Kind != protocol.WorkMetadata {
			return true
		}
	}
	return false
}

// repairWorkMark sets the session's entry in the store's work index to
// what its loaded state says, when they differ: a store written before the
// index existed gets its marks as the start-up scan activates its
// sessions, and an entry for a session with no work goes. The mark is
// fenced by the loaded index; a failure is logged, and the next append
// writes the mark anyway.
func (s *sessionActor) repairWorkMark() {
	w, ok := s.store.(persistence.WorkIndexer)
	if !ok || s.index == 0 {
		return
	}
	ctx := context.Background()
	has := s.hasWork()
	indexed, err := w.HasWork(ctx, s.id)
	if err == nil && indexed != has {
		err = w.MarkWork(ctx, s.id, s.index, has)
	}
	if err != nil {
		s.rt.opts.Logger.Warn("could not repair the session's mark in the work index", "session", s.id, "work", has, "err", err)
	}
}

// replay folds session's log with c, from the latest snapshot under c's
// reducer name when it ends at or before upTo, through index upTo (0: to
// the end of the log). A snapshot that cannot be read or decoded is
// reported to warn and the log is folded from its start instead
// (R-CONTRACT-11).
func replay(ctx context.Context, store persistence.Store, c *protocol.Contract, session string, upTo uint64, warn func(msg string, err error)) (*protocol.SessionState, uint64, error) {
	st, at := c.NewState(), uint64(0)
	snap, found, err := store.LoadSnapshot(ctx, session, c.ReducerName())
	switch {
	case err != nil:
		warn("snapshot unreadable; replaying the log", err)
	case found && (upTo == 0 || snap.Index <= upTo):
		if restored, err := c.UnmarshalState(snap.State); err == nil {
			st, at = restored, snap.Index
		} else {
			warn("snapshot does not decode; replaying the log", err)
		}
	}
	const page = 1024
	for upTo == 0 || at < upTo {
		limit := page
		if upTo != 0 {
			limit = int(min(upTo-at, page))
		}
		evs, err := store.Read(ctx, session, at, limit)
		if err != nil {
			return nil, 0, err
		}
		for _, ev := range evs {
			if err := c.Fold(st, ev); err != nil {
				return nil, 0, fmt.Errorf("fold %s at %d: %w", ev.Type, ev.Index, err)
			}
			at = ev.Index
		}
		if len(evs) < limit {
			if upTo != 0 && at < upTo {
				return nil, 0, fmt.Errorf("actors: the log of %q ends at %d, before index %d", session, at, upTo)
			}
			break
		}
	}
	return st, at, nil
}

// answerDurable answers a read of the session: broken(), the answer of a
// session that cannot be read; during a write, once it is durable (the
// sender joins waiters); else answer() now.
func (s *sessionActor) answerDurable(c actor.Context, broken func() any, waiters *[]*actor.PID, answer func() any) {
	switch {
	case s.broken != nil:
		c.Respond(broken())
	case s.stopping:
		c.Respond(&stoppingReply{})
	case s.writing:
		*waiters = append(*waiters, c.Sender())
	default:
		c.Respond(answer())
	}
}

// statusRequest asks a session's durable index and whether it is idle
// (Runtime.Idle): what a bounded stream needs, without the state.
type statusRequest struct{}

type statusReply struct {
	index uint64
	idle  bool
	err   error
}

func (s *sessionActor) statusReply() *statusReply {
	return &statusReply{index: s.index, idle: s.state.AI.Idle()}
}

func (s *sessionActor) stateResponse() *sessionpb.StateResponse {
	b, err := s.state.MarshalJSON()
	if err != nil {
		return &sessionpb.StateResponse{Error: toPBError(err)}
	}
	return &sessionpb.StateResponse{State: b, Index: s.index}
}

// onPush answers a replay at once (R-LOG-09), refuses a conflicting reuse
// of IDs (R-LOG-10) and queues new events.
func (s *sessionActor) onPush(c actor.Context, m *sessionpb.PushRequest) {
	if s.stopping || s.releasing {
		c.Respond(&stoppingReply{})
		return
	}
	events := fromPBs(m.Events)
	ids := make([]string, len(events))
	for i, ev := range events {
		ids[i] = ev.ID
	}
	var stored []protocol.Event
	var err error
	s.rt.dispatcher.blocking(func() { stored, err = s.store.Lookup(context.Background(), ids) })
	if err != nil {
		c.Respond(&sessionpb.PushResponse{Error: toPBError(fmt.Errorf("%w: %v", ErrUnavailable, err))})
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
					out[i] = toPB(ev)
				}
				c.Respond(&sessionpb.PushResponse{Events: out})
				return
			}
		}
		c.Respond(&sessionpb.PushResponse{Error: toPBError(fmt.Errorf("%w: an event ID is already used with other content, action or session, or a batch mixes stored and new events", persistence.ErrPartialDuplicateBatch))})
		return
	}
	for _, p := range append(append([]*pendingPush{}, s.queue...), s.inflight...) {
		for _, ev := range p.events {
			for _, id := range ids {
				if ev.ID == id {
					c.Respond(&sessionpb.PushResponse{Error: toPBError(fmt.Errorf("%w: event %q is being written; retry the push to replay it", ErrUnavailable, id))})
					return
				}
			}
		}
	}
	s.queue = append(s.queue, &pendingPush{events: events, reply: c.Sender(), span: s.admitSpan(m, events)})
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

// tryFlush starts the next write when none is in flight. With maxDelayMs,
// a batch of progress alone waits that long after the previous write,
// unless it holds a boundary chunk or maxChunks chunks (R-PROGRESS-03).
func (s *sessionActor) tryFlush() {
	if s.writing || s.stopping {
		return
	}
	chunks, boundary, events := 0, false, false
	var hold time.Time // the earliest end of a hold (startHold)
	for _, l := range s.lanes {
		// A step whose finish chunk came has its end on the way (the
		// lane sends it once its stream returns EOF): its chunks, and its
		// start, wait for it up to startHold, so that a step's last
		// chunks and its end are one write, not two.
		if l.end == nil && !l.finishedAt.IsZero() && len(l.pre) == 0 {
			if until := l.finishedAt.Add(startHold); time.Now().Before(until) {
				if hold.IsZero() || until.Before(hold) {
					hold = until
				}
				continue
			}
		}
		chunks += len(l.chunks)
		boundary = boundary || l.boundary || l.end != nil
		// The events a lane reports before its chunks (a compaction's
		// request) are written at once, so that a client sees a running
		// compaction while its summary request is in flight. A start alone
		// waits up to startHold for the lane's next report: a model that
		// answers at once then writes its start, progress and end in one
		// write instead of two, and one that does not is shown running
		// a few milliseconds later.
		events = events || len(l.pre) > 0
		if l.startedEv != nil {
			if until := l.startedAt.Add(startHold); len(l.chunks) > 0 || l.end != nil || !time.Now().Before(until) {
				events = true
			} else if hold.IsZero() || until.Before(hold) {
				hold = until
			}
		}
	}
	boundary = boundary || events
	if len(s.queue) == 0 && len(s.workQueue) == 0 && chunks == 0 && !events && !s.anyEnded() {
		if !hold.IsZero() && !s.holdPending {
			s.holdPending = true
			self, sys := s.self, s.rt.system
			time.AfterFunc(time.Until(hold), func() { sys.Root.Send(self, &holdTick{}) })
		}
		return
	}
	if d := time.Duration(s.agent.progress.MaxDelayMs) * time.Millisecond; d > 0 && len(s.queue) == 0 && len(s.workQueue) == 0 &&
		!boundary && chunks < s.agent.progress.MaxChunks {
		if wait := time.Until(s.lastWrite.Add(d)); wait > 0 {
			if !s.tickPending {
				s.tickPending = true
				self, sys := s.self, s.rt.system
				time.AfterFunc(wait, func() { sys.Root.Send(self, &flushTick{}) })
			}
			return
		}
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
	s.inflight = pushes
	store, session, expected, self, sys := s.store, s.id, s.index, s.self, s.rt.system
	logger := s.rt.opts.Logger
	claim, agent := !s.owned, s.agent.Name()
	s.owned = true // or the write fails, which stops the actor
	// The batch is folded into s.state: whether the session has work after
	// it goes into the store's work index with it.
	work := s.hasWork()
	opts := persistence.AppendOptions{Work: &work, Epoch: s.lease.Epoch}
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
	if claim {
		// The session's first write: its ownership claim precedes the
		// batch, in the same synced write on a store that can.
		ctx := context.Background()
		persistence.AppendPrecededAsync(ctx, store, sessionClaim(ctx, store, agent, session), session, expected, batch, opts, done)
		return
	}
	// The store's committer tells the actor when the batch is durable (no
	// goroutine waits for it), when the store can (the Pebble store).
	persistence.AppendWithAsync(context.Background(), store, session, expected, batch, opts, done)
}

// anyEnded reports whether a lane has its terminal event to write. A
// lane's start alone does not start a write: it rides with the step's
// first chunks (or its end), which saves a synced write per step.
func (s *sessionActor) anyEnded() bool {
	for _, l := range s.lanes {
		if l.end != nil {
			return true
		}
	}
	return false
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
		more, err := c.StepInPlace(s.agent.policy, s.state)
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
				out, err := c.DecideInPlace(s.agent.policy, s.state, ev)
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
	s.lastWrite = time.Now()
	pushes := s.inflight
	s.inflight = nil
	if m.err != nil {
		s.fail(pushes, m.err)
		return
	}
	if len(m.stored) > 0 {
		s.index = m.stored[len(m.stored)-1].Index
	}
	if !s.wroteOnce {
		s.wroteOnce = true
		s.rt.wrote(s.agent.Name(), s.id)
	}
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
				resp.Events = append(resp.Events, toPB(st))
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
			s.ctx.Send(p.reply, &sessionpb.PushResponse{Error: toPBError(ErrMoved)})
		}
		s.stop()
		return
	}
	if errors.Is(err, persistence.ErrIndexConflict) {
		// Another runtime on the store wrote the session: the attempts and
		// tool executions running here are stale. They are cancelled at
		// once, with the superseded reason, as the actor stops
		// (R-DELIVERY-05); the next activation reads what the other wrote.
		s.writtenElsewhere.Store(true)
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
		s.ctx.Send(p.reply, &sessionpb.PushResponse{Error: toPBError(code)})
	}
	s.failed = !notOwner
	s.stop()
}

// snapshotDue says whether a session saves a snapshot, after events
// events and bytes bytes of payloads since its last one, whose size was
// last (0: none yet).
func snapshotDue(o Options, events, bytes, last int) bool {
	return (events >= o.SnapshotEvery || bytes >= o.SnapshotBytes) && bytes >= last
}

// maybeSnapshot saves a snapshot every SnapshotEvery events or
// SnapshotBytes bytes, and, once the state is large, only when the
// payloads since the last snapshot add up to at least its size. A snapshot
// marshals the whole state, so a fixed interval would make a long
// session's every event dearer (the state grows with the conversation,
// the events do not); with the interval growing with the state, a
// snapshot costs about a fixed amount per byte of log written, and an
// activation replays at most about one snapshot's worth of log after it
// (docs/storage.md, 2.7).
func (s *sessionActor) maybeSnapshot(stored []protocol.Event) {
	if s.rt.opts.SnapshotEvery < 0 {
		return
	}
	s.sinceSnapshot += len(stored)
	for _, ev := range stored {
		s.sinceSnapshotBytes += len(ev.Payload)
	}
	if !snapshotDue(s.rt.opts, s.sinceSnapshot, s.sinceSnapshotBytes, s.lastSnapshotBytes) {
		return
	}
	b, err := s.state.MarshalJSON()
	if err != nil {
		return
	}
	s.sinceSnapshot, s.sinceSnapshotBytes, s.lastSnapshotBytes = 0, 0, len(b)
	snap := persistence.Snapshot{Session: s.id, Reducer: s.agent.contract.ReducerName(), Index: s.index, State: b}
	store, logger := s.store, s.rt.opts.Logger
	go func() {
		if err := store.SaveSnapshot(context.Background(), snap); err != nil {
			logger.Warn("snapshot not saved", "session", snap.Session, "err", err)
		}
	}()
}
