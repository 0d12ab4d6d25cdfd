// What a generation lane runs, on its own goroutine (runLane): the model,
// its settings and prompt at the step's frontier, compaction when due, and
// the checked chunks it sends the session actor (lane.go has the lane's
// life in the actor).

package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// laneInput is what a model step needs, captured when it starts: the
// prompt boundary, so that a recovered step sees its original prompt.
type laneInput struct {
	agent *Agent
	// tools are the agent's tools when the step started: the step offers
	// and checks these, whatever SetTools does meanwhile.
	tools *tools.Set
	// toolDefs are those tools as the step offers them, and toolBytes
	// their JSON's size (the toolbox's, made once per list).
	toolDefs  []harness.ToolDefinition
	toolBytes int64
	session   string
	gen       string
	request   protocol.Event
	response  string
	app       any
	// ai is a copy of the state at the step's start, for the compaction
	// decision (calibration, model limits, unsettled tool work), and index
	// the log index it folds.
	ai    *protocol.AIState
	index uint64
	// The step's prompt, made by the session actor at its start
	// (stepPrompt): the model context's summary, the model messages of
	// what follows it and their protocol.MessageBytes, or the error of
	// their conversion. The messages are lent: release, when the step has
	// ended, gives them back to the session's cache.
	summary     string
	prompt      []harness.ModelMessage
	promptBytes int64
	promptErr   error
	release     func()
	// context is the typed model context (contextMessages), for an agent
	// whose functions read it (Agent.readsTranscript); nil otherwise.
	context []protocol.TranscriptMessage
	// deferral is what defers a compaction at the step's start
	// (protocol.CompactionDeferral), for an agent that compacts.
	deferral string
	// store serves reads through other reducers (frontier.Reducer).
	store persistence.Store
	// span is the attempt's span, the parent of its model calls (nil
	// without a trace).
	span trace.Span
	// logger gets a panic's stack.
	logger *slog.Logger
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
	defer in.release() // the step reads its prompt no more
	// Callbacks see the prompt messages, already compacted (R-GEN-12).
	rc := harness.ResolverContext{Event: in.request, Messages: in.context, State: in.app}
	if in.ai != nil {
		rc.Session = frontier{index: in.index, store: in.store, session: in.session, contract: in.agent.contract, ask: send}
	}
	end := func(e *laneEnd) {
		if ctx.Err() != nil {
			e = &laneEnd{gen: in.gen, aborted: true}
		}
		send(e)
	}
	if ctx.Err() != nil {
		// Cancelled before this goroutine ran (the session stopped, the
		// step was superseded): no resolver and no model is called.
		send(&laneEnd{gen: in.gen, aborted: true})
		return
	}
	// A panic in a resolver, a harness or a model's stream fails the step
	// as an error of its own would (R-GEN-16 before the start is reported,
	// the step's failure after it); the node goes on.
	started, modelName := false, ""
	defer func() {
		if p := recover(); p != nil {
			in.logger.Error("a model step panicked", "session", in.session, "generation", in.gen, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			end(&laneEnd{gen: in.gen, failure: fmt.Sprintf("the model step panicked: %v", p), noModel: !started, model: modelName})
		}
	}()
	settings, err := a.Model.Resolve(ctx, rc)
	if err != nil {
		end(&laneEnd{gen: in.gen, failure: err.Error(), noModel: true})
		return
	}
	modelName = settings.Model
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
	// custom generate compacts only when configured to (R-GEN-30), a loop
	// harness by default.
	var choice CompactionChoice
	compactable := a.Harness.compacts()
	if compactable {
		if choice, err = in.agent.compactionFor(ctx, rc, gs); err != nil {
			failEarly(err)
			return
		}
	}
	send(&laneStarted{gen: in.gen, model: settings.Model,
		limits: compactable && choice.Custom == nil && choice.Options.Discovery()})
	started = true
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
	// The toolbox's definitions, shared by the steps that offer them: the
	// capacity is the length, so a provider that appends copies first.
	req.Tools = in.toolDefs[:len(in.toolDefs):len(in.toolDefs)]
	// The prompt: the same as ConvertToModelMessages and EstimateBytes of
	// the model context, made by the session actor (stepPrompt), with the
	// summary, when there is one, as its first message.
	prompt := func(summary string, msgs []harness.ModelMessage, bytes int64) int64 {
		if summary != "" {
			sm, _ := harness.ConvertToModelMessages([]protocol.TranscriptMessage{protocol.SummaryMessage(in.gen, summary)})
			msgs = append(sm, msgs...)
		}
		req.Messages = msgs
		return bytes + in.toolBytes + int64(len(instructions)) + int64(len(summary))
	}
	if in.promptErr != nil {
		end(&laneEnd{gen: in.gen, failure: in.promptErr.Error()})
		return
	}
	bytes := prompt(in.summary, in.prompt, in.promptBytes)
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
		// The compaction part ends the transcript: the model context is
		// its summary alone.
		bytes = prompt(summary, nil, 0)
		if in.agent.readsTranscript() {
			rc.Messages = contextMessages(in.gen, summary, nil) // this step's compaction included (R-GEN-29)
		}
	}
	gc := GenerateContext{ResolverContext: rc, GenerationID: in.gen, ModelMessages: req.Messages,
		Model: settings, Instructions: instructions, Tools: req.Tools, Generation: gs}
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
	// A batch is taken from the pool when a chunk comes for it: one taken
	// after the last hand-over was a 9 KiB allocation per step that went to
	// the collector instead of back to the pool.
	var batch []protocol.UIMessageChunk
	flush := func() {
		if len(batch) > 0 {
			send(&laneChunk{gen: in.gen, chunks: batch})
			batch = nil
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
		if batch == nil {
			batch = newChunkBuf()
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

// contextMessages is the typed model context of a step: after the latest
// completed compaction, its summary (as a message) and what follows it;
// without one, every message (R-GEN-12, R-COMPACT-03).
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
	t, ok := in.tools.Get(c.ToolName)
	if !ok {
		return append(out, protocol.UIMessageChunk{Type: protocol.ChunkToolInputError, ToolCallID: c.ToolCallID, ToolName: c.ToolName,
			Input: c.Input, ErrorText: "no tool named " + strconv.Quote(c.ToolName) + " is available"})
	}
	if err := in.tools.Validate(c.ToolName, c.Input); err != nil {
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
	d := protocol.CompactionDecide(tokens, threshold, in.deferral)
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
	if in.deferral != "" {
		return "", false, nil
	}
	typed := in.context
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
