package actors

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/a2-runtime/a2/actors/sessionpb"
	"github.com/a2-runtime/a2/internal/wire"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/telemetry"
)

// Traces of a session (docs/telemetry.md has the span tree).
//
// A push arrives with its caller's trace context (sessionpb.PushRequest's
// trace). Its admit span covers the session actor's part: decisions,
// admission, the write, until durable. The actor remembers, in memory
// only, which command span caused what: the input a send queued and the
// generation requests a push produced. A turn's invoke_agent span starts
// with its first generation attempt, as a child of the command that sent
// its input, and ends when the turn is no longer active; each attempt is
// an a2.generation span under the turn (or under the command that asked
// for it, a retry say, linked to the turn), with its chat and compaction
// spans; each tool execution an execute_tool span under the attempt that
// called it. Each batch write is an a2.store.append span under the first
// cause in the batch, linked to the others. Work resumed after a restart
// starts a trace of its own (its attempts and tool executions are root
// spans): the causes were in the memory of the process that died, and a
// trace is not durable state.
//
// With tracing off no span context is valid and none of the maps is made:
// what this costs is a few nil checks per event.
type sessionTrace struct {
	turnID    string
	turn      trace.Span
	turnCause trace.SpanContext
	// causeOf maps a generation request to the command span that produced
	// it; inputs maps an input message to the command span that sent it;
	// gens maps a generation attempt to its span, the tools' parent.
	causeOf traceRefs
	inputs  traceRefs
	gens    traceRefs
	// writeSpans are the live spans of what joins the next write besides
	// pushes (lanes, tool results); afterWrite ends the spans whose last
	// write that is, once it is durable.
	writeSpans []trace.Span
	afterWrite []func()
}

// maxTraceEntries bounds each list: entries for inputs that are never
// admitted (removed from the inbox) must not pile up.
const maxTraceEntries = 64

// traceRefs maps keys to span contexts. It holds a few entries at a time
// (a turn's input, its requests, its attempts): a list searched from its
// end costs less than a map made for each session.
type traceRefs []traceRef

type traceRef struct {
	key string
	sc  trace.SpanContext
}

func (r *traceRefs) put(k string, sc trace.SpanContext) {
	if !sc.IsValid() {
		return
	}
	if len(*r) >= maxTraceEntries {
		*r = (*r)[:0]
	}
	r.take(k)
	*r = append(*r, traceRef{k, sc})
}

func (r traceRefs) get(k string) trace.SpanContext {
	for i := len(r) - 1; i >= 0; i-- {
		if r[i].key == k {
			return r[i].sc
		}
	}
	return trace.SpanContext{}
}

// take returns k's span context and forgets it.
func (r *traceRefs) take(k string) trace.SpanContext {
	for i := len(*r) - 1; i >= 0; i-- {
		if (*r)[i].key == k {
			sc := (*r)[i].sc
			*r = append((*r)[:i], (*r)[i+1:]...)
			return sc
		}
	}
	return trace.SpanContext{}
}

// endingSpan is a span whose attributes are kept until it ends and set
// then, in one call: the SDK copies a span's start options and grows its
// attribute slice with every call, so a span with attributes at its start
// and more at its end costs twice the allocations of one that gets them
// all at once. Samplers see no attributes at a span's start (A2 samples
// by its parent, not by attributes).
type endingSpan struct {
	trace.Span
	attrs []attribute.KeyValue
}

// ending wraps span, nil when span is nil; attrs become its attributes at
// its end, with those set in between.
func ending(span trace.Span, attrs []attribute.KeyValue) trace.Span {
	if span == nil {
		return nil
	}
	if !span.IsRecording() {
		return span
	}
	return &endingSpan{Span: span, attrs: attrs}
}

func (e *endingSpan) SetAttributes(kv ...attribute.KeyValue) { e.attrs = append(e.attrs, kv...) }

func (e *endingSpan) End(opts ...trace.SpanEndOption) {
	if e.attrs != nil {
		e.Span.SetAttributes(e.attrs...)
		e.attrs = nil
	}
	e.Span.End(opts...)
}

