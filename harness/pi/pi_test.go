package pi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/external"
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
	return startPiWith(t, pool.Sandbox)
}

func startPiWith(t *testing.T, resolve external.SandboxFor) *pi.Harness {
	t.Helper()
	return startPiOpts(t, pi.Options{Sandbox: resolve})
}

// startPiOpts starts the sidecar with o, or skips as startPi does.
func startPiOpts(t *testing.T, o pi.Options) *pi.Harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	h, err := pi.New(ctx, o)
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
	return newFixtureWith(t, h, scriptJSON, nil, agentTools...)
}

// newFixtureWith also sets the agent's tool recovery.
func newFixtureWith(t *testing.T, h *pi.Harness, scriptJSON string, recovery map[string]string, agentTools ...tools.Tool) *fixture {
	t.Helper()
	f := &fixture{models: externaltest.NewModels(t, scriptJSON)}
	f.Runtime = externaltest.Start(t, actors.AgentOptions{Model: harness.ModelID("script/test"), Instructions: harness.Instructions("Answer in one word."),
		Models: f.models.Provider, Tools: withTools(h.Tools(), agentTools), Harness: h.HarnessOptions(f.models.Provider), ToolRecovery: recovery})
	return f
}

func (f *fixture) turn(session, text string) *protocol.AIState {
	return f.Turn(session, text, 60*time.Second)
}

