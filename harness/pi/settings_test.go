package pi_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/external/externaltest"
	"github.com/a2-runtime/a2/protocol"
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
		if rules := fmt.Sprintf("Rules of step %d.", i+1); !strings.Contains(r.System, rules) || !strings.Contains(r.System, "running inside pi") {
			t.Errorf("call %d's system prompt lacks Pi's prompt or %q: %q", i+1, rules, r.System)
		}
	}
}