// admitSpan starts the span of a push in the session actor; nil when the
// push carries no trace.
func (s *sessionActor) admitSpan(m *sessionpb.PushRequest, events []protocol.Event) trace.Span {
	if len(m.Trace) == 0 {
		return nil
	}
	ctx := telemetry.Extract(context.Background(), m.Trace)
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	types := make([]string, len(events))
	for i, ev := range events {
		types[i] = ev.Type
	}
	attrs := make([]attribute.KeyValue, 0, 9) // and decisions, log index, error type
	attrs = append(attrs, attribute.String(telemetry.GenAIConversationID, s.id), attribute.String(telemetry.GenAIAgentName, s.agent.Name()),
		attribute.StringSlice(telemetry.AttrEventTypes, types), attribute.Int(telemetry.AttrEventCount, len(events)),
		attribute.Bool(telemetry.AttrTrusted, m.Trusted))
	if s.lease.Epoch > 0 {
		attrs = append(attrs, attribute.Int64(telemetry.AttrLeaseEpoch, int64(s.lease.Epoch)))
	}
	_, span := telemetry.Start(ctx, telemetry.SpanAdmit)
	return ending(span, attrs)
}

// traceDecided records what a push produced in the batch (its own events,
// the decisions and the control lane's steps after it): the decisions on
// its span, and which inputs and generation requests it caused.
func (s *sessionActor) traceDecided(p *pendingPush, produced []protocol.Event) {
	if p.span == nil || !p.span.IsRecording() {
		return
	}
	sc := p.span.SpanContext()
	var decisions []string
	for _, ev := range produced {
		switch ev.Type {
		case protocol.TypeControlDecided:
			var d protocol.Decided
			if json.Unmarshal(ev.Payload, &d) == nil {
				decisions = append(decisions, d.Outcome+trimReason(d.Reason))
			}
		case protocol.TypeGenerationRequested:
			s.trace.causeOf.put(ev.ID, sc)
		case protocol.TypeControlRequested:
			for _, it := range s.state.AI.Inbox.Items {
				if it.CommandID == ev.ID {
					s.trace.inputs.put(it.ID, sc)
				}
			}
			if a := s.state.AI.Active; a != nil && s.trace.turnID != a.TurnID {
				// Admitted in the same batch: the inbox no longer has it.
				s.trace.inputs.put(a.Input.ID, sc)
			}
		}
	}
	if len(decisions) > 0 {
		p.span.SetAttributes(attribute.StringSlice(telemetry.AttrDecisions, decisions))
	}
}

func trimReason(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}

// endAdmit ends a push's span once it is answered.
func endAdmit(p *pendingPush, stored []protocol.Event, err error) {
	if p.span == nil {
		return
	}
	if p.span.IsRecording() {
		if len(stored) > 0 {
			p.span.SetAttributes(attribute.Int64(telemetry.AttrLogIndex, int64(stored[0].Index)))
		}
		telemetry.Fail(p.span, wire.CodeOf(err), err)
	}
	p.span.End()
}

// generationSpan starts the span of attempt l of request w, starting the
// turn's span first when this is the turn's first attempt here. It returns
// nil when the request has no trace.
func (s *sessionActor) generationSpan(w protocol.Work, l *lane) trace.Span {
	t := &s.trace
	cause := t.causeOf.take(w.RequestID)
	if a := s.state.AI.Active; a != nil && a.TurnID != t.turnID {
		s.endTurn("")
		parent := t.inputs.take(a.Input.ID)
		if !parent.IsValid() {
			parent = cause
		}
		if parent.IsValid() {
			_, turn := telemetry.Start(trace.ContextWithSpanContext(context.Background(), parent), telemetry.SpanInvokeAgent+" "+s.agent.Name())
			attrs := make([]attribute.KeyValue, 0, 5) // and the outcome
			t.turn = ending(turn, append(attrs, attribute.String(telemetry.GenAIOperationName, "invoke_agent"),
				attribute.String(telemetry.GenAIAgentName, s.agent.Name()), attribute.String(telemetry.GenAIConversationID, s.id),
				attribute.String(telemetry.AttrTurnID, a.TurnID)))
			t.turnID, t.turnCause = a.TurnID, parent
		}
	}
	var parent trace.SpanContext
	var opts []trace.SpanStartOption
	switch {
	case cause.IsValid() && t.turn != nil && !cause.Equal(t.turnCause):
		// Asked for by a later command (a retry, a resume): its trace,
		// linked to the turn.
		parent = cause
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: t.turn.SpanContext()}))
	case t.turn != nil:
		parent = t.turn.SpanContext()
	default:
		parent = cause
	}
	attrs := make([]attribute.KeyValue, 0, 9) // and outcome, superseded reason, error type
	attrs = append(attrs, attribute.String(telemetry.GenAIConversationID, s.id),
		attribute.String(telemetry.AttrRequestID, w.RequestID), attribute.String(telemetry.AttrGenerationID, l.gen),
		attribute.Int(telemetry.AttrAttempt, l.attempt), attribute.String(telemetry.AttrRequestReason, requestReason(s.state.AI, w.RequestID)))
	if s.lease.Epoch > 0 {
		attrs = append(attrs, attribute.Int64(telemetry.AttrLeaseEpoch, int64(s.lease.Epoch)))
	}
	span := startUnder(parent, telemetry.SpanGeneration, attrs, opts...)
	if span == nil {
		return nil
	}
	t.gens.put(l.gen, span.SpanContext())
	return span
}

