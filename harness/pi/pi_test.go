package pi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/external/externaltest"
	"github.com/a2-runtime/a2/harness/pi"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
	"github.com/a2-runtime/a2/tools/sandbox"
)

// startPi starts the sidecar, or skips where it is not installed (fails
// with A2_REQUIRE_PI set, as .ci/run sets it).
func startPi(t *testing.T, pool *sandbox.Pool) *pi.Harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := pi.New(ctx, pi.Options{Sandbox: pool.Sandbox, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if errors.Is(err, pi.ErrNotInstalled) && os.Getenv("A2_REQUIRE_PI") == "" {
		t.Skip("the Pi sidecar is not installed: run npm ci in harness/pi/sidecar, then go test ./harness/pi")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// fixture is a runtime with one agent whose steps run through Pi.
type fixture struct {
	*externaltest.Runtime
	models *externaltest.Models
}

func newFixture(t *testing.T, h *pi.Harness, scriptJSON string, agentTools ...tools.Tool) *fixture {
	t.Helper()
	f := &fixture{models: externaltest.NewModels(t, scriptJSON)}
	f.Runtime = externaltest.Start(t, actors.AgentOptions{Model: harness.ModelID("script/test"), Instructions: harness.Instructions("Answer in one word."),
		Models: f.models.Provider, Tools: withTools(h.Tools(), agentTools), Harness: actors.HarnessOptions{Generate: h.Generate(f.models.Provider)}})
	return f
}

func (f *fixture) turn(session, text string) *protocol.AIState {
	return f.Turn(session, text, 60*time.Second)
}

// R-HARNESS-19 R-HARNESS-22 R-HARNESS-26: a response through Pi: Pi's
// system prompt with the agent's instructions added, each model call Pi
// makes a step (made live through the agent's models with Pi's prompt and
// tools, the earlier ones replayed to Pi from the log), and Pi's write,
// read and bash A2 tool calls that run Pi's own implementations on the
// session's sandbox, in its directory and with its environment, never the
// server's.
func TestAResponseThroughPi(t *testing.T) {
	t.Setenv("A2_TEST_SERVER_SECRET", "sk-do-not-leak")
	pool := sandbox.NewPool(t.TempDir(), func(dir string) (sandbox.Sandbox, error) { return sandbox.NewDir(dir, sandbox.DirOptions{}) })
	h := startPi(t, pool)
	names := map[string]bool{}
	for _, tool := range h.Tools() {
		names[tool.Name] = true
	}
	if len(names) != 4 || !names["read"] || !names["write"] || !names["edit"] || !names["bash"] {
		t.Fatalf("Pi's tools: %v", names)
	}
	f := newFixture(t, h, `{"default":{"toolCalls":[{"id":"w1","name":"write","input":{"path":"hello.txt","content":"hi from pi\n"}}],
		"then":{"toolCalls":[{"id":"r1","name":"read","input":{"path":"hello.txt","limit":"1"}},
			{"id":"b1","name":"bash","input":{"command":"cat hello.txt; echo secret=[$A2_TEST_SERVER_SECRET]; pwd"}}],
		"then":{"text":"done"}}}}`)
	st := f.turn("s1", "write a greeting and read it back")
	if st.Status == protocol.StatusFailed {
		t.Fatalf("the response failed: %+v", st.Error)
	}
	parts := externaltest.ToolParts(st)
	var text strings.Builder
	for _, p := range st.Messages[len(st.Messages)-1].Parts {
		if p.Type == protocol.PartText {
			text.WriteString(p.Text)
		}
	}
	if text.String() != "done" {
		t.Fatalf("the response's text %q", text.String())
	}
	out := func(id string) string {
		p := parts[id]
		var s string
		if p.State != "output-available" || json.Unmarshal(p.Output, &s) != nil {
			t.Fatalf("%s: %s %s %q", id, p.State, p.Output, p.ErrorText)
		}
		return s
	}
	if s := out("w1"); !strings.Contains(s, "Successfully wrote") {
		t.Fatalf("write: %q", s)
	}
	// Pi's check coerced limit "1" to a number (R-HARNESS-20's first check).
	if s := out("r1"); !strings.Contains(s, "hi from pi") {
		t.Fatalf("read: %q", s)
	}
	sb, err := pool.Sandbox(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if s := out("b1"); !strings.Contains(s, "hi from pi") || !strings.Contains(s, "secret=[]") || !strings.Contains(s, sb.WorkDir()) {
		t.Fatalf("bash: %q: want the file, no server secret, the sandbox's directory %s", s, sb.WorkDir())
	}
	rc, err := sb.ReadFile(context.Background(), "hello.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hi from pi\n" {
		t.Fatalf("the sandbox's file: %q", b)
	}
	reqs := f.models.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model calls, want 3 (one per step, the earlier ones replayed from the log)", len(reqs))
	}
	for i, r := range reqs {
		if !strings.Contains(r.System, "running inside pi") || !strings.Contains(r.System, "Answer in one word.") {
			t.Fatalf("call %d's system prompt is not Pi's with the instructions: %q", i+1, r.System)
		}
		tools := map[string]bool{}
		for _, d := range r.Tools {
			tools[d.Name] = true
		}
		if !tools["read"] || !tools["bash"] {
			t.Fatalf("call %d's tools %v: want Pi's", i+1, tools)
		}
	}
	if last := reqs[2].Messages; len(last) != 5 || last[4].Role != harness.ModelRoleTool || len(last[4].Content) != 2 {
		b, _ := json.Marshal(last)
		t.Fatalf("the third call's messages: %s", b)
	}
}

// withTools is Pi's tools and the agent's, an agent tool replacing Pi's of
// the same name.
func withTools(pis, agents []tools.Tool) []tools.Tool {
	out := append([]tools.Tool(nil), agents...)
	for _, p := range pis {
		if !slices.ContainsFunc(agents, func(a tools.Tool) bool { return a.Name == p.Name }) {
			out = append(out, p)
		}
	}
	return out
}

// R-HARNESS-19: the agent's tools are added to Pi's, and an agent tool of
// one of Pi's names replaces Pi's: the model sees the agent's definition
// and A2 runs the agent's tool.
func TestAnAgentToolReplacesPis(t *testing.T) {
	pool := sandbox.NewPool(t.TempDir(), func(dir string) (sandbox.Sandbox, error) { return sandbox.NewDir(dir, sandbox.DirOptions{}) })
	h := startPi(t, pool)
	read := tools.Tool{Name: "read", Description: "Reads the team's wiki page of a topic.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"topic":{"type":"string"}},"required":["topic"]}`),
		Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			return json.Marshal("the wiki says hello")
		}}
	weather := tools.Tool{Name: "weather", Description: "Tells the weather.", InputSchema: json.RawMessage(`{"type":"object"}`),
		Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.Marshal("sunny") }}
	f := newFixture(t, h, `{"default":{"toolCalls":[{"id":"r1","name":"read","input":{"topic":"greetings"}},{"id":"w1","name":"weather","input":{}}],"then":{"text":"done"}}}`, read, weather)
	st := f.turn("s1", "what does the wiki say?")
	var outputs []string
	for _, p := range st.Messages[len(st.Messages)-1].Parts {
		if p.ToolCallID != "" {
			outputs = append(outputs, p.ToolCallID+"="+string(p.Output))
		}
	}
	if strings.Join(outputs, ",") != `r1="the wiki says hello",w1="sunny"` {
		t.Fatalf("the tools' outputs %v (status %s, %+v)", outputs, st.Status, st.Error)
	}
	reqs := f.models.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	defs := map[string]string{}
	for _, d := range reqs[0].Tools {
		defs[d.Name] = d.Description
	}
	if defs["read"] != read.Description || defs["weather"] != weather.Description || defs["bash"] == "" {
		t.Fatalf("the tools the model saw: %v; want the agent's read and weather, and Pi's bash", defs)
	}
}

func TestNewNeedsASandbox(t *testing.T) {
	if _, err := pi.New(context.Background(), pi.Options{}); err == nil || !strings.Contains(err.Error(), "Sandbox") {
		t.Fatalf("pi.New without a sandbox: %v, want a construction error (R-HARNESS-25)", err)
	}
}
