package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/telemetry"
)

// Abort causes carried by a lane's context (context.Cause).
var (
	ErrStopped        = errors.New("actors: the turn was stopped")
	ErrPaused         = errors.New("actors: the turn was paused now")
	ErrSuperseded     = errors.New("actors: the attempt was superseded")
	errSessionStopped = errors.New("actors: the session actor stopped")
	// errWrittenElsewhere: the session's write was refused because another
	// runtime on the same store appended first; this actor's attempts are
	// superseded by that writer's.
	errWrittenElsewhere = fmt.Errorf("%w: another runtime wrote the session first", ErrSuperseded)
)

// lane is one model step in progress: a child actor runs the model stream
// and sends its chunks to the session actor, which writes them as progress
// batches.
type lane struct {
	gen       string
	request   string
	attempt   int
	pid       *actor.PID
	startedEv *protocol.Event
	// startedAt is when the lane reported its start: the start waits for
	// the lane's next report until startHold after it (decideFlush).
	startedAt time.Time
	started   bool
	// pre are the compaction events of the step, written after its start
	// and before its progress.
	pre      []protocol.Event
	chunks   []protocol.UIMessageChunk
	bufs     [][]protocol.UIMessageChunk // the lane's batches, recycled once written
	next     int                         // index of the next chunk to write
	boundary bool
	// finishedAt is when the step's finish chunk came: its end follows
	// at once, and its chunks wait for it up to startHold (decideFlush).
	finishedAt time.Time
	end        *laneEnd
	// span is the attempt's span (nil without a trace), began its start,
	// cancelCause why the actor cancelled it.
	span        trace.Span
	began       time.Time
	cancelCause error
}

type laneStarted struct {
	gen   string
	model string
	// limits is set when the generation's compaction needs the model's
	// limits: automatic, with no explicit threshold (R-META-01, R-META-07).
	limits bool
}

// laneEvent is an event the lane writes itself (compaction).
type laneEvent struct {
	gen string
	ev  protocol.Event
}

// laneChunk carries the chunks a model step produced together: one, or
// all those a ReadyStream had at hand (at most maxChunks).
type laneChunk struct {
	gen    string
	chunks []protocol.UIMessageChunk
}

type laneEnd struct {
	gen string
	// failure is the turn's failure message (a provider or resolver error);
	// empty on success. aborted is set when the lane was cancelled: nothing
	// is recorded then, the state already fenced or will supersede it.
	failure      string
	aborted      bool
	usage        *protocol.Usage
	finishReason string
	estimate     int64
	bytes        int64
	// noModel marks a failure before the start was reported: the start
	// event is written with the failure, naming model when it resolved
	// (R-GEN-16).
	noModel bool
	model   string
}

// runActor is the child actor of a generation lane or a tool execution
// attempt: it owns the context of the goroutine that runs the step or the
// attempt, which carries the abort cause (cancelLane, or the session's
// stop). spawnRun starts that goroutine as it spawns the actor: started
// from the actor's Started, the run waited for one more hand-over between
// goroutines (docs/benchmarks.md, "What the one-client latency is made
// of").
type runActor struct {
	cancel context.CancelCauseFunc
	// stopCause is why the session stops (sessionActor.childStopCause).
	stopCause func() error
}

// spawnRun spawns a runActor and starts run in a goroutine of its own,
// under the actor's context; run sends its reports to the session actor.
func (s *sessionActor) spawnRun(run func(ctx context.Context, send func(any))) *actor.PID {
	ctx, cancel := context.WithCancelCause(context.Background())
	pid := s.ctx.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &runActor{cancel: cancel, stopCause: s.childStopCause}
	}, actor.WithDispatcher(s.rt.dispatcher)))
	sys, parent := s.rt.system, s.self
	go run(ctx, func(msg any) { sys.Root.Send(parent, msg) })
	return pid
}

type cancelLane struct{ cause error }

func (r *runActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *cancelLane:
		r.cancel(m.cause)
	case *actor.Stopping:
		r.cancel(r.stopCause())
	}
}