// startUnder starts a span under parent, with attrs set at its end
// (ending); without a parent (work resumed after a restart, whose causes
// were in the memory of the process that died), a root span of a new trace
// when tracing is on, else nil.
func startUnder(parent trace.SpanContext, name string, attrs []attribute.KeyValue, opts ...trace.SpanStartOption) trace.Span {
	_, span := telemetry.Start(trace.ContextWithSpanContext(context.Background(), parent), name, opts...)
	if !parent.IsValid() && !span.IsRecording() {
		span.End()
		return nil
	}
	return ending(span, attrs)
}

// requestReason is the reason of the active generation request (turn,
// continue, resume, retry), "" when the state no longer has it.
func requestReason(ai *protocol.AIState, request string) string {
	if ai.ActiveRequestID == request {
		return ai.ActiveRequestReason
	}
	return ""
}

// endGeneration ends an attempt's span with its outcome.
func endGeneration(l *lane, outcome, reason string, failure string) {
	finishGeneration(l.span, l.began, outcome, reason, failure)
	l.span = nil
}

// endGenerationAfterWrite ends an attempt's span once the write of its
// terminal event is durable: that write is the attempt's last.
func (s *sessionActor) endGenerationAfterWrite(l *lane, outcome, failure string) {
	span, began := l.span, l.began
	l.span = nil
	if span != nil {
		s.trace.writeSpans = append(s.trace.writeSpans, span)
	}
	s.trace.afterWrite = append(s.trace.afterWrite, func() { finishGeneration(span, began, outcome, "", failure) })
}

func finishGeneration(span trace.Span, began time.Time, outcome, reason, failure string) {
	telemetry.Metrics().GenDuration.Record(context.Background(), time.Since(began).Seconds(), outcomeSet(outcome))
	if span == nil {
		return
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String(telemetry.AttrOutcome, outcome))
		if reason != "" {
			span.SetAttributes(attribute.String(telemetry.AttrSupersededReason, reason))
		}
		if failure != "" {
			span.SetStatus(codes.Error, failure)
			span.SetAttributes(attribute.String(telemetry.ErrorType, "generation_failed"))
		}
	}
	span.End()
}

// abortOutcome names why a lane was cancelled.
func abortOutcome(cause error) (outcome, reason string) {
	switch {
	case errors.Is(cause, ErrPaused):
		return "paused", "paused"
	case errors.Is(cause, errWrittenElsewhere):
		return "superseded", "written elsewhere"
	case errors.Is(cause, errLeaseLost):
		return "superseded", "lease lost"
	case errors.Is(cause, errSessionStopped):
		return "aborted", "session stopped"
	case errors.Is(cause, ErrSuperseded):
		return "superseded", "superseded"
	case errors.Is(cause, ErrStopped):
		return "stopped", ""
	case cause != nil:
		return "aborted", strings.TrimPrefix(cause.Error(), "actors: ")
	}
	return "aborted", ""
}

// endTurn ends the turn's span (outcome "" when the turn simply is no
// longer active: completed, stopped or handed off).
func (s *sessionActor) endTurn(outcome string) {
	t := &s.trace
	if t.turn != nil {
		if outcome != "" && t.turn.IsRecording() {
			t.turn.SetAttributes(attribute.String(telemetry.AttrOutcome, outcome))
		}
		t.turn.End()
	}
	t.turn, t.turnID, t.turnCause = nil, "", trace.SpanContext{}
	t.gens, t.causeOf = t.gens[:0], t.causeOf[:0] // kept for the next turn, not made again
}

