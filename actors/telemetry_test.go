package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/telemetry"
	tt "github.com/a2-runtime/a2/telemetry/telemetrytest"
	"github.com/a2-runtime/a2/tools"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A failed attempt and the attempt a retry command starts are told apart
// from a superseded one: the failed attempt ends failed with an error
// status; the retry's attempt is in the retry command's trace (reason
// retry), linked to the turn it continues; an attempt whose session
// another runtime wrote ends superseded with its reason.
func TestTraceTellsRetriedFromSuperseded(t *testing.T) {
	rec := tt.Install(t)
	f := newFixture(t, `{"replies":[{"match":"fail","text":"partial","error":"provider down"},{"text":"recovered"}]}`, nil)
	ctx, root := rec.Root("send")
	if _, err := f.rt.Push(ctx, "assistant", "r1", []protocol.Event{protocol.Inputs.Text("m1", "fail please")}, false); err != nil {
		t.Fatal(err)
	}
	root.End()
	st := f.waitFor("r1", "the failure", func(s *protocol.AIState) bool { return s.Status == protocol.StatusFailed })
	sendSpans := rec.WaitFor(root.SpanContext().TraceID(), "the failed attempt", func(s []sdktrace.ReadOnlySpan) bool {
		return len(tt.Named(s, telemetry.SpanGeneration)) == 1
	})
	failed := tt.Named(sendSpans, telemetry.SpanGeneration)[0]
	if tt.Attr(failed, telemetry.AttrOutcome).AsString() != "failed" || failed.Status().Code != codes.Error ||
		tt.Attr(failed, telemetry.AttrAttempt).AsInt64() != 1 {
		t.Fatalf("the failed attempt has %v, status %v", failed.Attributes(), failed.Status())
	}
	turns := tt.Named(sendSpans, telemetry.SpanInvokeAgent)
	if len(turns) != 0 {
		t.Fatalf("the turn span ended while the turn awaits a retry:\n%s", tt.Tree(sendSpans))
	}

	rctx, retryRoot := rec.Root("retry")
	resp := st.Messages[len(st.Messages)-1].ID
	if _, err := f.rt.Push(rctx, "assistant", "r1", []protocol.Event{protocol.Inputs.Retry(protocol.RetryOptions{MessageID: "m1", ResponseMessageID: resp, RetryID: "once"})}, false); err != nil {
		t.Fatal(err)
	}
	retryRoot.End()
	f.waitFor("r1", "the retried answer", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "recovered" })
	retrySpans := rec.WaitFor(retryRoot.SpanContext().TraceID(), "the retry's attempt", tt.Count(telemetry.SpanGeneration, 1))
	retried := tt.Named(retrySpans, telemetry.SpanGeneration)[0]
	if tt.Attr(retried, telemetry.AttrRequestReason).AsString() != protocol.RequestRetry || tt.Attr(retried, telemetry.AttrOutcome).AsString() != "completed" {
		t.Fatalf("the retry's attempt has %v", retried.Attributes())
	}
	if tt.Attr(retried, telemetry.AttrGenerationID).AsString() == tt.Attr(failed, telemetry.AttrGenerationID).AsString() {
		t.Fatal("the retry's attempt has the failed attempt's generation ID")
	}
	admit := tt.Named(retrySpans, telemetry.SpanAdmit)
	if len(admit) != 1 || retried.Parent().SpanID() != admit[0].SpanContext().SpanID() {
		t.Fatalf("the retry's attempt is not a child of the retry command's admit span:\n%s", tt.Tree(retrySpans))
	}
	turn := rec.WaitFor(root.SpanContext().TraceID(), "the turn's end", tt.Count(telemetry.SpanInvokeAgent, 1))
	turnSpan := tt.Named(turn, telemetry.SpanInvokeAgent)[0]
	if len(retried.Links()) != 1 || retried.Links()[0].SpanContext.SpanID() != turnSpan.SpanContext().SpanID() {
		t.Fatalf("the retry's attempt is not linked to the turn it continues: links %v", retried.Links())
	}

	// A superseded attempt: another runtime on the same store writes the
	// session while this one's attempt streams.
	st2, err := pebblestore.Open("data", pebblestore.Options{FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	m := &staleModel{waiting: make(chan struct{}, 4), next: make(chan struct{}), causes: make(chan error, 4)}
	toolStarted := make(chan struct{}, 4)
	hold := tools.Tool{Name: "wait", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		toolStarted <- struct{}{}
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}}
	agentA, _ := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("stale"), Tools: []tools.Tool{hold},
		Models: func(string) (harness.Model, error) { return m, nil }})
	rtA, err := New(st2, []*Agent{agentA}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rtA.Close()
	sc, _ := script.Parse([]byte(`{"default":{"text":"from B"}}`))
	agentB, _ := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script"), Tools: []tools.Tool{hold},
		Models: func(string) (harness.Model, error) { return script.New(sc), nil }})
	rtB, err := New(st2, []*Agent{agentB}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rtB.Close()
	sctx, staleRoot := rec.Root("stale send")
	tctx, cancel := context.WithTimeout(sctx, 20*time.Second)
	defer cancel()
	if _, err := rtA.Push(tctx, "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m1", "start")}, false); err != nil {
		t.Fatal(err)
	}
	staleRoot.End()
	for _, ch := range []chan struct{}{m.waiting, toolStarted} {
		select {
		case <-ch:
		case <-tctx.Done():
			t.Fatal("the first runtime's attempt did not reach its model's wait and its tool")
		}
	}
	if _, err := rtB.Push(context.Background(), "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m2", "elsewhere")}, false); err != nil {
		t.Fatal(err)
	}
	close(m.next)
	stale := rec.WaitFor(staleRoot.SpanContext().TraceID(), "the superseded attempt", func(s []sdktrace.ReadOnlySpan) bool {
		return len(tt.Named(s, telemetry.SpanGeneration)) == 1
	})
	sup := tt.Named(stale, telemetry.SpanGeneration)[0]
	if tt.Attr(sup, telemetry.AttrOutcome).AsString() != "superseded" || tt.Attr(sup, telemetry.AttrSupersededReason).AsString() != "written elsewhere" {
		t.Fatalf("the stale attempt ended with %v, want superseded, written elsewhere:\n%s", sup.Attributes(), tt.Tree(stale))
	}
	if sup.Status().Code == codes.Error {
		t.Fatal("a superseded attempt is marked as an error, like a failed one")
	}
}

