package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	if err := os.WriteFile(script, []byte(`{"default":{"toolCalls":[{"id":"w1","name":"write","input":{"path":"hello.txt","content":"hello from the node"}}],
		"then":{"toolCalls":[{"id":"b1","name":"bash","input":{"command":"cat hello.txt"}}],"then":{"text":"written and read"}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	sandboxes := filepath.Join(dir, "sandboxes")
	n := startNode(t, config{script: script, harness: "pi", sandboxes: sandboxes, sandboxDirs: true})
	if !strings.Contains(n.out.String(), "harness: pi") {
		t.Fatalf("the banner does not name the harness:\n%s", n.out.String())
	}
	c, err := client.New(n.url, "assistant", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := c.Open(ctx, "coding")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Send(ctx, "write hello.txt and show it"); err != nil {
		t.Fatal(err)
	}
	var st *protocol.AIState
	if err := s.Wait(ctx, func(a *protocol.AIState) bool {
		st = a
		return (a.Active == nil && len(a.Messages) == 2) || a.Status == protocol.StatusFailed
	}); err != nil {
		t.Fatal(err)
	}
	var outputs, text []string
	for _, p := range st.Messages[1].Parts {
		if p.ToolCallID != "" {
			outputs = append(outputs, p.ToolCallID+"="+string(p.Output))
		}
		if p.Type == protocol.PartText {
			text = append(text, p.Text)
		}
	}
	if strings.Join(text, "") != "written and read" || len(outputs) != 2 || outputs[1] != `b1="hello from the node"` {
		t.Fatalf("the response: text %q, tools %v (status %s, %+v)", text, outputs, st.Status, st.Error)
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
	if b, _ := io.ReadAll(f); string(b) != "hello from the node" {
		t.Fatalf("the sandbox's file: %q", b)
	}
}

// Bad --harness flags are refused with the reason.
func TestPiHarnessFlags(t *testing.T) {
	getenv := func(string) string { return "" }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--harness", "fx"}, `--harness "fx"`},
		{[]string{"--sandboxes", "/tmp/x"}, "go with --harness pi"},
		{[]string{"--sandbox-dirs"}, "go with --harness pi"},
		{[]string{"--harness", "pi", "--config", "agents.yaml"}, "does not apply to the agents of --config"},
	} {
		_, err := parseServeFlags(tc.args, getenv, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	if _, err := parseServeFlags([]string{"--harness", "pi"}, getenv, io.Discard); err != nil {
		t.Fatalf("--harness pi: %v", err)
	}
}
