package actors

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// R-TOOL-01 R-TOOL-03 R-TOOL-20 R-TOOL-23: a tool call runs as durable
// work (claim first), its result joins the step, and the continuation
// answers from it; inside Execute the handler context gives the work event
// and the attempt. Input the schema rejects goes back to the model as an
// error and the tool does not run.
func TestToolCallAndContinuation(t *testing.T) {
	var runs atomic.Int64
	weather := tools.Tool{Name: "weather", Description: "current weather",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
		Execute: func(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
			runs.Add(1)
			hc, err := tools.FromContext(ctx)
			if err != nil || hc.Attempt != 1 || hc.Call.ToolName != "weather" || hc.Event.Type != protocol.TypeToolExecRequested {
				return nil, errors.New("bad handler context")
			}
			return json.RawMessage(`{"sky":"clear"}`), nil
		}}
	f := newFixture(t, `{"replies":[
		{"match":"weather","toolCalls":[{"name":"weather","input":{"city":"Oslo"}},{"name":"weather","input":{"town":"x"}}],"then":{"text":"It is clear in Oslo."}}]}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{weather} })
	f.push("s1", protocol.Inputs.Text("m1", "what is the weather?"))
	st := f.waitFor("s1", "answered", func(s *protocol.AIState) bool {
		return idle(s) && len(s.Messages) == 2 && strings.Contains(lastText(s), "clear")
	})
	if runs.Load() != 1 {
		t.Fatalf("the tool ran %d times", runs.Load())
	}
	var parts []string
	for _, p := range st.Messages[1].Parts {
		if p.IsToolPart() {
			parts = append(parts, p.State)
		}
	}
	if strings.Join(parts, ",") != "output-available,output-error" {
		t.Fatalf("tool parts %v", parts)
	}
	if _, err := tools.FromContext(context.Background()); !errors.Is(err, tools.ErrNoHandlerContext) {
		t.Fatal("a handler context outside Execute (R-TOOL-21)")
	}
	calls := f.model.Calls()
	if len(calls) != 2 || calls[1].Messages[len(calls[1].Messages)-1].Role != "tool" || len(calls[0].Tools) != 1 {
		t.Fatalf("the continuation did not see the tool results: %d calls", len(calls))
	}
}

// R-GEN-07: when maxSteps refuses a continuation, the turn fails with
// stepLimit.
func TestMaxStepsFailsWithStepLimit(t *testing.T) {
	echo := tools.Tool{Name: "echo", Execute: func(_ context.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil }}
	f := newFixture(t, `{"replies":[{"toolCalls":[{"name":"echo","input":{}}],"then":{"text":"never"}}]}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{echo}; a.MaxSteps = 1 })
	f.push("s1", protocol.Inputs.Text("m1", "loop"))
	st := f.waitFor("s1", "step limit", func(s *protocol.AIState) bool { return s.Status == protocol.StatusFailed })
	if st.Error == nil || !st.Error.StepLimit || len(f.model.Calls()) != 1 {
		t.Fatalf("error %+v, %d calls", st.Error, len(f.model.Calls()))
	}
}