// The metrics move as a scripted turn with a tool call runs: synced
// writes and their batch sizes, chunks per progress event, token usage and
// model-call durations for the model, the tool's execution by outcome,
// generation durations by outcome, active sessions and activations.
func TestMetricsMoveWithATurn(t *testing.T) {
	rec := tt.Install(t)
	echo := tools.Tool{Name: "metered_echo", Execute: func(_ context.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil }}
	f := newFixture(t, `{"replies":[{"toolCalls":[{"name":"metered_echo","input":{"x":1}}],
		"usage":{"inputTokens":40,"outputTokens":2,"totalTokens":42},"then":{"text":"one two three","usage":{"inputTokens":50,"outputTokens":3,"totalTokens":53}}}]}`,
		func(o *AgentOptions) { o.Tools = []tools.Tool{echo}; o.Model = harness.ModelID("script/metered") })
	before := rec.Collect()
	model := attribute.String(telemetry.GenAIRequestModel, "script/metered")
	f.push("mt1", protocol.Inputs.Text("m1", "go"))
	f.waitFor("mt1", "the turn", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "one two three" })
	after := rec.Collect()
	delta := func(name string, sum bool, match ...attribute.KeyValue) float64 {
		return tt.Total(after, name, sum, match...) - tt.Total(before, name, sum, match...)
	}
	checks := []struct {
		what string
		got  float64
		min  float64
	}{
		{"synced writes", delta(telemetry.MetricSyncedWrites, false), 4},
		{"append latencies recorded", delta(telemetry.MetricAppendDuration, false), 4},
		{"events in batches", delta(telemetry.MetricAppendBatch, true), 8},
		{"progress events", delta(telemetry.MetricChunksPerEvent, false), 2},
		{"input tokens of the model", delta(telemetry.MetricTokenUsage, true, model, attribute.String(telemetry.GenAITokenType, "input")), 90},
		{"output tokens of the model", delta(telemetry.MetricTokenUsage, true, model, attribute.String(telemetry.GenAITokenType, "output")), 5},
		{"model calls timed", delta(telemetry.MetricOpDuration, false, model), 2},
		{"first chunks timed", delta(telemetry.MetricTimeToFirst, false, model), 2},
		{"the tool's executions", delta(telemetry.MetricToolExecutions, false, attribute.String(telemetry.GenAIToolName, "metered_echo"), attribute.String(telemetry.AttrOutcome, "completed")), 1},
		{"completed generations", delta(telemetry.MetricGenDuration, false, attribute.String(telemetry.AttrOutcome, "completed")), 2},
		{"activations", delta(telemetry.MetricActivation, false), 1},
	}
	for _, c := range checks {
		if c.got < c.min {
			t.Errorf("%s moved by %v, want at least %v", c.what, c.got, c.min)
		}
	}
	if got := delta(telemetry.MetricTokenUsage, true, model, attribute.String(telemetry.GenAITokenType, "input")); got != 90 {
		t.Errorf("input tokens of the model moved by %v, want the script's 40+50", got)
	}
	if active := tt.Total(after, telemetry.MetricSessionsActive, false); active < 1 {
		t.Errorf("active sessions %v with a session in memory", active)
	}
	f.close()
	if active, was := tt.Total(rec.Collect(), telemetry.MetricSessionsActive, false), tt.Total(after, telemetry.MetricSessionsActive, false); active != was-1 {
		t.Errorf("active sessions %v after the runtime closed, want %v", active, was-1)
	}
}