// traceTurns ends the turn's span once the state has no active turn, or
// another one, after a write.
func (s *sessionActor) traceTurns() {
	t := &s.trace
	if t.turn == nil {
		return
	}
	if a := s.state.AI.Active; a == nil || a.TurnID != t.turnID {
		s.endTurn("ended")
	}
}

// toolSpan starts the span of a tool execution attempt, under the
// generation attempt that called it (or the turn). Nil without a trace.
func (s *sessionActor) toolSpan(r *toolRun) trace.Span {
	parent := s.trace.gens.get(r.gen)
	if !parent.IsValid() && s.trace.turn != nil {
		parent = s.trace.turn.SpanContext()
	}
	recovery := "rerun"
	if s.isReport(r.tool) {
		recovery = "report"
	}
	attrs := make([]attribute.KeyValue, 0, 14) // and arguments, outcome, error type, result
	attrs = append(attrs, attribute.String(telemetry.GenAIOperationName, "execute_tool"),
		attribute.String(telemetry.GenAIToolName, r.tool), attribute.String(telemetry.GenAIToolCallID, r.call),
		attribute.String(telemetry.GenAIToolType, "function"), attribute.String(telemetry.GenAIConversationID, s.id),
		attribute.Int(telemetry.AttrExecVersion, r.version), attribute.Int(telemetry.AttrAttempt, r.attempt),
		attribute.String(telemetry.AttrRecovery, recovery), attribute.Bool(telemetry.AttrRecovered, r.attempt > 1),
		attribute.String(telemetry.AttrGenerationID, r.gen))
	if telemetry.CaptureContent() {
		attrs = append(attrs, attribute.String(telemetry.GenAIToolArguments, string(r.input)))
	}
	return startUnder(parent, telemetry.SpanExecuteTool+" "+r.tool, attrs)
}

// endToolAfterWrite counts a tool attempt's execution now and ends its
// span once the write of its result is durable.
func (s *sessionActor) endToolAfterWrite(r *toolRun, outcome string, output json.RawMessage, err error) {
	span := r.span
	if span != nil {
		s.trace.writeSpans = append(s.trace.writeSpans, span)
	}
	r.span = nil
	endTool(r, outcome, output, err)
	if span != nil {
		r2 := *r
		r2.span = span
		s.trace.afterWrite = append(s.trace.afterWrite, func() { endToolSpan(&r2, outcome, output, err) })
	}
}

// endTool ends a tool attempt's span and counts the execution.
func endTool(r *toolRun, outcome string, output json.RawMessage, err error) {
	set := toolSet(r.tool, outcome)
	telemetry.Metrics().ToolExecutions.Add(context.Background(), 1, set)
	if !r.began.IsZero() {
		telemetry.Metrics().ToolDuration.Record(context.Background(), time.Since(r.began).Seconds(), set)
	}
	endToolSpan(r, outcome, output, err)
}

func endToolSpan(r *toolRun, outcome string, output json.RawMessage, err error) {
	if r.span == nil {
		return
	}
	if r.span.IsRecording() {
		r.span.SetAttributes(attribute.String(telemetry.AttrOutcome, outcome))
		if err != nil {
			r.span.SetStatus(codes.Error, err.Error())
			r.span.SetAttributes(attribute.String(telemetry.ErrorType, "tool_error"))
		}
		if telemetry.CaptureContent() && len(output) > 0 {
			r.span.SetAttributes(attribute.String(telemetry.GenAIToolResult, string(output)))
		}
	}
	r.span.End()
	r.span = nil
}

// writeTrace is what a batch write records on the spans of its causes.
type writeTrace struct {
	spans []trace.Span
	after []func()
}

// takeWriteTrace collects the live spans of the next write's causes (its
// pushes, the lanes and tool results in it) and the spans to end once it
// is durable.
func (s *sessionActor) takeWriteTrace(pushes []*pendingPush) writeTrace {
	w := writeTrace{spans: s.trace.writeSpans, after: s.trace.afterWrite}
	s.trace.writeSpans, s.trace.afterWrite = nil, nil
	for _, p := range pushes {
		if p.span != nil {
			w.spans = append(w.spans, p.span)
		}
	}
	return w
}

