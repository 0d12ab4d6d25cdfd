package external_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/external"
	"github.com/a2-runtime/a2/harness/external/externaltest"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
	"github.com/a2-runtime/a2/tools/sandbox"
)

// The 3-step turn's script: a step that calls the calculator, the tool,
// a step that answers.
const turnScript = `{"default":{"text":"let me check","toolCalls":[{"id":"c1","name":"calculator","input":{"expression":"6*7"}}],"then":{"text":"the answer is forty two"}}}`

const loopSystem = "You are the reference loop."

// referenceLoop starts the reference loop (node reference-loop.mjs) with
// env; the test skips where node is not installed.
func referenceLoop(t *testing.T, env ...string) *external.Loop {
	t.Helper()
	return referenceLoopIn(t, nil, env...)
}

// referenceLoopIn starts the reference loop with the sandboxes of a pool.
func referenceLoopIn(t *testing.T, pool *sandbox.Pool, env ...string) *external.Loop {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node (Node.js 18 or later) is not on PATH: the reference loop is JavaScript; install Node.js and run go test ./harness/external")
	}
	opts := external.Options{Command: []string{node, "reference-loop.mjs"}, Env: append([]string{"REFLOOP_SYSTEM=" + loopSystem}, env...)}
	if pool != nil {
		opts.Sandboxes = pool.Sandbox
	}
	l, err := external.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// fixture is a runtime with one agent whose steps run through loop, with
// a calculator tool that counts its runs.
type fixture struct {
	*externaltest.Runtime
	models *externaltest.Models
	runs   atomic.Int32 // the calculator's executions
}

