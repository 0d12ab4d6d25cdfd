package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/harness/pi"
	"github.com/a2-runtime/a2/protocol"
)

// --harness pi: the default agent is Pi's coding agent, each session in a
// sandbox of its own below --sandboxes; a conversation through the node's
// HTTP API (the Go client) writes a file there with Pi's write and runs a
// command with Pi's bash, and the answer comes back.
func TestNodeWithThePiHarness(t *testing.T) {
	if _, err := os.Stat(filepath.Join(pi.SidecarDir(), "node_modules", "@earendil-works", "pi-coding-agent")); err != nil && os.Getenv("A2_REQUIRE_PI") == "" {
		t.Skip("the Pi sidecar is not installed: run npm ci in harness/pi/sidecar, then go test -run TestNodeWithThePiHarness ./cmd/node")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, []byte(`{"default":{"toolCalls":[{"id":"w1","name":"write","input":{"path":"hello.txt","content":"hello from the node\nsecond line\n"}}],
		"then":{"toolCalls":[{"id":"e1","name":"edit","input":{"path":"hello.txt","edits":[{"oldText":"second line","newText":"edited line"}]}}],
		"then":{"toolCalls":[{"id":"b1","name":"bash","input":{"command":"cat hello.txt"}}],"then":{"text":"written and read"}}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	sandboxes := filepath.Join(dir, "sandboxes")
	n := startNode(t, config{script: script, harness: "pi", sandboxes: sandboxes, sandboxDirs: true})
	if !strings.Contains(n.out.String(), "harness: pi") {
		t.Fatalf("the banner does not name the harness:\n%s", n.out.String())
	}
	st := firstTurn(t, n.url, "assistant", "coding", "write hello.txt and show it")
	var outputs, text []string
	for _, p := range st.Messages[1].Parts {
		if p.ToolCallID != "" {
			outputs = append(outputs, p.ToolCallID+"="+string(p.Output))
		}
		if p.Type == protocol.PartText {
			text = append(text, p.Text)
		}
	}
	if strings.Join(text, "") != "written and read" || len(outputs) != 3 || outputs[2] != `b1="hello from the node\nedited line\n"` {
		t.Fatalf("the response: text %q, tools %v (status %s, %+v)", text, outputs, st.Status, st.Error)
	}
	// The terminal chat shows the write's lines, the edit as a diff and
	// the command with its output.
	lines := strings.Split(ansi.Strip(renderConversation(st, 100, false)), "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	screen := strings.Join(lines, "\n")
	for _, want := range []string{"✎ write hello.txt (2 lines)\n+ hello from the node\n+ second line\n", "✎ edit hello.txt\n- second line\n+ edited line\n",
		"$ cat hello.txt\n  hello from the node\n  edited line\n"} {
		if !strings.Contains(screen, want) {
			t.Errorf("the chat does not show %q:\n%s", want, screen)
		}
	}
	// The file is in the session's own sandbox below --sandboxes.
	entries, err := os.ReadDir(sandboxes)
	if err != nil || len(entries) != 1 {
		t.Fatalf("the sandboxes' directory: %v %v, want one session's", entries, err)
	}
	f, err := os.Open(filepath.Join(sandboxes, entries[0].Name(), "hello.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, _ := io.ReadAll(f); string(b) != "hello from the node\nedited line\n" {
		t.Fatalf("the sandbox's file: %q", b)
	}
}

// R-HARNESS-01: an agents file chooses the harness per agent. A coder of
// harness pi writes a file in its session's sandbox with Pi's write; an
// agent of A2's own harness beside it, given the same script, has no
// tool of that name (its call fails), and its session gets no sandbox.
func TestAnAgentsFileWithAPiAgent(t *testing.T) {
	if _, err := os.Stat(filepath.Join(pi.SidecarDir(), "node_modules", "@earendil-works", "pi-coding-agent")); err != nil && os.Getenv("A2_REQUIRE_PI") == "" {
		t.Skip("the Pi sidecar is not installed: run npm ci in harness/pi/sidecar, then go test -run TestAnAgentsFileWithAPiAgent ./cmd/node")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "script.json")
	agents := filepath.Join(dir, "agents.yaml")
	for name, body := range map[string]string{
		script: `{"default":{"toolCalls":[{"id":"w1","name":"write","input":{"path":"notes.txt","content":"from the coder"}}],"then":{"text":"ok"}}}`,
		agents: "agents:\n  - name: coder\n    harness: pi\n  - name: plain\n",
	} {
		if err := os.WriteFile(name, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sandboxes := filepath.Join(dir, "sandboxes")
	n := startNode(t, config{script: script, agentsFile: agents, sandboxes: sandboxes, sandboxDirs: true})
	turn := func(agent string) protocol.Part {
		t.Helper()
		st := firstTurn(t, n.url, agent, "notes-"+agent, "take a note")
		for _, p := range st.Messages[1].Parts {
			if p.ToolCallID == "w1" {
				return p
			}
		}
		t.Fatalf("%s: no call w1 in %+v (status %s)", agent, st.Messages[1].Parts, st.Status)
		return protocol.Part{}
	}
	if p := turn("coder"); p.State != "output-available" {
		t.Fatalf("the coder's write: %s %s %q", p.State, p.Output, p.ErrorText)
	}
	entries, err := os.ReadDir(sandboxes)
	if err != nil || len(entries) != 1 {
		t.Fatalf("the sandboxes' directory: %v %v, want the coder's session's", entries, err)
	}
	b, err := os.ReadFile(filepath.Join(sandboxes, entries[0].Name(), "notes.txt"))
	if err != nil || string(b) != "from the coder" {
		t.Fatalf("the coder's file: %q %v", b, err)
	}
	if p := turn("plain"); p.State != "output-error" {
		t.Fatalf("the plain agent's write: %s %s, want an error (it has no Pi tools)", p.State, p.Output)
	}
	if entries, _ := os.ReadDir(sandboxes); len(entries) != 1 {
		t.Fatalf("the sandboxes after the plain agent's turn: %d, want 1", len(entries))
	}
}

// firstTurn sends a session's first message to agent through the Go
// client and returns the state once its answer has ended (or failed).
func firstTurn(t *testing.T, url, agent, session, text string) *protocol.AIState {
	t.Helper()
	c, err := client.New(url, agent, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := c.Open(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Send(ctx, text); err != nil {
		t.Fatal(err)
	}
	var st *protocol.AIState
	if err := s.Wait(ctx, func(a *protocol.AIState) bool {
		st = a
		return (a.Active == nil && len(a.Messages) == 2) || a.Status == protocol.StatusFailed
	}); err != nil {
		t.Fatal(err)
	}
	return st
}

// Bad --harness flags are refused with the reason.
func TestPiHarnessFlags(t *testing.T) {
	getenv := func(string) string { return "" }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--harness", "fx"}, `--harness "fx"`},
		{[]string{"--sandboxes", "/tmp/x"}, "go with --harness pi, or with --config"},
		{[]string{"--sandbox-dirs"}, "go with --harness pi"},
		{[]string{"--harness", "pi", "--config", "agents.yaml"}, "does not apply to the agents of --config"},
	} {
		_, err := parseServeFlags(tc.args, getenv, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	for _, args := range [][]string{{"--harness", "pi"}, {"--config", "agents.yaml", "--sandboxes", "/tmp/x", "--sandbox-dirs"}} {
		if _, err := parseServeFlags(args, getenv, io.Discard); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
}
