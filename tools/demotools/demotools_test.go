package demotools_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/gateway/gatewaytest"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/demo"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools/demotools"
)

func TestEvaluate(t *testing.T) {
	cases := []struct {
		expr string
		want float64
		err  string
	}{
		{"2+3", 5, ""},
		{"(2+3)*4", 20, ""},
		{"2 + 3 * 4", 14, ""},
		{"10 / 4", 2.5, ""},
		{"7 % 3", 1, ""},
		{"2^3^2", 512, ""},
		{"-2^2", -4, ""},
		{"2^-1", 0.5, ""},
		{"-(3 - 5)", 2, ""},
		{"6 × 7 ÷ 2", 21, ""},
		{"1/0", 0, "division by zero"},
		{"", 0, "empty"},
		{"2+", 0, "ends too early"},
		{"(2+3", 0, "missing )"},
		{"2+3)", 0, "unexpected"},
		{"2 plus 3", 0, "unexpected"},
		{"1.2.3", 0, "not a number"},
		{"10^400", 0, "not a finite number"},
		{strings.Repeat("(", 200) + "1" + strings.Repeat(")", 200), 0, "nests deeper"},
		{strings.Repeat("-", 500) + "1", 0, "nests deeper"},
	}
	for _, tc := range cases {
		got, err := demotools.Evaluate(tc.expr)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Evaluate(%.20q) = %v, %v; want an error with %q", tc.expr, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Evaluate(%q) = %v, %v; want %v", tc.expr, got, err, tc.want)
		}
	}
}

// R-TOOL-01 R-HARNESS-03: with the runtime, a request for arithmetic or
// the time runs the demo tool as a durable A2 tool call, and the
// continuation answers from its result.
func TestDemoToolFlow(t *testing.T) {
	model := demo.New(0)
	n := gatewaytest.Start(t, gatewaytest.Options{Agent: func(o *actors.AgentOptions) {
		o.Model = harness.ModelID(demo.ModelID)
		o.Models = func(string) (harness.Model, error) { return model, nil }
		o.Tools = demotools.Tools()
	}})
	cases := []struct {
		session, text, tool string
		check               func(output json.RawMessage, answer string) bool
	}{
		{"calc", "calculate (2+3)*4", demotools.Calculator, func(out json.RawMessage, answer string) bool {
			return string(out) == `{"expression":"(2+3)*4","result":20}` && strings.Contains(answer, "(2+3)*4 = 20")
		}},
		{"clock", "What time is it?", demotools.CurrentTime, func(out json.RawMessage, answer string) bool {
			var r struct{ Time, Timezone string }
			if json.Unmarshal(out, &r) != nil || r.Timezone != "UTC" {
				return false
			}
			tm, err := time.Parse(time.RFC3339, r.Time)
			return err == nil && time.Since(tm) < time.Minute && strings.Contains(answer, tm.Format("15:04"))
		}},
		{"divide", "calculate 1/0", demotools.Calculator, func(_ json.RawMessage, answer string) bool {
			return strings.Contains(answer, "The calculator tool failed: division by zero")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.session, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := n.Runtime.Push(ctx, gatewaytest.Agent, tc.session, []protocol.Event{protocol.Inputs.Text(tc.session+"-m1", tc.text)}, false); err != nil {
				t.Fatal(err)
			}
			var st *protocol.AIState
			for {
				s, _, err := n.Runtime.State(ctx, gatewaytest.Agent, tc.session)
				if err != nil {
					t.Fatal(err)
				}
				if st = s.AI; st.Active == nil && len(st.Messages) == 2 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			var output json.RawMessage
			var answer strings.Builder
			steps := 0
			for _, p := range st.Messages[1].Parts {
				switch {
				case p.Type == protocol.PartStepStart:
					steps++
				case p.IsToolPart():
					if p.ToolNameOf() != tc.tool {
						t.Fatalf("tool part %s", p.Type)
					}
					output = p.Output
					if p.State == protocol.ToolOutputError {
						output = json.RawMessage(p.ErrorText)
					}
				case p.Type == protocol.PartText:
					answer.WriteString(p.Text)
				}
			}
			if steps != 2 || !tc.check(output, answer.String()) {
				t.Fatalf("%d steps, tool output %s, answer %q", steps, output, answer.String())
			}
		})
	}
}