func newFixture(t *testing.T, loop *external.Loop, scriptJSON string, extra ...tools.Tool) *fixture {
	t.Helper()
	f := &fixture{models: externaltest.NewModels(t, scriptJSON)}
	calc := tools.Tool{Name: "calculator", Description: "Evaluates arithmetic.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"]}`),
		Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			f.runs.Add(1)
			return json.RawMessage(`{"result":42}`), nil
		}}
	f.Runtime = externaltest.Start(t, actors.AgentOptions{Model: harness.ModelID("script/test"), Instructions: harness.Instructions("Be brief."),
		Models: f.models.Provider, Tools: append([]tools.Tool{calc}, extra...),
		Harness: loop.HarnessOptions(f.models.Provider)})
	return f
}

// turn pushes a message and waits (bounded) until the session settles.
func (f *fixture) turn(session, text string) *protocol.AIState {
	return f.Turn(session, text, 20*time.Second)
}

func responseText(st *protocol.AIState) string {
	var b strings.Builder
	for _, p := range st.Messages[len(st.Messages)-1].Parts {
		if p.Type == protocol.PartText {
			b.WriteString(p.Text + "|")
		}
	}
	return b.String()
}

// R-HARNESS-02 R-HARNESS-07 R-HARNESS-08: a response through the reference
// loop: each of the loop's model calls is a step, the first recorded and replayed to the loop at the second step
// (the model is not called again, the tool does not run again), the live
// call made with the loop's own prompt through the agent's models, and the
// tool an A2 tool execution; one loop process serves both steps.
func TestAResponseThroughTheReferenceLoop(t *testing.T) {
	loop := referenceLoop(t)
	f := newFixture(t, loop, turnScript)
	st := f.turn("s1", "what is six times seven?")
	if got := responseText(st); got != "let me check|the answer is forty two|" {
		t.Fatalf("the response's text: %q (status %s, error %+v)", got, st.Status, st.Error)
	}
	if n := f.runs.Load(); n != 1 {
		t.Fatalf("the calculator ran %d times, want once (the replay answers it from the log)", n)
	}
	reqs := f.models.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the model was called %d times, want 2 (a step each; the replayed call is answered from the log)", len(reqs))
	}
	for i, r := range reqs {
		if !strings.HasPrefix(r.System, loopSystem) || !strings.Contains(r.System, "Be brief.") {
			t.Fatalf("call %d's system prompt %q: want the loop's, with the agent's instructions", i+1, r.System)
		}
	}
	// The second call's prompt is the loop's: the replayed first call and
	// the recorded tool result after the user's message.
	second := reqs[1].Messages
	if len(second) != 3 || second[1].Role != harness.ModelRoleAssistant || second[2].Role != harness.ModelRoleTool ||
		second[2].Content[0].ToolCallID != "c1" || !strings.Contains(string(second[2].Content[0].Output.Value), "42") {
		b, _ := json.Marshal(second)
		t.Fatalf("the second call's messages: %s; want the user's, the replayed call and the tool's result", b)
	}
	if pid := loop.PID(); pid == 0 {
		t.Fatal("the loop's process is not running after the response")
	}
}

// R-HARNESS-07: a loop that ends during a step's replay is started again and the run
// replayed with it; the response completes with no call made twice.
func TestALoopThatDiesDuringTheReplayIsStartedAgain(t *testing.T) {
	loop := referenceLoop(t, "REFLOOP_EXIT_ON_RUN=2") // its second run is the second step's
	f := newFixture(t, loop, turnScript)
	st := f.turn("s1", "what is six times seven?")
	if got := responseText(st); got != "let me check|the answer is forty two|" {
		t.Fatalf("the response's text: %q (status %s, error %+v)", got, st.Status, st.Error)
	}
	if n, calls := f.runs.Load(), len(f.models.Requests()); n != 1 || calls != 2 {
		t.Fatalf("the calculator ran %d times and the model %d; want once and twice", n, calls)
	}
}

// A loop that writes what is not the protocol is ended; a step that cannot
// run fails its generation with the reason, and the node goes on.
func TestALoopThatBreaksTheProtocolFailsTheStep(t *testing.T) {
	loop := referenceLoop(t, "REFLOOP_GARBAGE_ON_RUN=1") // every process's first run
	f := newFixture(t, loop, turnScript)
	st := f.turn("s1", "what is six times seven?")
	if st.Status != protocol.StatusFailed || st.Error == nil || !strings.Contains(st.Error.Message, "not the protocol") {
		t.Fatalf("status %s, error %+v: want the generation failed because the loop's output is not the protocol", st.Status, st.Error)
	}
	if calls := len(f.models.Requests()); calls != 0 {
		t.Fatalf("the model was called %d times by a loop that broke the protocol", calls)
	}
}

// What a loop can get wrong, each a real process (sh) writing lines: each
// fails the step with a reason, and nothing crashes.
func TestBadLoops(t *testing.T) {
	hello := `{"type":"hello","protocol":1,"name":"sh"}`
	for _, tc := range []struct {
		name, lines, want string
	}{
		{"exits before its hello", ``, "ended"},
		{"speaks another protocol version", `{"type":"hello","protocol":2,"name":"future"}`, "speaks protocol 2"},
		{"starts with something else", `{"type":"model","call":1}`, "not a hello"},
		{"asks a call past the live one", hello + "\nRUN\n" + `{"type":"model","run":"$RUN","call":2}`, "model call 2"},
		{"asks a tool no call made", hello + "\nRUN\n" + `{"type":"tool","run":"$RUN","toolCallId":"nope","toolName":"calculator"}`, `tool call "nope"`},
		{"ends the response without a model call", hello + "\nRUN\n" + `{"type":"done","run":"$RUN"}`, "before this step's model call"},
		{"fails the run", hello + "\nRUN\n" + `{"type":"error","run":"$RUN","message":"out of ideas"}`, "out of ideas"},
		{"asks a reasoning level A2 does not have", hello + "\nRUN\n" + `{"type":"model","run":"$RUN","call":1,"reasoning":"extreme"}`, `reasoning "extreme" is not one of`},
		{"asks an unknown type", hello + "\nRUN\n" + `{"type":"teleport","run":"$RUN"}`, "unknown message type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// RUN: read the run message and take its ID; then the lines,
			// then wait to be ended (stdin closes).
			var sh strings.Builder
			for _, line := range strings.Split(tc.lines, "\n") {
				switch {
				case line == "":
				case line == "RUN":
					sh.WriteString(`read -r line; RUN=$(printf '%s' "$line" | sed 's/.*"run":"\([^"]*\)".*/\1/')` + "\n")
				default: // single-quoted, with the run's ID spliced in
					sh.WriteString(`printf '%s\n' '` + strings.ReplaceAll(line, "$RUN", `'"$RUN"'`) + "'\n")
				}
			}
			sh.WriteString("cat >/dev/null\n")
			loop, err := external.New(external.Options{Command: []string{"/bin/sh", "-c", sh.String()}, StartTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = loop.Close() })
			f := newFixture(t, loop, turnScript)
			st := f.turn("s1", "hello")
			if st.Status != protocol.StatusFailed || st.Error == nil || !strings.Contains(st.Error.Message, tc.want) {
				t.Fatalf("status %s, error %+v: want the generation failed with %q", st.Status, st.Error, tc.want)
			}
			if calls := len(f.models.Requests()); calls != 0 {
				t.Fatalf("the model was called %d times", calls)
			}
		})
	}
}

