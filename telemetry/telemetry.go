// Package telemetry holds A2's OpenTelemetry vocabulary: the span names,
// attribute keys and metric instruments every package records with, so
// that the catalogue in docs/telemetry.md has one source. It uses the
// global tracer and meter providers, which are no-ops until the node (or
// an embedding program, or a test) installs real ones: with telemetry off,
// a span costs a context lookup and a metric record an atomic load.
//
// The GenAI names follow the OpenTelemetry semantic conventions for
// generative AI as published in open-telemetry/semantic-conventions
// v1.41.0 (docs/gen-ai/), the last release before they moved to their own
// repository; they are still in development, so the constants are ours
// and move only when we choose to. What they do not cover is under a2.*.
package telemetry

import (
	"context"
	"os"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// SemconvGenAI names the version of the GenAI conventions followed.
const SemconvGenAI = "open-telemetry/semantic-conventions v1.41.0 (gen-ai)"

// InstrumentationName is the tracer's and the meter's name.
const InstrumentationName = "github.com/a2-runtime/a2"

// Span names. The GenAI ones are prefixes: the span is named
// "<operation> <subject>", e.g. "chat gpt-4o" or "execute_tool read_file".
const (
	SpanInvokeAgent = "invoke_agent" // + agent name: a turn
	SpanChat        = "chat"         // + model ID: one model call
	SpanExecuteTool = "execute_tool" // + tool name: one execution attempt

	SpanAdmit      = "a2.session.admit"   // a push in the session actor: decisions, admission, until durable
	SpanAppend     = "a2.store.append"    // one batch write: an event on each of its causes' spans
	SpanGeneration = "a2.generation"      // one generation attempt (a model step with its resolvers)
	SpanCompaction = "a2.compaction"      // a compaction inside a step, around its summary call
	SpanForward    = "a2.cluster.forward" // a gateway or member sending a request to the session's owner
	SpanServe      = "a2.cluster.serve"   // the owner serving a forwarded request
)

// GenAI attribute keys (semantic conventions, see SemconvGenAI).
const (
	GenAIOperationName    = "gen_ai.operation.name"
	GenAIProviderName     = "gen_ai.provider.name"
	GenAIAgentName        = "gen_ai.agent.name"
	GenAIConversationID   = "gen_ai.conversation.id"
	GenAIRequestModel     = "gen_ai.request.model"
	GenAIFinishReasons    = "gen_ai.response.finish_reasons"
	GenAITimeToFirstChunk = "gen_ai.response.time_to_first_chunk"
	GenAIInputTokens      = "gen_ai.usage.input_tokens"
	GenAIOutputTokens     = "gen_ai.usage.output_tokens"
	GenAICacheReadTokens  = "gen_ai.usage.cache_read.input_tokens"
	GenAIReasoningTokens  = "gen_ai.usage.reasoning.output_tokens"
	GenAIToolName         = "gen_ai.tool.name"
	GenAIToolCallID       = "gen_ai.tool.call.id"
	GenAIToolType         = "gen_ai.tool.type"
	GenAIToolArguments    = "gen_ai.tool.call.arguments" // opt-in content
	GenAIToolResult       = "gen_ai.tool.call.result"    // opt-in content
	GenAITokenType        = "gen_ai.token.type"          // metric attribute: input or output
	ErrorType             = "error.type"
)

// A2's own attribute keys.
const (
	AttrSession          = "a2.session.id"
	AttrLogIndex         = "a2.log.index"      // the first index a write or push got
	AttrLogIndexLast     = "a2.log.index.last" // the last index a write got
	AttrEventTypes       = "a2.event.types"    // the types of a push's events
	AttrEventCount       = "a2.event.count"
	AttrBatchSize        = "a2.batch.size" // events in one store write
	AttrStoreMillis      = "a2.store.duration_ms"
	AttrOutcome          = "a2.outcome" // completed, failed, superseded, stopped, paused, aborted
	AttrTurnID           = "a2.turn.id"
	AttrRequestID        = "a2.request.id"
	AttrRequestReason    = "a2.request.reason"
	AttrGenerationID     = "a2.generation.id"
	AttrAttempt          = "a2.attempt"
	AttrSupersededReason = "a2.superseded.reason"
	AttrExecVersion      = "a2.tool.execution.version"
	AttrRecovery         = "a2.tool.recovery" // rerun or report: the tool's recovery policy
	AttrRecovered        = "a2.tool.recovered"
	AttrLeaseEpoch       = "a2.lease.epoch"
	AttrDecisions        = "a2.decisions" // applied or rejected, per command of a push
	AttrCompactionOK     = "a2.compaction.completed"
	AttrCluster          = "a2.cluster.kind" // the envelope kind of a forwarded request
	AttrTarget           = "a2.cluster.target"
	AttrTrusted          = "a2.push.trusted"
)

type boundTracer struct {
	provider trace.TracerProvider
	tracer   trace.Tracer
}

var tracerCache atomic.Pointer[boundTracer]

// Tracer is A2's tracer from the global provider, looked up again when
// another provider is installed (the node installs one at start, tests
// their own).
func Tracer() trace.Tracer {
	tp := otel.GetTracerProvider()
	if b := tracerCache.Load(); b != nil && b.provider == tp {
		return b.tracer
	}
	b := &boundTracer{provider: tp, tracer: tp.Tracer(InstrumentationName)}
	tracerCache.Store(b)
	return b.tracer
}

// Start starts a span of A2's tracer.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return Tracer().Start(ctx, name, opts...)
}

// Fail marks span failed with err (its message as the status, its code as
// error.type).
func Fail(span trace.Span, errType string, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(attribute.String(ErrorType, errType))
}

// Carrier is trace context in a wire form: the W3C headers (traceparent,
// tracestate, baggage) as a map, as it rides in an actor message or a
// cluster envelope.
type Carrier = map[string]string

// Inject returns ctx's trace context as a Carrier, nil when ctx carries
// none (nothing is sent then).
func Inject(ctx context.Context) Carrier {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := Carrier{}
	otel.GetTextMapPropagator().Inject(ctx, propagation.MapCarrier(c))
	if len(c) == 0 {
		return nil
	}
	return c
}

// Extract returns ctx with the trace context of c (a remote parent). A
// malformed carrier is ignored: what another node sends never fails a
// request.
func Extract(ctx context.Context, c Carrier) context.Context {
	if len(c) == 0 {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(c))
}

// CaptureContent reports whether tool arguments and results go on spans
// (off by default: they are the users' data). Set with
// OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true, the variable the
// GenAI instrumentations use, or SetCaptureContent.
func CaptureContent() bool { return captureContent }

var captureContent = parseBool(os.Getenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"))

// SetCaptureContent turns content capture on or off (before serving).
func SetCaptureContent(on bool) { captureContent = on }

func parseBool(s string) bool {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}
