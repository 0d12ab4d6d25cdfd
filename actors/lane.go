package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/persistence"
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
	// the lane's next report until startHold after it (tryFlush).
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
	// at once, and its chunks wait for it up to startHold (tryFlush).
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

// laneActor is the generation lane's child actor: it runs one model step
// in a goroutine whose context carries the abort cause.
type laneActor struct {
	run    func(ctx context.Context, send func(any))
	parent *actor.PID
	cancel context.CancelCauseFunc
	// stopCause is why the session stops (sessionActor.childStopCause).
	stopCause func() error
}

type cancelLane struct{ cause error }

func (l *laneActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		ctx, cancel := context.WithCancelCause(context.Background())
		l.cancel = cancel
		sys, parent := c.ActorSystem(), l.parent
		go l.run(ctx, func(msg any) { sys.Root.Send(parent, msg) })
	case *cancelLane:
		l.cancel(m.cause)
	case *actor.Stopping:
		if l.cancel != nil {
			l.cancel(l.stopCause())
		}
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
	work := protocol.AppendPending(s.workBuf[:0], s.agent.work, s.state.AI)
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
	// The step's frontier: a copy of the state that the actor's later folds
	// do not touch. StepCopy copies the parts of the active response only,
	// the one message folds change in place; the rest of the transcript is
	// shared, read-only, and the maps that grow with the conversation are
	// left out, so a step costs no copy of the whole history (a resolver
	// that reads the whole state asks the actor: frontier.State).
	snap := s.state.AI.StepCopy()
	in := laneInput{
		agent: s.agent, session: s.id, gen: gen,
		request:  protocol.Event{ID: w.RequestID, Type: protocol.TypeGenerationRequested, Session: s.id},
		response: w.ResponseMessageID,
		messages: snap.Messages,
		app:      s.state.App,
		ai:       snap,
		index:    s.index,
		store:    s.store,
		span:     l.span,
		prompts:  &s.prompts,
	}
	props := actor.PropsFromProducer(func() actor.Actor {
		return &laneActor{parent: s.self, run: func(ctx context.Context, send func(any)) { runLane(ctx, in, send) }, stopCause: s.childStopCause}
	}, actor.WithDispatcher(s.rt.dispatcher))
	l.pid = s.ctx.Spawn(props)
	s.rt.opts.Logger.DebugContext(spanContext(l.span), "lane started", "session", s.id, "request", w.RequestID, "generation", gen, "attempt", attempt)
	s.lanes[gen] = l
}