// The loop's environment is PATH, HOME, LANG and its own Env: never the
// server's other variables (a provider's key among them).
func TestTheLoopDoesNotSeeTheServersEnvironment(t *testing.T) {
	t.Setenv("A2_TEST_SERVER_SECRET", "sk-do-not-leak")
	sh := `printf '%s\n' '{"type":"hello","protocol":1,"name":"sh"}'
read -r line; RUN=$(printf '%s' "$line" | sed 's/.*"run":"\([^"]*\)".*/\1/')
printf '%s\n' '{"type":"error","run":"'"$RUN"'","message":"secret=['"$A2_TEST_SERVER_SECRET"'] own=['"$OWN"'] path='"${PATH:+set}"'"}'
cat >/dev/null`
	loop, err := external.New(external.Options{Command: []string{"/bin/sh", "-c", sh}, Env: []string{"OWN=mine"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = loop.Close() })
	st := newFixture(t, loop, turnScript).turn("s1", "hello")
	if st.Error == nil || !strings.Contains(st.Error.Message, "secret=[] own=[mine] path=set") {
		t.Fatalf("error %+v: want the loop to see its own variable and PATH, not the server's secret", st.Error)
	}
}

// sandboxes is a pool of directory sandboxes below a temporary directory.
func sandboxes(t *testing.T) *sandbox.Pool {
	return sandbox.NewPool(t.TempDir(), func(dir string) (sandbox.Sandbox, error) { return sandbox.NewDir(dir, sandbox.DirOptions{}) })
}

// The loop's own tools (its hello's) are A2 tools: A2 runs each call as a
// tool execution that asks the loop to run its implementation, and serves
// its sandbox operations against the session's sandbox: a file read, a
// command whose output streams back, with the sandbox's environment and
// never the server's (R-HARNESS-22), a path out of the sandbox refused.
func TestTheLoopsToolsRunAgainstTheSessionsSandbox(t *testing.T) {
	t.Setenv("A2_TEST_SERVER_SECRET", "sk-do-not-leak")
	pool := sandboxes(t)
	loop := referenceLoopIn(t, pool)
	ctx := context.Background()
	loopTools, err := loop.Tools(ctx)
	if err != nil || len(loopTools) != 2 || loopTools[0].Name != "read_file" || loopTools[1].Name != "run" {
		t.Fatalf("the loop's tools: %v, %+v", err, loopTools)
	}
	sb, err := pool.Sandbox(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "notes.txt", strings.NewReader("hello from the sandbox")); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, loop, `{"default":{"toolCalls":[
		{"id":"r1","name":"read_file","input":{"path":"notes.txt"}},
		{"id":"r2","name":"run","input":{"command":"echo out; echo err >&2; echo secret=[$A2_TEST_SERVER_SECRET] pwd=$(pwd); exit 3"}},
		{"id":"r3","name":"read_file","input":{"path":"../outside.txt"}}],
		"then":{"text":"done"}}}`, loopTools...)
	st := f.turn("s1", "look around")
	parts := externaltest.ToolParts(st)
	if p := parts["r1"]; p.State != "output-available" || string(p.Output) != `"hello from the sandbox"` {
		t.Fatalf("read_file: %s %s %s", p.State, p.Output, p.ErrorText)
	}
	var out string
	if p := parts["r2"]; p.State != "output-available" || json.Unmarshal(p.Output, &out) != nil {
		t.Fatalf("run: %s %s %s", p.State, p.Output, p.ErrorText)
	}
	if !strings.Contains(out, "out\n") || !strings.Contains(out, "err\n") || !strings.Contains(out, "secret=[] pwd="+sb.WorkDir()) || !strings.HasSuffix(out, "(exit code 3)") {
		t.Fatalf("run's output %q: want both streams, the sandbox's directory, no server secret, exit code 3", out)
	}
	if p := parts["r3"]; p.State != "output-error" || !strings.Contains(p.ErrorText, "EOUTSIDE") {
		t.Fatalf("a read outside the sandbox: %s %s %q", p.State, p.Output, p.ErrorText)
	}
	if got := responseText(st); got != "done|" {
		t.Fatalf("the response's text %q", got)
	}
}

