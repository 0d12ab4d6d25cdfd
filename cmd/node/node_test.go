package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/internal/gctune"
	"github.com/a2-runtime/a2/internal/testutil"

	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/harness/catalog"
	"github.com/a2-runtime/a2/harness/providers"
	"github.com/a2-runtime/a2/protocol"
)

// runningNode is a node served by serve on a loopback port.
type runningNode struct {
	url    string
	out    *testutil.SyncBuffer
	cancel context.CancelFunc
	done   chan error
}

// startNode runs serve on 127.0.0.1:0 with Pebble in a temporary directory and the demo
// model without delay; the test's cleanup stops it if the test did not.
func startNode(t *testing.T, cfg config) *runningNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.data == "" {
		cfg.data = t.TempDir()
	}
	var logs testutil.SyncBuffer
	cfg.logger = slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	n := &runningNode{url: "http://" + ln.Addr().String(), out: &testutil.SyncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- serve(ctx, cfg, ln, n.out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-n.done:
		case <-time.After(20 * time.Second):
			t.Error("the node did not stop")
		}
		if t.Failed() {
			t.Logf("node logs:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(n.out.String(), "A2 node serving") {
		if time.Now().After(deadline) {
			t.Fatalf("no banner: %q", n.out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return n
}

// stop cancels the node's context and requires a clean return.
func (n *runningNode) stop(t *testing.T) {
	t.Helper()
	n.cancel()
	select {
	case err := <-n.done:
		n.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the node did not stop within 20 s")
	}
}

// A cluster gateway's banner names no model: it runs none (its members
// do, each with the model its own environment configures).
func TestGatewayBannerNamesNoModel(t *testing.T) {
	cfg, err := parseServeFlags([]string{"--role", "gateway", "--cluster", "c1", "--bind", "127.0.0.1:7946"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	printBanner(&out, "http://127.0.0.1:8080", cfg, providers.FromEnv(func(string) string { return "" }, "", nil, 0), []string{defaultAgent})
	if !strings.Contains(out.String(), "model:  none here: the members run") || strings.Contains(out.String(), "model:  demo") {
		t.Fatalf("the gateway's banner:\n%s", out.String())
	}
}

// The node's first run: the banner says where to go next; a first
// conversation with the demo model (through the Go client) runs its
// calculator tool and answers from the result; cancelling the context
// shuts the node down cleanly although a live stream is open.
func TestNodeFirstConversation(t *testing.T) {
	n := startNode(t, config{demoDelay: 0})
	banner := n.out.String()
	for _, want := range []string{n.url, "model:  demo", "Open the playground in a browser: " + n.url + "/\n", "curl -sN '" + n.url + "/v1/agents/assistant/sessions/hello/events?stream=1'", "go run ./cmd/node chat"} {
		if !strings.Contains(banner, want) {
			t.Fatalf("the banner lacks %q:\n%s", want, banner)
		}
	}
	resp, err := http.Get(n.url + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	// The address it names serves the playground.
	if resp, err = http.Get(n.url + "/"); err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %v %v", resp, err)
	}
	resp.Body.Close()

	c, err := client.New(n.url, "assistant", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := c.Open(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Send(ctx, "calculate 2+3"); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(ctx, func(st *protocol.AIState) bool { return st.Active == nil && len(st.Messages) == 2 }); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Confirmed()
	var answer strings.Builder
	tool := false
	for _, p := range st.Messages[1].Parts {
		if p.Type == protocol.PartText {
			answer.WriteString(p.Text)
		}
		tool = tool || (p.ToolNameOf() == "calculator" && p.State == protocol.ToolOutputAvailable)
	}
	if !tool || !strings.Contains(answer.String(), "2+3 = 5") {
		t.Fatalf("tool %v, answer %q", tool, answer.String())
	}
	n.stop(t)
	if _, err := http.Get(n.url + "/healthz"); err == nil {
		t.Fatal("the node still answers after shutdown")
	}
}

// The chat subcommand sends what it reads, streams the answers, handles
// its slash commands, and at the end of its input exits once everything
// sent is answered.
func TestChat(t *testing.T) {
	n := startNode(t, config{demoDelay: 0})
	// Steering a running turn hands off after its current step, which
	// depends on timing; steering an idle session starts a turn, which does
	// not. So the steer comes first.
	in := strings.NewReader("/stop\n/frobnicate\n/pause now\n/resume\n/steer what time is it?\ncalculate 2+3\n/queue hello\n")
	var out testutil.SyncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := runCommand(ctx, []string{"chat", "--url", n.url, "--session", "chat-test"}, func(string) string { return "" }, in, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"Session chat-test", "[nothing to stop]", "[unknown command /frobnicate]",
		`[tool calculator {"expression":"2+3"} -> {"expression":"2+3","result":5}]`, "2+3 = 5", "assistant: Hello!", "according to the current_time tool"} {
		if !strings.Contains(got, want) {
			t.Fatalf("the chat printed no %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "not sent") || strings.Contains(got, "rejected") {
		t.Fatalf("a command failed:\n%s", got)
	}
	// A second chat resumes the session and shows its transcript.
	var again testutil.SyncBuffer
	err = runCommand(ctx, []string{"chat", "--url", n.url, "--session", "chat-test"}, func(string) string { return "" }, strings.NewReader("/quit\n"), &again, io.Discard)
	if err != nil || !strings.Contains(again.String(), "2+3 = 5") {
		t.Fatalf("resumed chat: %v\n%s", err, again.String())
	}
	// A node that is not there is an error that says so.
	err = runCommand(ctx, []string{"chat", "--url", "http://127.0.0.1:1"}, func(string) string { return "" }, strings.NewReader(""), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the node at http://127.0.0.1:1 (is it running?") {
		t.Fatalf("chat without a node: %v", err)
	}
	// An agent the node lacks is named as such, not taken for a missing
	// node, and with no Go package prefix.
	err = runCommand(ctx, []string{"chat", "--url", n.url, "--agent", "nope"}, func(string) string { return "" }, strings.NewReader(""), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `has no agent "nope" (the agents here are "assistant"`) || strings.Contains(err.Error(), "actors:") {
		t.Fatalf("chat with an unknown agent: %v", err)
	}
}

// Test mode: --script serves the script model and the gate route.
func TestNodeScriptMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(path, []byte(`{"replies":[{"text":"gated answer","gate":"g1"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, config{script: path})
	if !strings.Contains(n.out.String(), "model:  script") {
		t.Fatalf("banner:\n%s", n.out.String())
	}
	c, err := client.New(n.url, "assistant", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := c.Open(ctx, "gated")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Send(ctx, "Hi"); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(ctx, func(st *protocol.AIState) bool { return st.Status == protocol.StatusStreaming }); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(n.url+"/v1/test/gates/g1", "application/json", nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("release: %v %v", resp, err)
	}
	resp.Body.Close()
	if err := s.Wait(ctx, func(st *protocol.AIState) bool { return st.Active == nil && len(st.Messages) == 2 }); err != nil {
		t.Fatal(err)
	}
}

func TestServeFlagsAndEnvironment(t *testing.T) {
	env := map[string]string{"A2_ADDR": "127.0.0.1:9999", "A2_DATA": "/tmp/a2", "A2_ADMIN_TOKEN": "tok", "A2_MODEL": "demo", "A2_DEMO_DELAY": "5ms", "A2_CATALOG": "off", "A2_STEP_TIMEOUT": "90s"}
	getenv := func(k string) string { return env[k] }
	cfg, err := parseServeFlags(nil, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.addr != "127.0.0.1:9999" || cfg.data != "/tmp/a2" || cfg.adminToken != "tok" || cfg.model != "demo" || cfg.demoDelay != 5*time.Millisecond || cfg.catalog != "off" || cfg.stepTimeout != 90*time.Second {
		t.Fatalf("from the environment: %+v", cfg)
	}
	cfg, err = parseServeFlags([]string{"--addr", ":1", "--data", "d", "--admin-token", "x", "--model", "m", "--script", "s.json", "--demo-delay", "0", "--step-timeout", "0"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.addr != ":1" || cfg.data != "d" || cfg.adminToken != "x" || cfg.model != "m" || cfg.script != "s.json" || cfg.demoDelay != 0 || cfg.stepTimeout != 0 {
		t.Fatalf("flags over the environment: %+v", cfg)
	}
	cfg, err = parseServeFlags(nil, func(string) string { return "" }, io.Discard)
	if err != nil || cfg.addr != "127.0.0.1:8080" || cfg.data != "./data" || cfg.adminToken != "" || cfg.catalog != catalog.DefaultURL || cfg.stepTimeout != defaultStepTimeout {
		t.Fatalf("defaults: %+v, %v", cfg, err)
	}
	if cfg.passivateAfter != defaultPassivateAfter {
		t.Fatalf("passivate after %s by default", cfg.passivateAfter)
	}
	if cfg, err := parseServeFlags([]string{"--passivate-after", "10s"}, getenv, io.Discard); err != nil || cfg.passivateAfter != 10*time.Second {
		t.Fatalf("--passivate-after 10s: %s, %v", cfg.passivateAfter, err)
	}
	if cfg, err := parseServeFlags(nil, func(k string) string { return map[string]string{"A2_PASSIVATE_AFTER": "30s"}[k] }, io.Discard); err != nil || cfg.passivateAfter != 30*time.Second {
		t.Fatalf("A2_PASSIVATE_AFTER=30s: %s, %v", cfg.passivateAfter, err)
	}
	// Bad step timeouts and passivation delays are refused with the
	// option's name.
	for _, bad := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--step-timeout", "-1s"}, "", "--step-timeout"},
		{[]string{"--step-timeout", "soon"}, "", "step-timeout"},
		{nil, "forever", "A2_STEP_TIMEOUT"},
		{[]string{"--passivate-after", "0"}, "", "--passivate-after"},
		{[]string{"--passivate-after", "-1m"}, "", "--passivate-after"},
		{[]string{"--passivate-after", "later"}, "", "passivate-after"},
		{nil, "whenever", "A2_PASSIVATE_AFTER"},
	} {
		envName := "A2_STEP_TIMEOUT"
		if strings.Contains(bad.want, "PASSIVATE") {
			envName = "A2_PASSIVATE_AFTER"
		}
		_, err := parseServeFlags(bad.args, func(k string) string {
			if k == envName {
				return bad.env
			}
			return ""
		}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("step timeout %v %q: %v, want an error naming %s", bad.args, bad.env, err, bad.want)
		}
	}
	if _, err := parseServeFlags([]string{"extra"}, getenv, io.Discard); err == nil {
		t.Fatal("a stray argument was accepted")
	}
	if err := runCommand(context.Background(), []string{"bogus"}, getenv, nil, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("unknown command: %v", err)
	}
	if err := runCommand(context.Background(), []string{"demo", "--quiet"}, getenv, nil, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
}

func TestGCDescription(t *testing.T) {
	for _, tc := range []struct {
		in   gctune.Settings
		want string
	}{
		{gctune.Settings{Percent: 800, Limit: 18 << 30}, "heap goal 800%, memory limit 18.0 GiB (GOGC / GOMEMLIMIT to choose otherwise; docs/http.md)"},
		{gctune.Settings{Percent: 800, Limit: 18 << 30, Headroom: 256 << 20}, "heap goal 800% and at most 256 MiB past the live heap, memory limit 18.0 GiB (GOGC / GOMEMLIMIT to choose otherwise; docs/http.md)"},
		{gctune.Settings{Percent: 800}, "heap goal 800% (GOGC / GOMEMLIMIT to choose otherwise; docs/http.md)"},
		{gctune.Settings{Limit: 3 << 29}, "memory limit 1.5 GiB (GOGC / GOMEMLIMIT to choose otherwise; docs/http.md)"},
	} {
		if got := gcDescription(tc.in); got != tc.want {
			t.Errorf("gcDescription(%+v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A second node on a data directory another node uses is refused with a
// message that names the directory and says why (the first hour's trap:
// Pebble's own error is "resource temporarily unavailable").
func TestSecondNodeOnTheSameDataDirectory(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(script, []byte(`{"default":{"text":"ok"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	startNodeProcess(t, nodeBinary(t), "", script, "--data", dir)
	out := runUntilExit(t, "a second node on the same --data", "--data", dir, "--script", script)
	if !strings.Contains(out, "another node is using the data directory "+dir) || strings.Contains(out, "resource temporarily unavailable") {
		t.Fatalf("the second node said:\n%s", out)
	}
}

// The README's curl commands work on a node, twice in a row: the second
// run sends a new message (a fresh ID), and the bounded stream shows that
// turn only, and returns once the session is idle.
func TestREADMECommandsRunTwice(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed; run: go test ./cmd/node -run TestREADMECommandsRunTwice")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed (apt-get install curl); run: go test ./cmd/node -run TestREADMECommandsRunTwice")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "### With curl")
	if !ok {
		t.Fatal("the README has no section \"### With curl\"")
	}
	_, block, _ := strings.Cut(rest, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	if !strings.Contains(block, "curl") {
		t.Fatalf("no curl in the README's block:\n%s", block)
	}
	n := startNode(t, config{demoDelay: time.Millisecond})
	script := "set -eu\n" + strings.ReplaceAll(block, "http://127.0.0.1:8080", n.url)
	for run := 1; run <= 2; run++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, "bash", "-c", script).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("run %d of the README's commands: %v\n%s", run, err, out)
		}
		for _, want := range []string{`"index":`, "event: ai.generation.completed", ": idle"} {
			if !strings.Contains(string(out), want) {
				t.Fatalf("run %d printed no %q:\n%s", run, want, out)
			}
		}
		if strings.Contains(string(out), `"error":{`) {
			t.Fatalf("run %d printed an error:\n%s", run, out)
		}
		sends := 0
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "data: ") && strings.Contains(l, `"action":"send"`) {
				sends++
			}
		}
		if sends != 1 {
			t.Fatalf("run %d shows %d messages sent, want its own only:\n%s", run, sends, out)
		}
	}
	c, _ := client.New(n.url, defaultAgent, client.Options{})
	st, _, err := c.State(context.Background(), "hello")
	if err != nil {
		t.Fatal(err)
	}
	if users := len(st.AI.Messages) / 2; users != 2 || st.AI.Messages[2].Role != protocol.RoleUser {
		t.Fatalf("after two runs the session has %d messages, want two turns", len(st.AI.Messages))
	}
	// The fields settle: the session is open, and the demo model (which
	// needs no catalog lookup) has no metadata entry left pending.
	if st.AI.Session.Status != protocol.SessionStatusOpen {
		t.Fatalf("session.status is %q after two turns, want open", st.AI.Session.Status)
	}
	for model, md := range st.AI.ModelMetadata {
		if md.Status == protocol.MetadataPending {
			t.Fatalf("modelMetadata[%q] stays pending", model)
		}
	}
}
