package actors

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// A tool whose Execute panics ends its attempt with an error result, as a
// thrown exception does in the AI SDK: the model sees it, the
// turn goes on, and the node serves the next turn. Without the recovery
// the panic ends the test process.
func TestAToolThatPanicsIsAnErrorResult(t *testing.T) {
	var runs atomic.Int64
	boom := tools.Tool{Name: "boom", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		if runs.Add(1) == 1 {
			panic("the tool's own bug")
		}
		return json.RawMessage(`{"ok":true}`), nil
	}}
	f := newFixture(t, `{"replies":[
		{"match":"first","toolCalls":[{"name":"boom","input":{}}],"then":{"text":"The tool failed."}},
		{"match":"second","toolCalls":[{"name":"boom","input":{}}],"then":{"text":"The tool worked."}}]}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{boom} })
	f.push("s1", protocol.Inputs.Text("m1", "first"))
	st := f.waitFor("s1", "the first turn", func(s *protocol.AIState) bool {
		return idle(s) && len(s.Messages) == 2 && strings.Contains(lastText(s), "failed")
	})
	var part *protocol.Part
	for i, p := range st.Messages[1].Parts {
		if p.IsToolPart() {
			part = &st.Messages[1].Parts[i]
		}
	}
	if part == nil || part.State != protocol.ToolOutputError || part.ErrorText != "the tool panicked: the tool's own bug" {
		t.Fatalf("the tool's part: %+v", part)
	}
	f.push("s1", protocol.Inputs.Text("m2", "second"))
	f.waitFor("s1", "the second turn", func(s *protocol.AIState) bool {
		return idle(s) && len(s.Messages) == 4 && strings.Contains(lastText(s), "worked")
	})
	if runs.Load() != 2 {
		t.Fatalf("the tool ran %d times, want 2", runs.Load())
	}
}

// A panic in a model step fails the turn with the panic's value, before
// the step's start is reported (a resolver: R-GEN-16) and after it (a
// custom generate); a retry then answers.
func TestAModelStepThatPanicsFailsTheTurn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(a *AgentOptions, calls *atomic.Int64)
	}{
		{"in a resolver", func(a *AgentOptions, calls *atomic.Int64) {
			a.Instructions = harness.InstructionsFunc(func(context.Context, harness.ResolverContext) (string, error) {
				if calls.Add(1) == 1 {
					panic("a resolver's bug")
				}
				return "Be brief.", nil
			})
		}},
		{"in a custom generate", func(a *AgentOptions, calls *atomic.Int64) {
			models := a.Models
			a.Harness.Generate = func(ctx context.Context, gc GenerateContext) (harness.Stream, error) {
				if calls.Add(1) == 1 {
					panic("a harness's bug")
				}
				m, err := models(gc.Model.Model)
				if err != nil {
					return nil, err
				}
				return m.Stream(ctx, harness.Request{Model: gc.Model.Model, Messages: gc.ModelMessages})
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			f := newFixture(t, `{"replies":[{"text":"answered"}]}`, func(a *AgentOptions) { tc.setup(a, &calls) })
			f.push("s1", protocol.Inputs.Text("m1", "hello"))
			st := f.waitFor("s1", "failure", func(s *protocol.AIState) bool { return s.Status == protocol.StatusFailed })
			if st.Error == nil || !strings.HasPrefix(st.Error.Message, "the model step panicked: ") {
				t.Fatalf("error %+v", st.Error)
			}
			// A retry runs the step again, which does not panic this time.
			f.push("s1", protocol.Actions{View: st, NewID: func() string { return "r1" }}.Retry()...)
			f.waitFor("s1", "the retried turn", func(s *protocol.AIState) bool {
				return idle(s) && strings.Contains(lastText(s), "answered")
			})
		})
	}
}