// reconcile compares the running lanes with the work protocol.Pending names
// and starts, cancels or supersedes to match (R-DELIVERY-04): an attempt on
// record with no live lane is marked superseded before its replacement
// starts; a lane whose request is no longer wanted is cancelled.
func (s *sessionActor) reconcile() {
	// Nothing is started or cancelled while a write is in flight (the
	// state is ahead of the store by its batch): the write's end
	// reconciles (onWriteDone), or stops the actor if it failed.
	if s.stopping || s.writing {
		return
	}
	// One slice for the work of every reconcile (one or more per write):
	// reconcile runs from the actor's message handling only, never inside
	// itself, and what it calls copies the items it keeps.
	work := protocol.AppendPending(s.workBuf[:0], s.agent.toolbox().work, s.state.AI)
	s.workBuf = work
	s.reconcileTools(work)
	s.reconcileMetadata(work)
	s.reconcileHandlers(work)
	var gen *protocol.Work
	settling := map[string]bool{}
	for i := range work {
		switch work[i].Kind {
		case protocol.WorkGeneration:
			gen = &work[i]
		case protocol.WorkSettle:
			if work[i].ToolCallID == "" { // a generation; tools settle in reconcileTools
				settling[work[i].GenerationID] = true
			}
		}
	}
	for id, l := range s.lanes {
		if l.end != nil || l.startedEv != nil {
			continue // its terminal or start event waits to be written
		}
		if gen != nil && gen.RequestID == l.request {
			continue
		}
		cause := ErrStopped
		switch {
		case settling[id]:
			cause = ErrPaused
		case s.state.AI.TerminalGenerations[id] == protocol.GenSuperseded:
			cause = ErrSuperseded
		}
		l.cancelCause = cause
		s.ctx.Send(l.pid, &cancelLane{cause: cause})
		s.rt.opts.Logger.Debug("lane cancelled", "session", s.id, "generation", id, "cause", cause)
	}
	for g := range settling {
		if _, running := s.lanes[g]; !running {
			s.queueWork(supersededEvent(s.id, g, "", 0, "paused"))
		}
	}
	if gen == nil {
		return
	}
	for _, l := range s.lanes {
		if l.request == gen.RequestID {
			return // its attempt runs
		}
	}
	if gen.GenerationID != "" {
		// An attempt on record that no lane runs has lapsed (the process
		// restarted): supersede it first; the replacement starts once that
		// is durable.
		s.queueWork(supersededEvent(s.id, gen.GenerationID, gen.RequestID, gen.Attempt, "claim lapsed"))
		return
	}
	s.startLane(*gen)
}

func supersededEvent(session, gen, request string, attempt int, reason string) protocol.Event {
	return protocol.Event{ID: protocol.DeriveID("superseded", session, gen), Type: protocol.TypeGenerationSuperseded,
		Payload: mustJSON(protocol.GenerationSuperseded{GenerationID: gen, RequestID: request, Attempt: attempt, Reason: reason})}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("actors: marshal " + err.Error()) // payload structs always marshal
	}
	return b
}

// startLane runs attempt w.Attempt+1 of the active request.
func (s *sessionActor) startLane(w protocol.Work) {
	attempt := w.Attempt + 1
	gen := protocol.GenerationIDFor(w.RequestID, attempt)
	l := &lane{gen: gen, request: w.RequestID, attempt: attempt, began: time.Now()}
	l.span = s.generationSpan(w, l)
	// The step's frontier: a copy of what the step reads of the state that
	// the actor's later folds do not touch (StepCopy leaves out the
	// transcript and the maps that grow with the conversation; a resolver
	// that reads the whole state asks the actor: frontier.State), and the
	// prompt, which the actor makes from its own state now (stepPrompt).
	// A step so costs what changed since the step before, not a copy of
	// the whole history.
	box := s.agent.toolbox()
	in := laneInput{
		tools: box.set, toolDefs: box.defs, toolBytes: box.defsBytes,
		agent: s.agent, session: s.id, gen: gen,
		request:  protocol.Event{ID: w.RequestID, Type: protocol.TypeGenerationRequested, Session: s.id},
		response: w.ResponseMessageID,
		app:      s.state.App,
		ai:       s.state.AI.StepCopy(),
		index:    s.index,
		store:    s.store,
		span:     l.span,
		logger:   s.rt.opts.Logger,
	}
	s.stepPrompt(&in)
	l.pid = s.spawnRun(func(ctx context.Context, send func(any)) { runLane(ctx, in, send) })
	s.rt.opts.Logger.DebugContext(spanContext(l.span), "lane started", "session", s.id, "request", w.RequestID, "generation", gen, "attempt", attempt)
	s.lanes[gen] = l
}

// stepPrompt makes a step's prompt from the actor's state at the step's
// start, its frontier: the model context (summary and what follows it),
// its model messages and their size (the session's harness.PromptCache,
// which converts and measures only what changed since the last step and
// lends the prompt to the step until it ends), what defers a compaction
// (protocol.DeferralCache, which also looks at what changed only),
// and, for an agent whose functions read them, the typed messages of the
// model context, copied (protocol.StepMessages). An agent without such
// functions takes no copy of its transcript.
func (s *sessionActor) stepPrompt(in *laneInput) {
	ai := s.state.AI
	settled := func(id string) bool { return !ai.IsActiveResponse(id) }
	summary, after := s.prompts.ModelContext(ai.Messages, settled)
	in.summary = summary
	in.prompt, in.promptBytes, in.release, in.promptErr = s.prompts.Prompt(after, settled)
	if in.agent.readsTranscript() {
		in.context = contextMessages(in.gen, summary, protocol.StepMessages(ai, after))
	}
	if in.agent.opts.Harness.compacts() {
		in.deferral = s.deferrals.Deferral(ai, false)
	}
}

