package pi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/external/externaltest"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// R-HARNESS-04 R-HARNESS-21: under Pi the model and the instructions are
// resolved for each step, as for any agent; the step's reasoning level
// becomes Pi's thinking level, and the live call is made at the level Pi
// asks for (A2's none is Pi's off; a step without a level leaves the
// call's reasoning to the agent's settings); speed fast asks for the
// Gateway's fast tier.
func TestPiTakesEachStepsModelAndReasoning(t *testing.T) {
	steps := []harness.ModelSettings{
		{Model: "script/a", Reasoning: "high", Speed: harness.SpeedFast},
		{Model: "script/b", Reasoning: "xhigh"},
		{Model: "script/c", Reasoning: "none"},
		{Model: "script/d"},
	}
	var mu sync.Mutex
	resolved := map[string]int{} // calls of each resolver
	next := func(kind string) int {
		mu.Lock()
		defer mu.Unlock()
		n := resolved[kind]
		resolved[kind]++
		return min(n, len(steps)-1)
	}
	h := startPi(t, dirPool(t))
	models := externaltest.NewModels(t, `{"default":{"toolCalls":[{"id":"w1","name":"write","input":{"path":"a.txt","content":"a"}}],
		"then":{"toolCalls":[{"id":"b1","name":"bash","input":{"command":"cat a.txt"}}],
		"then":{"toolCalls":[{"id":"r1","name":"read","input":{"path":"a.txt"}}],
		"then":{"text":"done"}}}}}`)
	rt := externaltest.Start(t, actors.AgentOptions{
		Model: harness.ModelFunc(func(context.Context, harness.ResolverContext) (harness.ModelSettings, error) {
			return steps[next("model")], nil
		}),
		Instructions: harness.InstructionsFunc(func(context.Context, harness.ResolverContext) (string, error) {
			return fmt.Sprintf("Rules of step %d.", next("instructions")+1), nil
		}),
		Models: models.Provider, Tools: h.Tools(), Harness: h.HarnessOptions(models.Provider)})
	st := rt.Turn("s1", "write, show and read a.txt", 60*time.Second)
	if st.Status == protocol.StatusFailed {
		t.Fatalf("the response failed: %+v", st.Error)
	}
	reqs := models.Requests()
	if len(reqs) != len(steps) || resolved["model"] != len(steps) {
		t.Fatalf("%d model calls, the model resolved %d times; want %d of each (one per step)", len(reqs), resolved["model"], len(steps))
	}
	for i, r := range reqs {
		want := steps[i]
		speed := string(r.Settings.ProviderOptions["gateway"]["speed"])
		if r.Model != want.Model || r.Settings.Reasoning != want.Reasoning || (speed == `"fast"`) != (want.Speed == harness.SpeedFast) {
			t.Errorf("call %d: model %q, reasoning %q, gateway speed %s; want %q, %q, fast %v", i+1, r.Model, r.Settings.Reasoning, speed, want.Model, want.Reasoning, want.Speed == harness.SpeedFast)
		}
		// The Gateway defaults of any A2 step: caching auto and the
		// session's stable affinity.
		if c := string(r.Settings.ProviderOptions["gateway"]["caching"]); c != `"auto"` || r.Headers[harness.SessionAffinityHeader] != harness.SessionAffinity("s1") {
			t.Errorf("call %d: gateway caching %s, headers %v; want auto and the session's affinity", i+1, c, r.Headers)
		}
		if rules := fmt.Sprintf("Rules of step %d.", i+1); !strings.Contains(r.System, rules) || !strings.Contains(r.System, "running inside pi") {
			t.Errorf("call %d's system prompt lacks Pi's prompt or %q: %q", i+1, rules, r.System)
		}
	}
}

// R-HARNESS-20: every tool call through Pi passes Pi's own check first,
// which coerces ("5" to 5) and rejects what the schema forbids (a number
// that is not one, an unlisted property, a missing path for Pi's read),
// then, for the agent's own tools, the tool's schema in A2. A rejected
// input goes back to the model as an error, and the tool does not run.
func TestEveryPiToolCallPassesPisCheckFirst(t *testing.T) {
	var mu sync.Mutex
	var got []string
	count := tools.Tool{Name: "count", Description: "Counts.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"number"}},"required":["n"],"additionalProperties":false}`),
		Execute: func(_ context.Context, in json.RawMessage) (json.RawMessage, error) {
			mu.Lock()
			got = append(got, string(in))
			mu.Unlock()
			return json.Marshal("counted")
		}}
	h := startPi(t, dirPool(t))
	f := newFixture(t, h, `{"default":{"toolCalls":[
		{"id":"c1","name":"count","input":{"n":"5"}},
		{"id":"c2","name":"count","input":{"n":"five"}},
		{"id":"c3","name":"count","input":{"n":1,"extra":true}},
		{"id":"r1","name":"read","input":{"limit":"x"}}],"then":{"text":"done"}}}`, count)
	st := f.turn("s1", "count")
	parts := externaltest.ToolParts(st)
	if p := parts["c1"]; p.State != "output-available" || string(p.Input) != `{"n":5}` {
		t.Errorf("c1: %s, input %s: want run with n coerced to 5", p.State, p.Input)
	}
	for id, want := range map[string]string{"c2": "n: expected number", "c3": "extra: unknown field", "r1": "path: missing"} {
		if p := parts[id]; p.State != "output-error" || !strings.Contains(p.ErrorText, want) {
			t.Errorf("%s: %s %q: want an error saying %q", id, p.State, p.ErrorText, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != `{"n":5}` {
		t.Fatalf("the agent's tool ran with %v: want once, with the coerced input", got)
	}
}