// endWrite records a write: its metrics, an a2.store.append event on each
// cause's span (a write has many causes, and a step many writes: an event
// each, not a span each, keeps telemetry cheap), then the spans that end
// with it.
func endWrite(w writeTrace, began time.Time, n int, stored []protocol.Event, err error) {
	m := telemetry.Metrics()
	ctx := context.Background()
	took := time.Since(began)
	m.AppendDuration.Record(ctx, took.Seconds())
	m.AppendBatch.Record(ctx, int64(n))
	if err == nil {
		m.SyncedWrites.Add(ctx, 1)
	}
	if len(w.spans) > 0 {
		attrs := make([]attribute.KeyValue, 0, 5)
		attrs = append(attrs, attribute.Int(telemetry.AttrBatchSize, n), attribute.Float64(telemetry.AttrStoreMillis, float64(took.Microseconds())/1000))
		if len(stored) > 0 {
			attrs = append(attrs, attribute.Int64(telemetry.AttrLogIndex, int64(stored[0].Index)),
				attribute.Int64(telemetry.AttrLogIndexLast, int64(stored[len(stored)-1].Index)))
		}
		if err != nil {
			attrs = append(attrs, attribute.String(telemetry.ErrorType, "store"))
		}
		opt := trace.WithAttributes(attrs...)
		for i, sp := range w.spans {
			if !slices.Contains(w.spans[:i], sp) { // a span once per write
				sp.AddEvent(telemetry.SpanAppend, opt)
			}
		}
	}
	for _, f := range w.after {
		f()
	}
}

// modelCall is one model call's chat span and GenAI metrics.
type modelCall struct {
	span    trace.Span
	began   time.Time
	first   time.Duration
	model   string
	attrs   []attribute.KeyValue
	chunked bool
}

// Metric attribute sets, made once per combination: a set per record
// would sort and allocate on every model call, write and tool run.
var (
	outcomeSets sync.Map // outcome -> metric.MeasurementOption
	toolSets    sync.Map // tool + "\x00" + outcome -> metric.MeasurementOption
	modelSets   sync.Map // model -> *modelMetricSets
)

type modelMetricSets struct{ call, failed, input, output metric.MeasurementOption }

func outcomeSet(outcome string) metric.MeasurementOption {
	if v, ok := outcomeSets.Load(outcome); ok {
		return v.(metric.MeasurementOption)
	}
	v, _ := outcomeSets.LoadOrStore(outcome, metric.WithAttributeSet(attribute.NewSet(attribute.String(telemetry.AttrOutcome, outcome))))
	return v.(metric.MeasurementOption)
}

func toolSet(tool, outcome string) metric.MeasurementOption {
	k := tool + "\x00" + outcome
	if v, ok := toolSets.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	v, _ := toolSets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(
		attribute.String(telemetry.GenAIToolName, tool), attribute.String(telemetry.AttrOutcome, outcome))))
	return v.(metric.MeasurementOption)
}

func modelSetsOf(model string, attrs []attribute.KeyValue) *modelMetricSets {
	if v, ok := modelSets.Load(model); ok {
		return v.(*modelMetricSets)
	}
	with := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue(nil), attrs...), kv...)...))
	}
	v, _ := modelSets.LoadOrStore(model, &modelMetricSets{call: with(), failed: with(attribute.String(telemetry.ErrorType, "model_error")),
		input: with(attribute.String(telemetry.GenAITokenType, "input")), output: with(attribute.String(telemetry.GenAITokenType, "output"))})
	return v.(*modelMetricSets)
}

// providerOf is the provider part of a model ID ("openai/gpt-4o" ->
// "openai"); a model ID without one is its own provider (demo, script).
func providerOf(model string) string {
	if i := strings.IndexByte(model, '/'); i > 0 {
		return model[:i]
	}
	return model
}

