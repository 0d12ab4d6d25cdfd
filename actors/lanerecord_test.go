// What the generation lane and tool runs record in the log: the attempt
// of a start, a step's finish reason, a tool's output when it returns
// nothing, and an error without an output.

package actors

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// OQ-19 and docs/protocol.md §3.9: a start names attempt 1 of its request
// (with the generation ID derived from both), and a completion records the
// step's finish reason; a tool that returns nothing has the output null,
// and a failed one an errorText and no output (R-TOOL-11).
func TestLaneRecordsAttemptFinishAndOutputs(t *testing.T) {
	noop := tools.Tool{Name: "noop", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil }}
	bad := tools.Tool{Name: "bad", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, errors.New("no luck") }}
	f := newFixture(t, `{"replies":[{"match":"tools","toolCalls":[{"id":"n1","name":"noop","input":{}},{"id":"b1","name":"bad","input":{}}],"then":{"text":"done"}}]}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{noop, bad} })
	f.push("s1", protocol.Inputs.Text("m1", "use tools"))
	st := f.waitFor("s1", "the turn's end", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "done" })
	evs, err := f.store.Read(context.Background(), "s1", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, ev := range evs {
		switch ev.Type {
		case protocol.TypeGenerationStarted:
			var p protocol.GenerationStarted
			_ = json.Unmarshal(ev.Payload, &p)
			if p.Attempt != 1 || p.GenerationID != protocol.GenerationIDFor(p.RequestID, 1) {
				t.Errorf("start %s: attempt %d, generation %s", ev.ID, p.Attempt, p.GenerationID)
			}
		case protocol.TypeGenerationCompleted:
			var p protocol.GenerationCompleted
			_ = json.Unmarshal(ev.Payload, &p)
			reasons = append(reasons, p.FinishReason)
		case protocol.TypeToolExecCompleted:
			var p map[string]json.RawMessage
			_ = json.Unmarshal(ev.Payload, &p)
			out, hasOut := p["output"]
			_, hasErr := p["errorText"]
			switch {
			case strings.Contains(string(ev.Payload), `"n1"`) && (!hasOut || string(out) != "null" || hasErr):
				t.Errorf("the noop tool's completion %s, want output null", ev.Payload)
			case strings.Contains(string(ev.Payload), `"b1"`) && (hasOut || !hasErr):
				t.Errorf("the failed tool's completion %s, want an errorText and no output", ev.Payload)
			}
		}
	}
	if strings.Join(reasons, ",") != "tool-calls,stop" {
		t.Errorf("finish reasons %v, want tool-calls then stop", reasons)
	}
	for _, p := range st.Messages[1].Parts {
		if p.ToolCallID == "n1" && (p.State != protocol.ToolOutputAvailable || string(p.Output) != "null") {
			t.Errorf("the noop part %+v, want output-available with output null", p)
		}
	}
}

// ctxErrModel streams nothing and, when its context ends, returns
// ctx.Err() (as HTTP providers do), not the context's cause.
type ctxErrModel struct{}

type ctxErrStream struct{ ctx context.Context }

func (ctxErrModel) Stream(ctx context.Context, _ harness.Request) (harness.Stream, error) {
	return ctxErrStream{ctx}, nil
}

func (s ctxErrStream) Next() (protocol.UIMessageChunk, error) {
	<-s.ctx.Done()
	return protocol.UIMessageChunk{}, s.ctx.Err()
}

func (ctxErrStream) Close() error { return nil }

// R-TOOL-09, docs/providers.md: a step that runs out of its StepTimeout
// fails with the timeout's message, also when the model reports only
// "context deadline exceeded".
func TestStepTimeoutNamesItself(t *testing.T) {
	f := newFixture(t, `{}`, func(a *AgentOptions) {
		a.Models = func(string) (harness.Model, error) { return ctxErrModel{}, nil }
		a.Harness.StepTimeout = 200 * time.Millisecond
	})
	f.push("s1", protocol.Inputs.Text("m1", "hi"))
	st := f.waitFor("s1", "the timeout", func(s *protocol.AIState) bool { return s.Status == protocol.StatusFailed })
	if st.Error == nil || !strings.Contains(st.Error.Message, "the model step timed out after 200ms") {
		t.Fatalf("error %+v, want the step timeout's message", st.Error)
	}
}
