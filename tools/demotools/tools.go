// Package demotools holds the tools of the node's demonstration agent:
// current_time and calculator. They are ordinary A2 tools; the demo model
// (harness/demo) calls them by these names.
package demotools

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/a2-runtime/a2/tools"
)

// The tools' names, which the demo model (harness/demo) asks for.
const (
	CurrentTime = "current_time"
	Calculator  = "calculator"
)

// Tools returns the demo tools: current_time (the clock, in UTC or a named
// time zone) and calculator (arithmetic, see Evaluate). Both are ordinary
// A2 tools; the node gives them to its default agent whatever the model.
func Tools() []tools.Tool {
	return []tools.Tool{currentTimeTool(time.Now), calculatorTool()}
}

type timeResult struct {
	Time     string `json:"time"`
	Timezone string `json:"timezone"`
}

type calcResult struct {
	Expression string  `json:"expression"`
	Result     float64 `json:"result"`
}

func currentTimeTool(now func() time.Time) tools.Tool {
	return tools.Tool{
		Name:        CurrentTime,
		Description: "Returns the current date and time, in UTC or in the given IANA time zone.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"timezone":{"type":"string","description":"an IANA time zone such as Europe/Paris; UTC when absent"}},"additionalProperties":false}`),
		Execute: func(_ context.Context, input json.RawMessage) (json.RawMessage, error) {
			var in struct {
				Timezone string `json:"timezone"`
			}
			if err := json.Unmarshal(input, &in); err != nil {
				return nil, err
			}
			loc := time.UTC
			if in.Timezone != "" {
				l, err := time.LoadLocation(in.Timezone)
				if err != nil {
					return nil, fmt.Errorf("unknown time zone %q", in.Timezone)
				}
				loc = l
			}
			t := now().In(loc)
			return json.Marshal(timeResult{Time: t.Format(time.RFC3339), Timezone: loc.String()})
		},
	}
}

func calculatorTool() tools.Tool {
	return tools.Tool{
		Name:        Calculator,
		Description: "Evaluates an arithmetic expression: numbers, + - * / % ^ and parentheses.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string","description":"for example (2+3)*4"}},"required":["expression"],"additionalProperties":false}`),
		Execute: func(_ context.Context, input json.RawMessage) (json.RawMessage, error) {
			var in struct {
				Expression string `json:"expression"`
			}
			if err := json.Unmarshal(input, &in); err != nil {
				return nil, err
			}
			v, err := Evaluate(in.Expression)
			if err != nil {
				return nil, err
			}
			return json.Marshal(calcResult{Expression: in.Expression, Result: v})
		},
	}
}