// R-HARNESS-19 R-HARNESS-22 R-HARNESS-26 R-HARNESS-28: a response through Pi: Pi's
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
	// R-HARNESS-28: the harness is the server's, and its credentials stay
	// there: the sidecar's environment has none of the server's variables
	// (A2's own model layer makes every call).
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", h.PID()))
	if err != nil || len(environ) == 0 || strings.Contains(string(environ), "sk-do-not-leak") {
		t.Fatalf("the sidecar's environment (%v): %d bytes, the server's secret in it: %v", err, len(environ), strings.Contains(string(environ), "sk-do-not-leak"))
	}
	names := map[string]bool{}
	for _, tool := range h.Tools() {
		names[tool.Name] = true
		if want := map[bool]string{true: "report", false: ""}[tool.Name == "bash"]; tool.Recovery != want {
			t.Fatalf("Pi's %s has recovery %q, want %q (a command cut off by a crash is reported, not run again)", tool.Name, tool.Recovery, want)
		}
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

// dirPool is a pool of directory sandboxes below a temporary directory.
func dirPool(t *testing.T) *sandbox.Pool {
	return sandbox.NewPool(t.TempDir(), func(dir string) (sandbox.Sandbox, error) { return sandbox.NewDir(dir, sandbox.DirOptions{}) })
}

// readFile reads a file of a session's sandbox ("" when there is none).
func readFile(t *testing.T, pool *sandbox.Pool, session, path string) string {
	t.Helper()
	sb, err := pool.Sandbox(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := sb.ReadFile(context.Background(), path)
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// R-HARNESS-07 R-HARNESS-26: Pi writes, edits and reads a file and runs a
// command, and the node restarts in the middle of the response, at each of
// several points: the new runtime resumes from the log, replaying to Pi
// what was recorded, and no tool runs again (the command appends a line to
// a file each time it runs). The sandbox's files are the check.
func TestPiResumesAfterACrashWithoutRunningAToolAgain(t *testing.T) {
	tool := func(id string) func(*protocol.AIState) bool {
		return func(st *protocol.AIState) bool { return st.Tools[id].Status == "completed" }
	}
	for _, point := range []struct {
		name string
		at   func(*protocol.AIState) bool
	}{
		{"after the write", tool("w1")},
		{"after the command", tool("b1")},
		{"while the third step streams", func(st *protocol.AIState) bool {
			return tool("b1")(st) && st.Status == protocol.StatusStreaming && st.Active != nil && st.Active.Steps >= 3
		}},
		{"after the read", tool("r1")},
	} {
		t.Run(point.name, func(t *testing.T) {
			pool := dirPool(t)
			h := startPi(t, pool)
			// Each step streams its text slowly (50 ms a chunk): every
			// restart lands in the middle of the response.
			f := newFixture(t, h, `{"default":{"text":"writing","chunkSize":2,"delayMs":50,"toolCalls":[{"id":"w1","name":"write","input":{"path":"notes.txt","content":"alpha\n"}}],
				"then":{"text":"editing","chunkSize":2,"delayMs":50,"toolCalls":[{"id":"e1","name":"edit","input":{"path":"notes.txt","edits":[{"oldText":"alpha","newText":"beta"}]}},
					{"id":"b1","name":"bash","input":{"command":"echo ran >> runs.txt; cat notes.txt"}}],
				"then":{"text":"reading it back","chunkSize":2,"delayMs":50,"toolCalls":[{"id":"r1","name":"read","input":{"path":"notes.txt"}}],
				"then":{"text":"all done","chunkSize":2,"delayMs":50}}}}}`)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := f.RT.Push(ctx, "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m1", "rename alpha")}, false); err != nil {
				t.Fatal(err)
			}
			if at := f.Wait("s1", 30*time.Second, "the crash point", point.at); externaltest.Settled(at) {
				t.Fatal("the response ended before the restart: the crash point is not in the middle")
			}
			f.Restart()
			st := f.Wait("s1", 60*time.Second, "the response's end after the restart", externaltest.Settled)
			if st.Status == protocol.StatusFailed {
				t.Fatalf("the response failed after the restart: %+v", st.Error)
			}
			parts := externaltest.ToolParts(st)
			for _, id := range []string{"w1", "e1", "b1", "r1"} {
				if parts[id].State != "output-available" {
					t.Fatalf("%s: %s %q", id, parts[id].State, parts[id].ErrorText)
				}
			}
			if got := readFile(t, pool, "s1", "notes.txt"); got != "beta\n" {
				t.Fatalf("notes.txt is %q, want the edited %q", got, "beta\n")
			}
			if got := readFile(t, pool, "s1", "runs.txt"); got != "ran\n" {
				t.Fatalf("runs.txt is %q: the command ran %d times, want once", got, strings.Count(got, "ran"))
			}
			if s := string(parts["r1"].Output); !strings.Contains(s, "beta") {
				t.Fatalf("read after the edit: %s", s)
			}
			if n := len(f.models.Requests()); n < 4 || n > 5 {
				t.Fatalf("%d live model calls: want the 4 steps' (5 when the restart cut one off mid-stream)", n)
			}
		})
	}
}

// R-HARNESS-03: Pi's tool calls are ordinary A2 tool calls, recovered as
// the agent's tools are: a node that restarts while Pi's bash runs reports
// the call interrupted by default (bash is a report tool: the command does
// not start again), and runs it again when the agent's toolRecovery names
// bash "rerun".
func TestPisBashCutOffByACrash(t *testing.T) {
	for _, tc := range []struct {
		name     string
		recovery map[string]string
		starts   int
	}{
		{"reported by default", nil, 1},
		{"run again with toolRecovery rerun", map[string]string{"bash": "rerun"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := dirPool(t)
			h := startPi(t, pool)
			f := newFixtureWith(t, h, `{"default":{"toolCalls":[{"id":"b1","name":"bash","input":{"command":"echo start >> runs.txt; sleep 3; echo end >> runs.txt"}}],
				"then":{"text":"done"}}}`, tc.recovery)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := f.RT.Push(ctx, "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m1", "run it")}, false); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for readFile(t, pool, "s1", "runs.txt") == "" {
				if time.Now().After(deadline) {
					t.Fatal("the command did not start")
				}
				time.Sleep(10 * time.Millisecond)
			}
			f.Restart() // while the command sleeps
			st := f.Wait("s1", 30*time.Second, "the response's end after the restart", externaltest.Settled)
			runs := readFile(t, pool, "s1", "runs.txt")
			if got := strings.Count(runs, "start"); got != tc.starts {
				t.Fatalf("the command started %d times (runs.txt %q), want %d", got, runs, tc.starts)
			}
			p := externaltest.ToolParts(st)["b1"]
			if tc.starts == 1 && (p.State != "output-error" || !strings.Contains(p.ErrorText, "interrupted")) {
				t.Fatalf("bash cut off by the restart: %s %q, want reported interrupted", p.State, p.ErrorText)
			}
			if tc.starts == 2 && (p.State != "output-available" || !strings.Contains(runs, "end")) {
				t.Fatalf("bash run again: %s %q, runs.txt %q", p.State, p.ErrorText, runs)
			}
		})
	}
}

