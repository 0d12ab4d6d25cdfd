package actors

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

	"github.com/a2-runtime/a2/actors/sessionpb"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/internal/wire"
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
	// status is what the actor publishes for Runtime.Idle (status.go).
	status *sessionStatus

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
	// and deferrals what they say of a compaction's deferral, for the
	// lanes (in memory only: a new activation starts empty).
	prompts     harness.PromptCache
	deferrals   protocol.DeferralCache
	toolRuns    map[string]*toolRun
	lastWrite   time.Time
	tickPending bool
	holdPending bool
	// flushLanes is flushInput's scratch space.
	flushLanes  []laneFlush
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
	// logBytes is the size of the session's log (eventBytes of each
	// event), kept for Options.MaxSessionBytes (snapshot.go, logSize).
	logBytes int64

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

	// recent and lookupUntil decide which pushes are looked up in the
	// store before they are admitted (pushcheck.go).
	recent      recentIDs
	lookupUntil time.Time
}

// pendingPush is a push waiting for its batch to be durable.
type pendingPush struct {
	events []protocol.Event
	reply  *actor.PID
	// span is the push's admit span (nil without a trace).
	span trace.Span
	// unchecked: admitted without a lookup of its IDs (pushcheck.go).
	unchecked bool
}

// stoppingReply answers a request that reached a session while it stops;
// the runtime retries on a fresh activation.
type stoppingReply struct{}

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
		s.publishStatus()
		if w := s.rt.opts.LookupPushesFor; w > 0 {
			s.lookupUntil = s.rt.clock.Now().Add(w)
		}
		s.reconcile()
		s.flushSoon()
	case *memberLeaseLost:
		s.loseLease(m.why)
	case *sessionpb.PushRequest:
		if s.broken != nil {
			c.Respond(&sessionpb.PushResponse{Error: wire.ToPBError(s.broken)})
			return
		}
		s.onPush(c, m, false)
	case *verifiedPush:
		if s.broken != nil {
			c.Respond(&sessionpb.PushResponse{Error: wire.ToPBError(s.broken)})
			return
		}
		s.onPush(c, m.PushRequest, true)
	case *statusRequest:
		s.answerDurable(c, func() any { return &statusReply{err: s.broken} }, &s.idleWaiters, func() any { return s.statusReply() })
	case *sessionpb.StateRequest:
		s.answerDurable(c, func() any { return &sessionpb.StateResponse{Error: wire.ToPBError(s.broken)} }, &s.waiters, func() any { return s.stateResponse() })
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
			return
		}
		if _, fired := m.(*actor.ReceiveTimeout); fired {
			// protoactor cancels a receive timeout once it fires: a session
			// busy at that moment sets it again, or it would never
			// passivate (its state kept until the process ends).
			c.SetReceiveTimeout(s.rt.opts.PassivateAfter)
		}
	case *recoverProbe:
		busy := s.broken == nil && !s.idle()
		c.Respond(&recoverReply{busy: busy})
		if !busy {
			s.stop()
		}
	case *actor.Stopping:
		s.stopping = true
		s.unpublishStatus()
		cause := errSessionStopped
		if s.stopCause != nil {
			cause = s.stopCause
		}
		// Lanes are child actors: stopping stops them, and each cancels its
		// step's context (runActor, on Stopping).
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
	// The log's size is kept only under a quota (snapshot.go, logSize).
	var size *logSize
	var count func(protocol.Event)
	if s.rt.opts.MaxSessionBytes > 0 {
		if size, err = loadLogSize(context.Background(), s.store, s.id); err != nil {
			return err
		}
		count = size.count
	}
	st, index, err := replay(context.Background(), s.store, s.agent.contract, s.id, 0, func(msg string, err error) {
		s.rt.opts.Logger.Warn(msg, "session", s.id, "err", err)
	}, count)
	if err != nil {
		return err
	}
	if size != nil {
		if s.logBytes, err = size.total(context.Background(), s.store, s.id); err != nil {
			return err
		}
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
	s.markBuf = protocol.AppendPending(s.markBuf[:0], s.agent.toolbox().work, s.state.AI)
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
		return &sessionpb.StateResponse{Error: wire.ToPBError(err)}
	}
	return &sessionpb.StateResponse{State: b, Index: s.index}
}