// A compaction before a step is an a2.compaction span under the step's
// attempt, with the summary request's chat span under it, beside the
// step's own chat span.
func TestTraceOfACompaction(t *testing.T) {
	rec := tt.Install(t)
	sc, _ := script.Parse([]byte(`{"default":{"text":"` + strings.Repeat("A long answer that fills the window. ", 8) + `"}}`))
	m := &summarizingModel{answer: script.New(sc)}
	f := newFixture(t, `{"replies":[]}`, func(a *AgentOptions) {
		a.Models = func(string) (harness.Model, error) { return m, nil }
		a.Harness.Compaction = protocol.CompactionOptions{ThresholdTokens: 300}
	})
	for i := 0; i < 8; i++ {
		ctx, root := rec.Root(fmt.Sprintf("turn %d", i))
		if _, err := f.rt.Push(ctx, "assistant", "cs", []protocol.Event{protocol.Inputs.Text(fmt.Sprintf("m%d", i), "tell me more")}, false); err != nil {
			t.Fatal(err)
		}
		root.End()
		f.waitFor("cs", "the turn", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2*(i+1) })
		spans := rec.WaitFor(root.SpanContext().TraceID(), "the turn's spans", tt.Count(telemetry.SpanInvokeAgent, 1))
		comps := tt.Named(spans, telemetry.SpanCompaction)
		if len(comps) == 0 {
			continue
		}
		c := comps[0]
		gen := tt.Named(spans, telemetry.SpanGeneration)
		if len(gen) != 1 || c.Parent().SpanID() != gen[0].SpanContext().SpanID() {
			t.Fatalf("the compaction is not under the step's attempt:\n%s", tt.Tree(spans))
		}
		if len(tt.Named(tt.Children(spans, c), telemetry.SpanChat)) != 1 || len(tt.Named(tt.Children(spans, gen[0]), telemetry.SpanChat)) != 1 {
			t.Fatalf("want one chat span under the compaction (the summary) and one under the attempt (the step):\n%s", tt.Tree(spans))
		}
		if !tt.Attr(c, telemetry.AttrCompactionOK).AsBool() || tt.Attr(c, "a2.compaction.threshold_tokens").AsInt64() != 300 {
			t.Fatalf("the compaction span has %v", c.Attributes())
		}
		return
	}
	t.Fatal("no turn of eight compacted with a threshold of 300 tokens")
}