// onLane handles what a lane reports.
func (s *sessionActor) onLane(m any) {
	switch m := m.(type) {
	case *laneStarted:
		s.rt.opts.Logger.Debug("lane reported its start", "session", s.id, "generation", m.gen, "known", s.lanes[m.gen] != nil)
		if l := s.lanes[m.gen]; l != nil {
			ev := protocol.Event{ID: protocol.DeriveID("started", s.id, m.gen), Type: protocol.TypeGenerationStarted,
				Payload: mustJSON(protocol.GenerationStarted{GenerationID: m.gen, RequestID: l.request, Attempt: l.attempt, Model: m.model})}
			l.startedEv, l.startedAt = &ev, time.Now()
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
						l.finishedAt = time.Now()
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

// laneInput is what a model step needs, captured when it starts: the
// prompt boundary, so that a recovered step sees its original prompt.
type laneInput struct {
	agent    *Agent
	session  string
	gen      string
	request  protocol.Event
	response string
	messages []protocol.TranscriptMessage
	app      any
	// ai is a copy of the state at the step's start, for the compaction
	// decision (calibration, model limits, unsettled tool work), and index
	// the log index it folds.
	ai    *protocol.AIState
	index uint64
	// store serves reads through other reducers (frontier.Reducer).
	store persistence.Store
	// span is the attempt's span, the parent of its model calls (nil
	// without a trace).
	span trace.Span
	// prompts is the session's cache of its settled messages' share of a
	// prompt (harness.PromptCache).
	prompts *harness.PromptCache
}

// runLane runs one model step (R-GEN-01): resolve the model and settings,
// assemble the prompt from the model context (summary and what follows),
// stream the model's chunks to the session actor, and report the end. A
// resolver error fails the turn once, without retry (R-GEN-16); a
// cancelled context ends quietly.
func runLane(ctx context.Context, in laneInput, send func(any)) {
	a := in.agent.opts
	if in.span != nil {
		ctx = trace.ContextWithSpan(ctx, in.span)
	}
	// Callbacks see the prompt messages, already compacted (R-GEN-12).
	settled := func(id string) bool { return !in.ai.IsActiveResponse(id) }
	modelContext := func(m []protocol.TranscriptMessage) (string, []protocol.TranscriptMessage) {
		return in.prompts.ModelContext(m, settled)
	}
	summary, after := modelContext(in.messages)
	rc := harness.ResolverContext{Event: in.request, Messages: contextMessages(in.gen, summary, after), State: in.app}
	if in.ai != nil {
		rc.Session = frontier{index: in.index, store: in.store, session: in.session, contract: in.agent.contract, ask: send}
	}
	end := func(e *laneEnd) {
		if ctx.Err() != nil {
			e = &laneEnd{gen: in.gen, aborted: true}
		}
		send(e)
	}
	settings, err := a.Model.Resolve(ctx, rc)
	if err != nil {
		end(&laneEnd{gen: in.gen, failure: err.Error(), noModel: true})
		return
	}
	// A failure before the start is reported ends the step with a start
	// event of its own (noModel).
	failEarly := func(err error) {
		end(&laneEnd{gen: in.gen, failure: err.Error(), noModel: true, model: settings.Model})
	}
	instructions, err := a.Instructions.Resolve(ctx, rc)
	if err != nil {
		failEarly(err)
		return
	}
	gs := a.Harness.Generation
	if a.Harness.GenerationFunc != nil {
		if gs, err = a.Harness.GenerationFunc(ctx, rc); err == nil {
			err = gs.Validate()
		}
		if err != nil {
			failEarly(err)
			return
		}
	}
	gs = harness.WithModelSettings(gs, settings)
	userSettings := gs // what a custom generate receives (R-GEN-25)
	gs = harness.WithGatewayDefaults(gs, in.session)
	// The compaction choice, resolved once per generation (R-COMPACT-14)
	// before the start is written: the start write asks for the model's
	// limits only when the choice needs them (R-META-01, R-META-07). A
	// custom generate compacts only when configured to (R-GEN-30).
	var choice CompactionChoice
	compactable := a.Harness.Generate == nil || a.Harness.compactionConfigured()
	if compactable {
		if choice, err = in.agent.compactionFor(ctx, rc, gs); err != nil {
			failEarly(err)
			return
		}
	}
	send(&laneStarted{gen: in.gen, model: settings.Model,
		limits: compactable && choice.Custom == nil && choice.Options.Discovery()})
	// The model serves the default generator and automatic compaction's
	// summary request; a custom generate may do without.
	var model harness.Model
	if a.Harness.Generate == nil || a.Models != nil {
		if model, err = a.Models(settings.Model); err != nil {
			end(&laneEnd{gen: in.gen, failure: err.Error()})
			return
		}
	}
	req := harness.Request{Model: settings.Model, System: instructions, Settings: gs,
		Headers: harness.RequestHeaders(nil, gs), SessionID: in.session, GenerationID: in.gen}
	for _, name := range in.agent.tools.Names() {
		t, _ := in.agent.tools.Get(name)
		schema := t.InputSchema
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		req.Tools = append(req.Tools, harness.ToolDefinition{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	messages := in.messages
	toolsJSON, _ := json.Marshal(req.Tools)
	prompt := func() (int64, error) {
		// The same as ConvertToModelMessages and EstimateBytes of the
		// model context, with what the settled messages contribute kept
		// from the session's earlier steps.
		summary, after := modelContext(messages)
		msgs, bytes, err := in.prompts.Prompt(after, settled)
		if err != nil {
			return 0, err
		}
		if summary != "" {
			sm, _ := harness.ConvertToModelMessages([]protocol.TranscriptMessage{protocol.SummaryMessage(in.gen, summary)})
			msgs = append(sm, msgs...)
		}
		req.Messages = msgs
		return bytes + int64(len(toolsJSON)) + int64(len(instructions)) + int64(len(summary)), nil
	}
	bytes, err := prompt()
	if err != nil {
		end(&laneEnd{gen: in.gen, failure: err.Error()})
		return
	}
	// Compaction before the step (R-COMPACT-02): when the calibrated
	// estimate crosses the threshold and nothing defers it, one summary
	// request to the same model; the step then sees the summary and what
	// follows it.
	stepCtx := ctx
	if d := a.Harness.StepTimeout; d > 0 {
		var cancel context.CancelFunc
		stepCtx, cancel = context.WithTimeoutCause(ctx, d, fmt.Errorf("the model step timed out after %s", d))
		defer cancel()
	}
	timedOut := func(err error) error {
		if stepCtx.Err() != nil && ctx.Err() == nil {
			return context.Cause(stepCtx)
		}
		return err
	}
	if summary, ok, err := compact(stepCtx, in, model, req, settings.Model, bytes, send, rc, choice, compactable); err != nil {
		end(&laneEnd{gen: in.gen, failure: timedOut(err).Error()})
		return
	} else if ok {
		part := protocol.Part{Type: protocol.PartCompaction, ID: in.gen,
			Data: mustJSON(protocol.CompactionData{Status: protocol.CompactionStatusCompleted, Summary: summary})}
		last := append([]protocol.TranscriptMessage(nil), messages...)
		last = append(last, protocol.TranscriptMessage{ID: "compacted", Role: protocol.RoleAssistant, Parts: []protocol.Part{part}})
		messages = last
		if bytes, err = prompt(); err != nil {
			end(&laneEnd{gen: in.gen, failure: err.Error()})
			return
		}
	}
	gc := GenerateContext{ResolverContext: rc, GenerationID: in.gen, ModelMessages: req.Messages,
		Model: settings, Instructions: instructions, Tools: req.Tools, Generation: gs}
	summary, after = modelContext(messages)
	gc.Messages = contextMessages(in.gen, summary, after) // this step's compaction included (R-GEN-29)
	metadata := a.Harness.MessageMetadata
	var stream harness.Stream
	stepCtx, call := startModelCall(stepCtx, settings.Model, in.session)
	if generate := a.Harness.Generate; generate != nil {
		metadata = nil // the default generator's only (R-GEN-28)
		g := gc
		g.Generation = userSettings
		if stream, err = generate(stepCtx, g); err == nil && stream == nil {
			err = errors.New("harness.generate returned no stream")
		}
	} else {
		stream, err = model.Stream(stepCtx, req)
	}
	if err != nil {
		call.end(nil, "", err)
		end(&laneEnd{gen: in.gen, failure: timedOut(err).Error()})
		return
	}
	defer stream.Close()
	result := &laneEnd{gen: in.gen, estimate: protocol.TokensOf(bytes), bytes: bytes}
	// Chunks the stream has at hand go together, up to maxChunks; the
	// rest as they come (R-PROGRESS-02).
	ready, _ := stream.(harness.ReadyStream)
	batch := newChunkBuf()
	flush := func() {
		if len(batch) > 0 {
			send(&laneChunk{gen: in.gen, chunks: batch})
			batch = newChunkBuf()
		}
	}
	for {
		c, err := stream.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			flush()
			call.end(result.usage, "", err)
			end(&laneEnd{gen: in.gen, failure: timedOut(err).Error()})
			return
		}
		call.chunk()
		usage := harness.TakeUsage(&c)
		if usage != nil {
			result.usage = usage
		}
		if c.Type == protocol.ChunkFinish {
			result.finishReason = c.FinishReason
		}
		if err := checkChunk(a.Harness.Generate != nil, in.response, metadata, gc, &c, usage); err != nil {
			flush()
			call.end(result.usage, result.finishReason, err)
			end(&laneEnd{gen: in.gen, failure: err.Error()})
			return
		}
		batch = appendChecked(batch, in, gs, c)
		if ready == nil || len(batch) >= in.agent.progress.MaxChunks || !ready.Ready() {
			flush()
		}
	}
	flush()
	call.end(result.usage, result.finishReason, nil)
	end(result)
}

// promptMessages is the typed model context of a step: after the latest
// completed compaction, its summary (as a message) and what follows it;
// without one, every message (R-GEN-12, R-COMPACT-03).
func promptMessages(gen string, messages []protocol.TranscriptMessage) []protocol.TranscriptMessage {
	summary, after := protocol.ModelContext(messages)
	return contextMessages(gen, summary, after)
}

// contextMessages is promptMessages of a model context already found.
func contextMessages(gen string, summary string, after []protocol.TranscriptMessage) []protocol.TranscriptMessage {
	if summary == "" {
		return after
	}
	return append([]protocol.TranscriptMessage{protocol.SummaryMessage(gen, summary)}, after...)
}

// checkChunk applies what the agent's harness options ask of a streamed
// chunk: a custom generate must write the response message (R-GEN-29), and
// the metadata MessageMetadata returns for the start and finish chunks is
// recorded on them (R-GEN-27, R-PROGRESS-06). An error fails the
// generation.
func checkChunk(custom bool, response string, metadata func(MetadataContext) any, gc GenerateContext, c *protocol.UIMessageChunk, usage *protocol.Usage) error {
	if custom && c.Type == protocol.ChunkStart && c.MessageID != "" && c.MessageID != response {
		return fmt.Errorf("harness.generate: the stream writes message %q, not the response %q", c.MessageID, response)
	}
	if metadata == nil {
		return nil
	}
	v := metadata(MetadataContext{GenerateContext: gc, Part: *c, TotalUsage: usage})
	if v == nil || (c.Type != protocol.ChunkStart && c.Type != protocol.ChunkFinish) {
		return nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("harness.messageMetadata: %w", err)
	}
	if string(raw) == "null" {
		return nil
	}
	if raw[0] != '{' {
		return fmt.Errorf("harness.messageMetadata: metadata must be a JSON object, not %s", raw)
	}
	c.MessageMeta = protocol.MergeMetadata(c.MessageMeta, raw)
	return nil
}

// chunkBufs recycles the batches of chunks lanes hand to their session
// (laneChunk): the session returns them once the progress events built from
// them are folded and made Plain. A fresh batch per hand-over was a quarter
// of the bytes allocated with a thousand streams (BenchmarkProgressBatching).
var chunkBufs sync.Pool // of *[]protocol.UIMessageChunk

// maxRecycledChunks bounds the batches kept for reuse.
const maxRecycledChunks = 1024

func newChunkBuf() []protocol.UIMessageChunk {
	if b, ok := chunkBufs.Get().(*[]protocol.UIMessageChunk); ok {
		return *b
	}
	return make([]protocol.UIMessageChunk, 0, 16)
}

// writtenBufs returns the batches handed over since the last write (bufs),
// each as long as what may have been written into it. chunks is their
// concatenation, made by appending each later batch onto the first: in
// place, into its spare capacity, as long as that lasted. When chunks still
// lies in one of them, that one's length is extended over chunks; when an
// append moved chunks to an array of its own, how far the in-place appends
// went before is not known, and every batch is extended to its capacity.
func writtenBufs(chunks []protocol.UIMessageChunk, bufs [][]protocol.UIMessageChunk) [][]protocol.UIMessageChunk {
	if len(bufs) < 2 || len(chunks) == 0 {
		return bufs // one hand-over: nothing was appended
	}
	for i, b := range bufs {
		if cap(b) > 0 && &chunks[0] == &b[:1][0] {
			bufs[i] = b[:max(len(b), min(len(chunks), cap(b)))]
			return bufs
		}
	}
	for i, b := range bufs {
		bufs[i] = b[:cap(b)]
	}
	return bufs
}

// recycleChunkBufs returns bufs for reuse, cleared so that they hold on to
// nothing. Only up to each one's length: nothing wrote beyond it (the lane
// appends up to it; the session's appends into the first batch of a write
// extend its length, see laneEvents), and what lies beyond was cleared
// before. Clearing whole capacities (16 chunks of about 500 bytes, for the
// one chunk a steady stream hands over) was 3% of the CPU at 1,000
// streams.
func recycleChunkBufs(bufs [][]protocol.UIMessageChunk) {
	for _, b := range bufs {
		if cap(b) > maxRecycledChunks {
			continue
		}
		clear(b)
		b = b[:0]
		chunkBufs.Put(&b)
	}
}

// appendChecked appends chunk c to out, checked: a local tool call's input
// is validated against the tool's schema, a rejected input becoming an
// error result the model sees (the tool does not run), and approval is
// asked when the tool's predicate or the generation's ToolApproval policy
// says so (R-APPROVAL-09: it is evaluated once for the durable call).
func appendChecked(out []protocol.UIMessageChunk, in laneInput, gs harness.GenerationSettings, c protocol.UIMessageChunk) []protocol.UIMessageChunk {
	if c.Type != protocol.ChunkToolInputAvailable || (c.ProviderExec != nil && *c.ProviderExec) {
		return append(out, c)
	}
	t, ok := in.agent.tools.Get(c.ToolName)
	if !ok {
		return append(out, protocol.UIMessageChunk{Type: protocol.ChunkToolInputError, ToolCallID: c.ToolCallID, ToolName: c.ToolName,
			Input: c.Input, ErrorText: "no tool named " + strconv.Quote(c.ToolName) + " is available"})
	}
	if err := in.agent.tools.Validate(c.ToolName, c.Input); err != nil {
		return append(out, protocol.UIMessageChunk{Type: protocol.ChunkToolInputError, ToolCallID: c.ToolCallID, ToolName: c.ToolName,
			Input: c.Input, ErrorText: err.Error()})
	}
	out = append(out, c)
	if (t.NeedsApproval != nil && t.NeedsApproval(c.Input)) || (gs.ToolApproval != nil && gs.ToolApproval(c.ToolName, c.Input)) {
		out = append(out, protocol.UIMessageChunk{Type: protocol.ChunkToolApproval, ToolCallID: c.ToolCallID,
			ApprovalID: protocol.DeriveID("approval", in.gen, c.ToolCallID)})
	}
	return out
}

// compact runs the step's compaction when it is due: it records
// ai.compaction.requested (with the automatic policy's figures), sends one
// summary request to the active model with the same instructions, tools
// and settings plus A2's summary instruction (R-COMPACT-02, OQ-27), and
// records ai.compaction.completed. An empty summary or a summary tool call
// fails the generation (R-COMPACT-08). It returns the summary and whether
// a compaction happened.
func compact(ctx context.Context, in laneInput, model harness.Model, req harness.Request, modelID string, bytes int64, send func(any), rc harness.ResolverContext, choice CompactionChoice, compactable bool) (summary string, _ bool, err error) {
	if !compactable {
		return "", false, nil // a custom generate compacts only when asked to (R-GEN-30)
	}
	opts := choice.Options
	if opts.Disabled || in.ai == nil {
		return "", false, nil
	}
	if choice.Custom != nil {
		return compactCustom(ctx, in, req, modelID, bytes, send, rc, choice.Custom)
	}
	if !choice.explicitAutomatic() && req.Settings.ImplicitCompactionSkip() != "" {
		return "", false, nil // implicit compaction skips these steps (R-COMPACT-17)
	}
	threshold := opts.ThresholdTokens
	if threshold == 0 {
		md, ok := in.ai.ModelMetadata[modelID]
		if !ok || md.Status != protocol.MetadataResolved || md.ContextWindow == 0 {
			return "", false, nil // limits unknown: no compaction before the lookup lands (R-COMPACT-23)
		}
		var maxOut int64
		if req.Settings.MaxOutputTokens != nil {
			maxOut = *req.Settings.MaxOutputTokens
		}
		threshold = protocol.DefaultThreshold(md.ContextWindow, maxOut)
	}
	tokens := protocol.CalibratedTokens(bytes, modelID, in.ai.Calibration)
	d := protocol.ShouldCompact(in.ai, tokens, threshold, false)
	if !d.Compact {
		return "", false, nil
	}
	estimate := protocol.TokensOf(bytes)
	ctx, span := compactionSpan(ctx, in, tokens, threshold)
	defer func() { endCompaction(span, summary, err) }()
	send(&laneEvent{gen: in.gen, ev: protocol.Event{ID: protocol.DeriveID("compaction", in.session, in.gen), Type: protocol.TypeCompactionRequested,
		Payload: mustJSON(protocol.CompactionRequested{GenerationID: in.gen, ResponseMessageID: in.response,
			InputTokenEstimate: &estimate, InputTokens: &tokens, ThresholdTokens: &threshold})}})
	instruction := protocol.SummaryInstructions
	if opts.Instructions != "" {
		instruction += "\n\n" + opts.Instructions
	}
	if model == nil {
		return "", false, errors.New("compaction: automatic compaction needs models to send its summary request")
	}
	sreq := req
	sreq.Messages = append(append([]harness.ModelMessage(nil), req.Messages...),
		harness.ModelMessage{Role: harness.ModelRoleUser, Content: []harness.ContentPart{{Type: harness.ContentText, Text: instruction}}})
	cctx, call := startModelCall(ctx, modelID, in.session)
	stream, err := model.Stream(cctx, sreq)
	if err != nil {
		call.end(nil, "", err)
		return "", false, err
	}
	defer stream.Close()
	var b strings.Builder
	var usage *protocol.Usage
	var finish string
	for {
		c, err := stream.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			call.end(usage, "", err)
			return "", false, err
		}
		call.chunk()
		if u := harness.TakeUsage(&c); u != nil {
			usage = u
		}
		switch c.Type {
		case protocol.ChunkTextDelta:
			b.WriteString(c.Delta)
		case protocol.ChunkFinish:
			finish = c.FinishReason
		case protocol.ChunkToolInputStart, protocol.ChunkToolInputAvailable:
			err := errors.New("compaction: the summary request called a tool")
			call.end(usage, finish, err)
			return "", false, err
		}
	}
	call.end(usage, finish, nil)
	summary = strings.TrimSpace(b.String())
	if summary == "" {
		return "", false, errors.New("compaction: the summary is empty")
	}
	send(&laneEvent{gen: in.gen, ev: protocol.Event{ID: protocol.DeriveID("compacted", in.session, in.gen), Type: protocol.TypeCompactionCompleted,
		Payload: mustJSON(protocol.CompactionCompleted{GenerationID: in.gen, Summary: summary, Usage: usage})}})
	return summary, true, nil
}

// compactCustom runs an application's compaction policy before a step
// (R-COMPACT-13): while a tool exchange or tool work is unsettled it is not
// asked; otherwise ShouldCompact sees the typed and model-ready context,
// summary included, and Compact's summary is recorded like an automatic
// one. An empty summary fails the generation (R-COMPACT-08).
func compactCustom(ctx context.Context, in laneInput, req harness.Request, modelID string, bytes int64, send func(any), rc harness.ResolverContext, policy *CustomCompaction) (string, bool, error) {
	if protocol.CompactionDeferral(in.ai, false) != "" {
		return "", false, nil
	}
	typed := promptMessages(in.gen, in.messages)
	tokens := protocol.CalibratedTokens(bytes, modelID, in.ai.Calibration)
	cc := CompactionContext{SessionID: in.session, GenerationID: in.gen, Model: modelID, Messages: typed,
		ModelMessages: req.Messages, InputTokens: tokens, State: rc.State}
	ok, err := policy.ShouldCompact(ctx, cc)
	if err != nil {
		return "", false, fmt.Errorf("compaction: ShouldCompact: %w", err)
	}
	if !ok {
		return "", false, nil
	}
	estimate := protocol.TokensOf(bytes)
	send(&laneEvent{gen: in.gen, ev: protocol.Event{ID: protocol.DeriveID("compaction", in.session, in.gen), Type: protocol.TypeCompactionRequested,
		Payload: mustJSON(protocol.CompactionRequested{GenerationID: in.gen, ResponseMessageID: in.response,
			InputTokenEstimate: &estimate, InputTokens: &tokens})}})
	text, err := policy.Compact(ctx, cc)
	if err != nil {
		return "", false, fmt.Errorf("compaction: Compact: %w", err)
	}
	text = strings.TrimSpace(text)
	if text == "" {
		return "", false, errors.New("compaction: the summary is empty")
	}
	send(&laneEvent{gen: in.gen, ev: protocol.Event{ID: protocol.DeriveID("compacted", in.session, in.gen), Type: protocol.TypeCompactionCompleted,
		Payload: mustJSON(protocol.CompactionCompleted{GenerationID: in.gen, Summary: text})}})
	return text, true, nil
}

// frontier is a resolver's view of its session: the state captured when
// the step started (the prompt frontier), never a later one.
type frontier struct {
	index    uint64
	store    persistence.Store
	session  string
	contract *protocol.Contract
	// ask sends to the session actor.
	ask func(any)
}

// frontierRequest asks the session actor for a copy of its state if it is
// still at index: nil on reply when it has moved on.
type frontierRequest struct {
	index uint64
	reply chan *protocol.AIState // buffered: the actor never waits
}

// frontierWait bounds the wait for the session actor's answer; after it,
// State folds the log instead.
const frontierWait = 5 * time.Second

// State returns the session's state at the frontier. The step's own copy
// (AIState.StepCopy) leaves out the maps that grow with the conversation,
// so State asks the session actor for a whole copy while the session is
// still at the frontier (a resolver usually reads at the step's start,
// before anything moves), and otherwise folds the log from the latest
// snapshot (or the start) up to the frontier.
func (f frontier) State(ctx context.Context) (*protocol.AIState, uint64, error) {
	req := &frontierRequest{index: f.index, reply: make(chan *protocol.AIState, 1)}
	f.ask(req)
	wait := time.NewTimer(frontierWait)
	defer wait.Stop()
	select {
	case st := <-req.reply:
		if st != nil {
			return st, f.index, nil
		}
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	case <-wait.C:
	}
	st, at, err := replay(ctx, f.store, f.contract, f.session, f.index, func(string, error) {})
	if err != nil {
		return nil, 0, err
	}
	return st.AI, at, nil
}

// Reducer folds the log with r up to the frontier, or through (R-CONTRACT-19).
// It replays the log from the start: snapshots hold the contract's
// reducers, not r.
func (f frontier) Reducer(ctx context.Context, r protocol.AppReducer, through uint64) (any, uint64, error) {
	if r == nil {
		return nil, 0, errors.New("actors: Reducer needs a reducer")
	}
	upTo := f.index
	if through != 0 {
		upTo = through
	}
	var state any
	var at uint64
	for at < upTo {
		evs, err := f.store.Read(ctx, f.session, at, int(min(upTo-at, persistence.FollowPage)))
		if err != nil {
			return nil, 0, err
		}
		if len(evs) == 0 {
			break // through is past the end of the log
		}
		if state, err = protocol.Reduce(r, state, evs); err != nil {
			return nil, 0, err
		}
		at = evs[len(evs)-1].Index
	}
	state, err := protocol.Reduce(r, state, nil) // the initial state of an empty read
	return state, at, err
}