// R-HARNESS-23 R-HARNESS-24: the sandbox resolver is called for each step
// (Pi's working directory) and for each tool execution, Pi's tools and the
// agent's alike (the agent's tool gets it in its handler context),
// concurrently when calls run together, and gets the session's own sandbox
// each time (what write put there, bash finds); a resolver that fails is
// tried again (a session whose first call fails completes), and one that
// keeps failing fails the step with its reason.
func TestPisSandboxResolver(t *testing.T) {
	pool := dirPool(t)
	var mu sync.Mutex
	calls := map[string]int{}
	resolve := func(ctx context.Context, session string) (sandbox.Sandbox, error) {
		mu.Lock()
		calls[session]++
		n := calls[session]
		mu.Unlock()
		if session == "broken" || (session == "flaky" && n == 1) {
			return nil, errors.New("the sandbox service is down")
		}
		return pool.Sandbox(ctx, session)
	}
	where := tools.Tool{Name: "where", Description: "Says where the session works.", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		hc, err := tools.FromContext(ctx)
		if err != nil || hc.Sandbox == nil {
			return nil, fmt.Errorf("no sandbox in the handler context (%v)", err)
		}
		return json.Marshal(hc.Sandbox.WorkDir())
	}}
	h := startPiWith(t, resolve)
	f := newFixture(t, h, `{"default":{"toolCalls":[{"id":"w1","name":"write","input":{"path":"a.txt","content":"from write"}}],
		"then":{"toolCalls":[{"id":"b1","name":"bash","input":{"command":"cat a.txt"}},{"id":"b2","name":"bash","input":{"command":"ls"}},{"id":"h1","name":"where","input":{}}],
		"then":{"text":"done"}}}}`, where)
	st := f.turn("s1", "go")
	parts := externaltest.ToolParts(st)
	if string(parts["b1"].Output) != `"from write"` || parts["b2"].State != "output-available" {
		t.Fatalf("bash after write: %s %s %q", parts["b1"].State, parts["b1"].Output, parts["b1"].ErrorText)
	}
	sb, err := pool.Sandbox(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := json.Marshal(sb.WorkDir()); string(parts["h1"].Output) != string(want) {
		t.Fatalf("the agent's tool: %s %s %q; want the session's sandbox %s", parts["h1"].State, parts["h1"].Output, parts["h1"].ErrorText, want)
	}
	mu.Lock()
	n := calls["s1"]
	mu.Unlock()
	if steps, executions := len(f.models.Requests()), 4; n != steps+executions {
		t.Fatalf("the resolver was called %d times for the session, want once per step (%d) and per tool execution (%d)", n, steps, executions)
	}
	if st = f.turn("flaky", "go"); st.Status == protocol.StatusFailed {
		t.Fatalf("a resolver that failed once: %+v; want it tried again and the response completed", st.Error)
	}
	st = f.turn("broken", "go")
	if st.Status != protocol.StatusFailed || st.Error == nil || !strings.Contains(st.Error.Message, "the sandbox service is down") || !strings.Contains(st.Error.Message, "3 tries") {
		t.Fatalf("a failing resolver: status %s, error %+v; want the step failed with its reason after 3 tries", st.Status, st.Error)
	}
}

// R-HARNESS-27: Pi's read and edit of a file past 4 MiB are refused, and
// its bash command whose output passes 4 MiB is stopped and fails, each
// with an error that says to read in parts.
func TestPiReadsAtMostFourMiB(t *testing.T) {
	pool := dirPool(t)
	h := startPi(t, pool)
	sb, err := pool.Sandbox(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(context.Background(), "big.txt", strings.NewReader(strings.Repeat("x\n", external.ReadLimit/2)+"x")); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, h, `{"default":{"toolCalls":[{"id":"r1","name":"read","input":{"path":"big.txt"}},
		{"id":"e1","name":"edit","input":{"path":"big.txt","edits":[{"oldText":"x\nx\nx\nx","newText":"y"}]}},
		{"id":"b1","name":"bash","input":{"command":"head -c 5000000 /dev/zero | tr '\\0' z; echo ran-to-the-end > ran.txt"}}],"then":{"text":"done"}}}`)
	st := f.turn("s1", "read the big file")
	parts := externaltest.ToolParts(st)
	for _, id := range []string{"r1", "e1", "b1"} {
		p := parts[id]
		if p.State != "output-error" || !strings.Contains(p.ErrorText, "4 MiB") || !strings.Contains(p.ErrorText, "in parts") {
			t.Errorf("Pi's %s past 4 MiB: %s %q; want an error saying to read in parts", id, p.State, p.ErrorText)
		}
	}
	// The edit changed nothing; the command was stopped before its end.
	if b := readFile(t, pool, "s1", "big.txt"); len(b) != external.ReadLimit+1 || strings.Contains(b, "y") {
		t.Errorf("the big file after the refused edit: %d bytes", len(b))
	}
	if ran := readFile(t, pool, "s1", "ran.txt"); ran != "" {
		t.Errorf("the command ran to its end past 4 MiB of output: %q", ran)
	}
}

