package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/gateway/gatewaytest"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/telemetry"
	tt "github.com/a2-runtime/a2/telemetry/telemetrytest"
	"github.com/a2-runtime/a2/tools"
)

// traceparent returns the W3C header of ctx's span.
func traceparent(ctx context.Context) map[string]string {
	h := http.Header{}
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
	return map[string]string{"traceparent": h.Get("traceparent")}
}

func echoTool(name string) tools.Tool {
	return tools.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`),
		Execute: func(_ context.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil }}
}

const twoToolsScript = `{"replies":[{"match":"look","toolCalls":[
	{"id":"call-a","name":"lookup","input":{"q":"a"}},{"id":"call-b","name":"save","input":{"v":1}}],
	"usage":{"inputTokens":11,"outputTokens":7,"totalTokens":18},
	"then":{"text":"saved it","usage":{"inputTokens":20,"outputTokens":3,"totalTokens":23}}}]}`

// R-TELEMETRY-02: a user command is one trace, from the HTTP push through
// the session's admission to the turn, each generation attempt, each model
// call, each tool execution and the store writes they cause, with the GenAI
// conventions' names and attributes.
func TestTraceOfATurnWithTwoToolCalls(t *testing.T) {
	rec := tt.Install(t)
	f := wrapNode(t, gatewaytest.Start(t, gatewaytest.Options{Script: twoToolsScript,
		Agent: func(o *actors.AgentOptions) { o.Tools = []tools.Tool{echoTool("lookup"), echoTool("save")} }}))
	ctx, root := rec.Root("client")
	status, b := f.do(http.MethodPost, sessionsPath+"t1/events", pushBody(protocol.Inputs.Text("m1", "look it up")), traceparent(ctx))
	root.End()
	if status != http.StatusOK {
		t.Fatalf("push: %d %s", status, b)
	}
	id := root.SpanContext().TraceID()
	spans := rec.WaitFor(id, "the turn's span", tt.Count(telemetry.SpanInvokeAgent, 1))
	tree := tt.Tree(spans)
	t.Logf("the trace:\n%s", tree)
	one := func(name string, in []sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
		t.Helper()
		got := tt.Named(in, name)
		if len(got) != 1 {
			t.Fatalf("%d spans named %q, want 1; the trace:\n%s", len(got), name, tree)
		}
		return got[0]
	}
	server := one("POST", spans)
	if server.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Fatalf("the server span does not continue the caller's traceparent:\n%s", tree)
	}
	if r := tt.Attr(server, "http.route").AsString(); r != "/v1/agents/{agent}/sessions/{session}/events" {
		t.Fatalf("http.route %q, want the route's pattern", r)
	}
	// The session's admit span: a child of the server span on a single
	// node, of the member's a2.cluster.serve through the cluster's router.
	admit := one(telemetry.SpanAdmit, spans)
	if p := admit.Parent().SpanID(); p != server.SpanContext().SpanID() {
		if serve := tt.Named(spans, telemetry.SpanServe); len(serve) != 1 || p != serve[0].SpanContext().SpanID() {
			t.Fatalf("the admit span is not the request's child:\n%s", tree)
		}
	}
	if tt.Attr(admit, telemetry.AttrDecisions).AsStringSlice()[0] != protocol.OutcomeApplied {
		t.Fatalf("the admit span's decisions are %v, want the send applied", tt.Attr(admit, telemetry.AttrDecisions).AsStringSlice())
	}
	turn := one(telemetry.SpanInvokeAgent, tt.Children(spans, admit))
	if turn.Name() != "invoke_agent assistant" || tt.Attr(turn, telemetry.GenAIConversationID).AsString() != "t1" ||
		tt.Attr(turn, telemetry.GenAIOperationName).AsString() != "invoke_agent" {
		t.Fatalf("the turn span is %q with %v", turn.Name(), turn.Attributes())
	}
	checkWrites := func(s sdktrace.ReadOnlySpan) {
		t.Helper()
		writes := tt.Events(s, telemetry.SpanAppend)
		if len(writes) == 0 {
			t.Fatalf("span %q records no store write:\n%s", s.Name(), tree)
		}
		for _, w := range writes {
			if tt.EventAttr(w, telemetry.AttrBatchSize).AsInt64() < 1 || tt.EventAttr(w, telemetry.AttrLogIndex).AsInt64() < 1 ||
				tt.EventAttr(w, telemetry.AttrLogIndexLast).AsInt64() < tt.EventAttr(w, telemetry.AttrLogIndex).AsInt64() {
				t.Fatalf("a store write on %q without its batch size or indexes: %v", s.Name(), w.Attributes)
			}
		}
	}
	checkWrites(admit) // the push's write

	gens := tt.Named(tt.Children(spans, turn), telemetry.SpanGeneration)
	if len(gens) != 2 {
		t.Fatalf("%d generation attempts under the turn, want 2 (the tool step and its continuation):\n%s", len(gens), tree)
	}
	reasons := map[string]sdktrace.ReadOnlySpan{}
	for _, g := range gens {
		reasons[tt.Attr(g, telemetry.AttrRequestReason).AsString()] = g
		if o := tt.Attr(g, telemetry.AttrOutcome).AsString(); o != "completed" {
			t.Fatalf("attempt %s ended %q, want completed", g.Name(), o)
		}
		checkWrites(g) // its start, progress and end
		chat := one(telemetry.SpanChat, tt.Children(spans, g))
		for k, want := range map[string]string{telemetry.GenAIOperationName: "chat", telemetry.GenAIProviderName: "script",
			telemetry.GenAIRequestModel: "script/test", telemetry.GenAIConversationID: "t1"} {
			if got := tt.Attr(chat, k).AsString(); got != want {
				t.Fatalf("chat span %s = %q, want %q", k, got, want)
			}
		}
		if chat.Name() != "chat script/test" || tt.Attr(chat, telemetry.GenAITimeToFirstChunk).AsFloat64() <= 0 {
			t.Fatalf("chat span %q has no time to first chunk: %v", chat.Name(), chat.Attributes())
		}
	}
	step, cont := reasons[protocol.RequestTurn], reasons[protocol.RequestContinue]
	if step == nil || cont == nil {
		t.Fatalf("attempt reasons %v, want turn and continue", reasons)
	}
	stepChat := one(telemetry.SpanChat, tt.Children(spans, step))
	if tt.Attr(stepChat, telemetry.GenAIInputTokens).AsInt64() != 11 || tt.Attr(stepChat, telemetry.GenAIOutputTokens).AsInt64() != 7 ||
		tt.Attr(stepChat, telemetry.GenAIFinishReasons).AsStringSlice()[0] != "tool-calls" {
		t.Fatalf("the tool step's chat span has %v, want its usage 11/7 and finish tool-calls", stepChat.Attributes())
	}

	execs := tt.Named(tt.Children(spans, step), telemetry.SpanExecuteTool)
	if len(execs) != 2 {
		t.Fatalf("%d tool executions under the tool step, want 2:\n%s", len(execs), tree)
	}
	calls := map[string]string{}
	for _, e := range execs {
		calls[tt.Attr(e, telemetry.GenAIToolCallID).AsString()] = tt.Attr(e, telemetry.GenAIToolName).AsString()
		if tt.Attr(e, telemetry.AttrOutcome).AsString() != "completed" || tt.Attr(e, telemetry.AttrRecovery).AsString() != "rerun" ||
			tt.Attr(e, telemetry.AttrExecVersion).Type() != attribute.INT64 {
			t.Fatalf("tool span %q has %v", e.Name(), e.Attributes())
		}
		if tt.Attr(e, telemetry.GenAIToolArguments).Type() != attribute.INVALID {
			t.Fatalf("tool span %q carries its arguments, which are off by default", e.Name())
		}
	}
	if calls["call-a"] != "lookup" || calls["call-b"] != "save" {
		t.Fatalf("tool spans name the calls %v, want call-a lookup and call-b save", calls)
	}
	// Each result's write is recorded on its execution's span.
	for _, e := range execs {
		checkWrites(e)
	}
}

// A push through a gateway node reaches the member that owns the session
// as one trace: the trace context rides in the cluster envelope.
func TestTraceCrossesTheCluster(t *testing.T) {
	rec := tt.Install(t)
	f := wrapNode(t, gatewaytest.Start(t, gatewaytest.Options{Script: `{"default":{"text":"hi"}}`, Cluster: true}))
	ctx, root := rec.Root("client")
	status, b := f.do(http.MethodPost, sessionsPath+"c1/events", pushBody(protocol.Inputs.Text("m1", "hello")), traceparent(ctx))
	root.End()
	if status != http.StatusOK {
		t.Fatalf("push: %d %s", status, b)
	}
	spans := rec.WaitFor(root.SpanContext().TraceID(), "the turn on the member", tt.Count(telemetry.SpanInvokeAgent, 1))
	tree := tt.Tree(spans)
	fwd, serve := tt.Named(spans, telemetry.SpanForward), tt.Named(spans, telemetry.SpanServe)
	if len(fwd) != 1 || len(serve) != 1 {
		t.Fatalf("%d forward and %d serve spans, want one each:\n%s", len(fwd), len(serve), tree)
	}
	if serve[0].Parent().SpanID() != fwd[0].SpanContext().SpanID() || !serve[0].Parent().IsRemote() {
		t.Fatalf("the member's serve span is not the remote child of the gateway's forward span:\n%s", tree)
	}
	if tt.Attr(fwd[0], telemetry.AttrCluster).AsString() != "push" {
		t.Fatalf("the forward span's kind is %q", tt.Attr(fwd[0], telemetry.AttrCluster).AsString())
	}
	if len(tt.Named(tt.Children(spans, serve[0]), telemetry.SpanAdmit)) != 1 {
		t.Fatalf("the member's session does not continue the serve span:\n%s", tree)
	}
}
