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
// answers from it; inside Execute the handler context gives the work event,
// the call, the attempt, the session and a cancellation signal. Input the schema rejects goes back to the model as an
// error and the tool does not run.
func TestToolCallAndContinuation(t *testing.T) {
	var runs atomic.Int64
	weather := tools.Tool{Name: "weather", Description: "current weather",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
		Execute: func(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
			runs.Add(1)
			hc, err := tools.FromContext(ctx)
			if err != nil || hc.Attempt != 1 || hc.Call.ToolName != "weather" || hc.Event.Type != protocol.TypeToolExecRequested ||
				hc.Session != "s1" || hc.Call.GenerationID == "" || hc.Call.TurnID == "" || hc.Event.ID == "" {
				return nil, errors.New("bad handler context")
			}
			// The signal: the call's context can be cancelled (Pause now
			// and Stop cancel it: TestPauseNowWithReportAndRerunTools).
			if ctx.Done() == nil {
				return nil, errors.New("the handler context carries no cancellation signal")
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

// notes is the application state of notesContract.
type notes struct {
	Count int `json:"count"`
}

// notesContract is a contract named assistant whose reducer counts the
// note.added events.
func notesContract(t *testing.T) *protocol.Contract {
	t.Helper()
	c, err := protocol.AgentContract(protocol.ContractOptions{Name: "assistant",
		Events: map[string]protocol.Schema{"note.added": nil},
		Reducer: protocol.NewReducer("notes.v1", notes{}, func(n notes, ev protocol.Event) notes {
			if ev.Type == "note.added" {
				n.Count++
			}
			return n
		})})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// R-TOOL-22: a tool written against a shared contract gets its handler
// context through tools.ContextFor(ctx, contract), and appends that
// contract's application events; run by an agent of another contract it
// gets ErrContractMismatch (the call ends as an error result) and appends
// nothing.
func TestHandlerContextForAContract(t *testing.T) {
	desk := notesContract(t)
	other, err := protocol.AgentContract(protocol.ContractOptions{Name: "assistant"})
	if err != nil {
		t.Fatal(err)
	}
	var mismatch atomic.Value
	note := tools.Tool{Name: "note", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		hc, err := tools.ContextFor(ctx, desk)
		if err != nil {
			mismatch.Store(err)
			return nil, err
		}
		id := "note-" + hc.Call.ToolCallID
		if _, err := hc.Append(ctx, protocol.Event{ID: id, Type: "note.added", Payload: json.RawMessage(`{}`)}); err != nil {
			return nil, err
		}
		return json.RawMessage(`{"noted":true}`), nil
	}}
	script := `{"replies":[{"match":"note","toolCalls":[{"name":"note","input":{}}],"then":{"text":"done"}}]}`
	for _, tc := range []struct {
		name     string
		contract *protocol.Contract
		state    string // the tool part's final state
		count    int
	}{
		{"the tool's contract", desk, protocol.ToolOutputAvailable, 1},
		{"another contract", other, protocol.ToolOutputError, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mismatch = atomic.Value{}
			f := newFixture(t, script, func(a *AgentOptions) {
				a.Name, a.Contract, a.Tools = "", tc.contract, []tools.Tool{note}
			})
			f.push("s1", protocol.Inputs.Text("m1", "note this"))
			st := f.waitFor("s1", "answered", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
			var states []string
			for _, p := range st.Messages[1].Parts {
				if p.IsToolPart() {
					states = append(states, p.State)
				}
			}
			if len(states) != 1 || states[0] != tc.state {
				t.Fatalf("tool parts %v, want [%s]", states, tc.state)
			}
			full, _, err := f.rt.State(context.Background(), "assistant", "s1")
			if err != nil {
				t.Fatal(err)
			}
			if tc.contract == desk {
				if n := full.App.(notes).Count; n != tc.count {
					t.Fatalf("%d notes in the application state, want %d", n, tc.count)
				}
				return
			}
			err, _ = mismatch.Load().(error)
			if !errors.Is(err, tools.ErrContractMismatch) || !strings.Contains(err.Error(), "notes.v1") {
				t.Fatalf("ContextFor under another contract: %v", err)
			}
			evs, _ := f.store.Read(context.Background(), "s1", 0, 1000)
			for _, ev := range evs {
				if ev.Type == "note.added" {
					t.Fatal("a note was appended under another contract")
				}
			}
		})
	}
	if _, err := tools.ContextFor(context.Background(), desk); !errors.Is(err, tools.ErrNoHandlerContext) {
		t.Fatalf("ContextFor outside Execute: %v", err)
	}
}
