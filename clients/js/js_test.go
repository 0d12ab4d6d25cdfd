package jsclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/a2-runtime/a2"
	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/internal/testutil"
	"github.com/a2-runtime/a2/tools"
)

// The client's script: a plain answer, a turn held at a gate (to steer,
// queue and stop while it runs), and a tool that asks for approval.
const clientScript = `{"replies":[
	{"match":"hello","text":"Hello from the node."},
	{"match":"hold","text":"Working on it, step by step, until released.","chunkSize":8,"gate":"hold"},
	{"match":"guard","toolCalls":[{"id":"g1","name":"guard","input":{"door":"front"}}],"then":{"text":"The door is open."}}],
	"default":{"text":"Answered."}}`

// The JavaScript client (clients/js, plain JavaScript: nothing to build;
// .ci/run checks its types with npm run build) against a real node on
// loopback: its node:test tests in test/ run in Node.js with the fold's
// WebAssembly build, against an agent served by a2.Serve with the script
// model.
func TestTheJavaScriptClient(t *testing.T) {
	node := testutil.NeedNode(t, "go test ./clients/js")
	wasm, wasmExec := testutil.BuildFold(t, filepath.Join("..", ".."))
	sc, err := script.Parse([]byte(clientScript))
	if err != nil {
		t.Fatal(err)
	}
	model := script.New(sc)
	guard := tools.Tool{Name: "guard", Description: "Opens a door.", NeedsApproval: func(json.RawMessage) bool { return true },
		Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.Marshal("opened") }}
	agent, err := a2.NewAgent(actors.AgentOptions{Name: "assistant", Model: harness.ModelID("script/test"),
		Models: func(string) (harness.Model, error) { return model, nil }, Tools: []tools.Tool{guard}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- a2.Serve(ctx, a2.Options{Listener: ln, Data: t.TempDir(), Gateway: gateway.Options{Gates: model}, Getenv: func(string) string { return "" }}, agent)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-served:
		case <-time.After(20 * time.Second):
			t.Error("the node did not stop")
		}
	})
	base := "http://" + ln.Addr().String()
	// Bounded: each test has a minute (test/), the whole run three.
	run, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stop()
	cmd := exec.CommandContext(run, node, "--test", "--test-force-exit", "--test-reporter=spec", "test/")
	cmd.Env = append(os.Environ(), "A2_URL="+base, "A2_FOLD_WASM="+wasm, "A2_WASM_EXEC="+wasmExec)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("node --test test/:\n%s", out.String())
	if err != nil {
		t.Fatalf("the client's tests failed: %v", err)
	}
}