// startModelCall starts the chat span of a model call under ctx's span.
func startModelCall(ctx context.Context, model, session string) (context.Context, *modelCall) {
	m := &modelCall{began: time.Now(), model: model,
		attrs: []attribute.KeyValue{attribute.String(telemetry.GenAIOperationName, "chat"),
			attribute.String(telemetry.GenAIProviderName, providerOf(model)), attribute.String(telemetry.GenAIRequestModel, model)}}
	if trace.SpanContextFromContext(ctx).IsValid() {
		var span trace.Span
		ctx, span = telemetry.Start(ctx, telemetry.SpanChat+" "+model, trace.WithSpanKind(trace.SpanKindClient))
		attrs := make([]attribute.KeyValue, 0, 12) // and what end sets
		m.span = ending(span, append(append(attrs, m.attrs...), attribute.String(telemetry.GenAIConversationID, session)))
	}
	return ctx, m
}

// chunk notes a chunk: the first one sets the time to first chunk.
func (m *modelCall) chunk() {
	if !m.chunked {
		m.chunked, m.first = true, time.Since(m.began)
	}
}

// end ends the call with its usage, finish reason and error.
func (m *modelCall) end(usage *protocol.Usage, finish string, err error) {
	if m == nil {
		return
	}
	ctx := context.Background()
	metrics := telemetry.Metrics()
	sets := modelSetsOf(m.model, m.attrs)
	if err != nil {
		metrics.OpDuration.Record(ctx, time.Since(m.began).Seconds(), sets.failed)
	} else {
		metrics.OpDuration.Record(ctx, time.Since(m.began).Seconds(), sets.call)
	}
	if m.chunked {
		metrics.TimeToFirst.Record(ctx, m.first.Seconds(), sets.call)
	}
	if usage != nil {
		metrics.TokenUsage.Record(ctx, usage.InputTokens, sets.input)
		metrics.TokenUsage.Record(ctx, usage.OutputTokens, sets.output)
	}
	if m.span == nil {
		return
	}
	if m.span.IsRecording() {
		var attrs []attribute.KeyValue
		if m.chunked {
			attrs = append(attrs, attribute.Float64(telemetry.GenAITimeToFirstChunk, m.first.Seconds()))
		}
		if finish != "" {
			attrs = append(attrs, attribute.StringSlice(telemetry.GenAIFinishReasons, []string{finish}))
		}
		if usage != nil {
			attrs = append(attrs, attribute.Int64(telemetry.GenAIInputTokens, usage.InputTokens), attribute.Int64(telemetry.GenAIOutputTokens, usage.OutputTokens))
			if usage.CachedInputTokens != nil {
				attrs = append(attrs, attribute.Int64(telemetry.GenAICacheReadTokens, *usage.CachedInputTokens))
			}
			if usage.ReasoningTokens != nil {
				attrs = append(attrs, attribute.Int64(telemetry.GenAIReasoningTokens, *usage.ReasoningTokens))
			}
		}
		if err != nil {
			m.span.SetStatus(codes.Error, err.Error())
			attrs = append(attrs, attribute.String(telemetry.ErrorType, "model_error"))
		}
		m.span.SetAttributes(attrs...)
	}
	m.span.End()
}

// compactionSpan starts the span of a compaction under the attempt's span.
func compactionSpan(ctx context.Context, in laneInput, tokens, threshold int64) (context.Context, trace.Span) {
	if in.span == nil {
		return ctx, nil
	}
	ctx, span := telemetry.Start(ctx, telemetry.SpanCompaction)
	attrs := make([]attribute.KeyValue, 0, 7) // and the outcome, error type
	return ctx, ending(span, append(attrs,
		attribute.String(telemetry.GenAIConversationID, in.session), attribute.String(telemetry.AttrGenerationID, in.gen),
		attribute.Int64("a2.compaction.input_tokens", tokens), attribute.Int64("a2.compaction.threshold_tokens", threshold)))
}

// endCompaction ends a compaction's span.
func endCompaction(span trace.Span, summary string, err error) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool(telemetry.AttrCompactionOK, err == nil && summary != ""))
		telemetry.Fail(span, "compaction_failed", err)
	}
	span.End()
}

// spanContext is a context carrying span, for log lines that name their
// trace (telemetry.LogHandler).
func spanContext(span trace.Span) context.Context {
	if span == nil {
		return context.Background()
	}
	return trace.ContextWithSpan(context.Background(), span)
}

func laneSpan(l *lane) trace.Span {
	if l == nil {
		return nil
	}
	return l.span
}