// R-HARNESS-27: a loop's tool moves at most 4 MiB per file read or command:
// a larger file fails the read, a command whose output passes it is
// stopped; both errors say to read in parts.
func TestTheLoopsToolsReadAtMostFourMiB(t *testing.T) {
	pool := sandboxes(t)
	loop := referenceLoopIn(t, pool)
	ctx := context.Background()
	loopTools, err := loop.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := pool.Sandbox(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "big.txt", strings.NewReader(strings.Repeat("x", external.ReadLimit+1))); err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "edge.txt", strings.NewReader(strings.Repeat("y", external.ReadLimit))); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, loop, `{"default":{"toolCalls":[
		{"id":"b1","name":"read_file","input":{"path":"big.txt"}},
		{"id":"b2","name":"read_file","input":{"path":"edge.txt"}},
		{"id":"b3","name":"run","input":{"command":"head -c 5000000 /dev/zero; echo never"}}],
		"then":{"text":"done"}}}`, loopTools...)
	st := f.turn("s1", "read everything")
	parts := externaltest.ToolParts(st)
	if p := parts["b1"]; p.State != "output-error" || !strings.Contains(p.ErrorText, "larger than 4 MiB") || !strings.Contains(p.ErrorText, "in parts") {
		t.Fatalf("a file past 4 MiB: %s %q", p.State, p.ErrorText)
	}
	if p := parts["b2"]; p.State != "output-available" || len(p.Output) != external.ReadLimit+2 {
		t.Fatalf("a file of exactly 4 MiB: %s, %d bytes of output, %q", p.State, len(p.Output), p.ErrorText)
	}
	if p := parts["b3"]; p.State != "output-error" || !strings.Contains(p.ErrorText, "passed 4 MiB") || !strings.Contains(p.ErrorText, "in parts") {
		t.Fatalf("a command past 4 MiB: %s %q", p.State, p.ErrorText)
	}
}

// R-HARNESS-05: under a harness that runs its own loop, tools run without
// approval: an agent tool that asks for one is refused at construction.
func TestALoopRefusesToolsThatNeedApproval(t *testing.T) {
	loop, err := external.New(external.Options{Command: []string{"/bin/false"}})
	if err != nil {
		t.Fatal(err)
	}
	models := externaltest.NewModels(t, turnScript)
	ask := tools.Tool{Name: "delete_all", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil },
		NeedsApproval: func(json.RawMessage) bool { return true }}
	_, err = actors.NewAgent(actors.AgentOptions{Name: "assistant", Model: harness.ModelID("script/test"), Models: models.Provider,
		Tools: []tools.Tool{ask}, Harness: loop.HarnessOptions(models.Provider)})
	var ce *protocol.ConfigError
	if !errors.As(err, &ce) || ce.Option != "tools[0].needsApproval" || !strings.Contains(ce.Message, "without approval") {
		t.Fatalf("an agent with a tool that needs approval under a loop: %v, want a construction error", err)
	}
	// The same tool under the default harness is fine.
	if _, err := actors.NewAgent(actors.AgentOptions{Name: "assistant", Model: harness.ModelID("script/test"), Models: models.Provider,
		Tools: []tools.Tool{ask}}); err != nil {
		t.Fatal(err)
	}
}

func TestNewNeedsACommand(t *testing.T) {
	if _, err := external.New(external.Options{}); err == nil {
		t.Fatal("a loop without a command was made")
	}
}

func TestMain(m *testing.M) {
	// The reference loop is beside the tests.
	if _, err := os.Stat("reference-loop.mjs"); err != nil {
		fmt.Fprintln(os.Stderr, "reference-loop.mjs is missing:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