// R-HARNESS-06: a user message reaches Pi as its text and images (an
// image from a data: URL reaches the model through Pi); a message with
// any other file fails its turn, saying why.
func TestPiTakesTextAndImagesOnly(t *testing.T) {
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
	// An https: server of the image on loopback, whose certificate the
	// sidecar trusts.
	pixel, _ := base64.StdEncoding.DecodeString(png)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(pixel)
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startPiOpts(t, pi.Options{Sandbox: dirPool(t).Sandbox, Env: []string{"NODE_EXTRA_CA_CERTS=" + ca}})
	f := newFixture(t, h, `{"default":{"text":"a red pixel"}}`)
	send := func(session string, file protocol.Part) *protocol.AIState {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m := protocol.UIMessage{ID: "m-" + session, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: "what is this?"}, file}}
		if _, err := f.RT.Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Message(m, protocol.MessageOptions{})}, false); err != nil {
			t.Fatal(err)
		}
		return f.Wait(session, 30*time.Second, "the turn's end", externaltest.Settled)
	}
	st := send("s1", protocol.Part{Type: protocol.PartFile, MediaType: "image/png", URL: "data:image/png;base64," + png})
	if st.Status == protocol.StatusFailed {
		t.Fatalf("a message with an image failed: %+v", st.Error)
	}
	reqs := f.models.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model calls, want 1", len(reqs))
	}
	user := reqs[0].Messages[len(reqs[0].Messages)-1]
	var text, image bool
	for _, p := range user.Content {
		text = text || (p.Type == harness.ContentText && p.Text == "what is this?")
		image = image || (p.Type == harness.ContentFile && p.MediaType == "image/png" && strings.HasSuffix(p.Data, png))
	}
	if user.Role != harness.ModelRoleUser || !text || !image {
		b, _ := json.Marshal(user)
		t.Fatalf("the model's last message %s: want the user's text and image", b)
	}
	st = send("s2", protocol.Part{Type: protocol.PartFile, MediaType: "application/pdf", Filename: "report.pdf", URL: "data:application/pdf;base64,JVBERi0xLjQK"})
	if st.Status != protocol.StatusFailed || st.Error == nil || !strings.Contains(st.Error.Message, "application/pdf") || !strings.Contains(st.Error.Message, "fails the turn") {
		t.Fatalf("a message with a PDF: status %s, error %+v; want the turn failed, naming the file's type", st.Status, st.Error)
	}
	if n := len(f.models.Requests()); n != 1 {
		t.Fatalf("the PDF's turn made %d model calls", n-1)
	}
	// An https: image is fetched, and reaches the model as its bytes; an
	// http: one fails the turn.
	st = send("s3", protocol.Part{Type: protocol.PartFile, MediaType: "image/png", URL: srv.URL + "/pixel.png"})
	reqs = f.models.Requests()
	if st.Status == protocol.StatusFailed || len(reqs) != 2 {
		t.Fatalf("a message with an https image: %s %+v, %d calls", st.Status, st.Error, len(reqs))
	}
	fetched := false
	for _, p := range reqs[1].Messages[len(reqs[1].Messages)-1].Content {
		fetched = fetched || (p.Type == harness.ContentFile && p.Data == "data:image/png;base64,"+png)
	}
	if !fetched {
		b, _ := json.Marshal(reqs[1].Messages)
		t.Fatalf("the https image did not reach the model as its bytes: %s", b)
	}
	st = send("s4", protocol.Part{Type: protocol.PartFile, MediaType: "image/png", URL: "http://127.0.0.1:1/pixel.png"})
	if st.Status != protocol.StatusFailed || st.Error == nil || !strings.Contains(st.Error.Message, "https: or data:") {
		t.Fatalf("a message with an http image: status %s, error %+v; want the turn failed", st.Status, st.Error)
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