// onLane handles what a lane reports.
func (s *sessionActor) onLane(m any) {
	switch m := m.(type) {
	case *laneStarted:
		s.rt.opts.Logger.Debug("lane reported its start", "session", s.id, "generation", m.gen, "known", s.lanes[m.gen] != nil)
		if l := s.lanes[m.gen]; l != nil {
			ev := protocol.Event{ID: protocol.DeriveID("started", s.id, m.gen), Type: protocol.TypeGenerationStarted,
				Payload: mustJSON(protocol.GenerationStarted{GenerationID: m.gen, RequestID: l.request, Attempt: l.attempt, Model: m.model})}
			l.startedEv, l.startedAt = &ev, s.rt.clock.Now()
			if req := s.metadataRequest(m.model); req != nil && m.limits {
				l.pre = append(l.pre, *req) // in the start write (R-META-01)
			}
		}
	case *laneEvent:
		if l := s.lanes[m.gen]; l != nil && l.end == nil {
			l.pre = append(l.pre, m.ev)
		}
	case *laneChunk:
		if l := s.lanes[m.gen]; l != nil && l.end == nil {
			if len(l.chunks) == 0 {
				l.chunks = m.chunks // the lane hands its batch over
			} else {
				l.chunks = append(l.chunks, m.chunks...)
			}
			l.bufs = append(l.bufs, m.chunks)
			for _, c := range m.chunks {
				if protocol.IsBoundaryChunk(c) {
					l.boundary = true
					if c.Type == protocol.ChunkFinish && l.finishedAt.IsZero() {
						l.finishedAt = s.rt.clock.Now()
					}
				}
			}
		}
	case *laneEnd:
		l := s.lanes[m.gen]
		s.rt.opts.Logger.DebugContext(spanContext(laneSpan(l)), "lane ended", "session", s.id, "generation", m.gen, "known", l != nil, "aborted", m.aborted, "failure", m.failure)
		if l == nil {
			return
		}
		if m.aborted {
			cause := l.cancelCause
			if cause == nil {
				cause = s.childStopCause()
			}
			o, reason := abortOutcome(cause)
			endGeneration(l, o, reason, "")
			s.ctx.Stop(l.pid)
			delete(s.lanes, m.gen)
			s.reconcile()
			break
		}
		if m.noModel && l.startedEv == nil {
			ev := protocol.Event{ID: protocol.DeriveID("started", s.id, m.gen), Type: protocol.TypeGenerationStarted,
				Payload: mustJSON(protocol.GenerationStarted{GenerationID: m.gen, RequestID: l.request, Attempt: l.attempt, Model: m.model})}
			l.startedEv = &ev
		}
		l.end = m
	}
	s.flushSoon()
}

// laneEvents turns what the lanes reported into events for the batch:
// start events, progress batches of at most maxChunks chunks, and the
// terminal event, which commits with the last progress (R-DELIVERY-02).
func (s *sessionActor) laneEvents() []protocol.Event {
	var out []protocol.Event
	max := s.agent.progress.MaxChunks
	for gen, l := range s.lanes {
		if l.span != nil && (l.startedEv != nil || len(l.pre) > 0 || len(l.chunks) > 0) {
			s.trace.writeSpans = append(s.trace.writeSpans, l.span)
		}
		if l.startedEv != nil {
			l.startedEv.Cause = l.request
			out = append(out, *l.startedEv)
			l.startedEv, l.started = nil, true
		}
		out = append(out, l.pre...)
		l.pre = nil
		l.bufs = writtenBufs(l.chunks, l.bufs)
		for len(l.chunks) > 0 {
			n := len(l.chunks)
			if n > max {
				n = max
			}
			ev, err := protocol.NewProgressEvent(protocol.DeriveID("progress", s.id, gen, strconv.Itoa(l.next)), l.request,
				protocol.GenerationProgress{GenerationID: gen, FromIndex: l.next, Chunks: l.chunks[:n]})
			if err != nil {
				panic("actors: marshal " + err.Error()) // chunks always marshal, as in mustJSON
			}
			out = append(out, ev)
			telemetry.Metrics().ChunksPerEvent.Record(context.Background(), int64(n))
			l.next += n
			l.chunks = l.chunks[n:]
		}
		l.chunks, l.boundary = nil, false
		s.spent = append(s.spent, l.bufs...)
		l.bufs = nil
		if e := l.end; e != nil {
			if e.failure != "" {
				out = append(out, protocol.Event{ID: protocol.DeriveID("failed", s.id, gen), Type: protocol.TypeGenerationFailed,
					Payload: mustJSON(protocol.GenerationFailed{GenerationID: gen, Message: e.failure}), Cause: l.request})
			} else {
				out = append(out, protocol.Event{ID: protocol.DeriveID("completed", s.id, gen), Type: protocol.TypeGenerationCompleted,
					Payload: mustJSON(protocol.GenerationCompleted{GenerationID: gen, Usage: e.usage, FinishReason: e.finishReason,
						InputTokenEstimate: e.estimate, InputBytes: e.bytes}), Cause: l.request})
			}
			if e.failure != "" {
				s.endGenerationAfterWrite(l, "failed", e.failure)
			} else {
				s.endGenerationAfterWrite(l, "completed", "")
			}
			s.ctx.Stop(l.pid)
			delete(s.lanes, gen)
		}
	}
	return out
}
