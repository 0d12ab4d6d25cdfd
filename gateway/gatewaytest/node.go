// Package gatewaytest starts a real node for tests: Pebble on an in-memory
// filesystem, the runtime with one agent on the script model, and the
// gateway served over HTTP on a loopback port. The gateway's, the Go
// client's and the binary's tests share it.
package gatewaytest

import (
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
)

// Agent is the name of the node's agent.
const Agent = "assistant"

// Options configure Start.
type Options struct {
	// Script is the script model's JSON (docs/testing.md); "" is {}.
	Script string
	// Gateway configures the gateway.
	Gateway gateway.Options
	// TestMode serves the script model's gates (POST /v1/test/gates/{name}).
	TestMode bool
	// Wrap, when set, wraps the Router the gateway serves (fault
	// injection).
	Wrap func(gateway.Router) gateway.Router
	// Agent adjusts the agent's options (tools, ...).
	Agent func(*actors.AgentOptions)
	// MoreAgents names further agents, with the same options (but no
	// contract) and model, on the same store.
	MoreAgents []string
}

// Node is a running node. Start registers its shutdown with t.Cleanup.
type Node struct {
	Store   *pebblestore.Store
	Runtime *actors.Runtime
	Model   *script.Model
	Gateway *gateway.Gateway
	Server  *httptest.Server
	// URL is the base URL, http://127.0.0.1:port.
	URL string
}

// Start starts a node; a setup failure fails the test at once.
func Start(t testing.TB, o Options) *Node {
	t.Helper()
	if o.Script == "" {
		o.Script = "{}"
	}
	sc, err := script.Parse([]byte(o.Script))
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{Model: script.New(sc)}
	n.Store, err = pebblestore.Open("data", pebblestore.Options{FS: vfs.NewMem(), Logger: quietPebble{t}})
	if err != nil {
		t.Fatal(err)
	}
	opts := actors.AgentOptions{Name: Agent, Model: harness.ModelID("script/test"),
		Models: func(string) (harness.Model, error) { return n.Model, nil }}
	if o.Agent != nil {
		o.Agent(&opts)
	}
	var agents []*actors.Agent
	for i, name := range append([]string{""}, o.MoreAgents...) {
		if i > 0 { // the same options under another name
			opts.Name, opts.Contract = name, nil
		}
		agent, err := actors.NewAgent(opts)
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, agent)
	}
	n.Runtime, err = actors.New(n.Store, agents, actors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var router gateway.Router = gateway.RuntimeRouter{Runtime: n.Runtime}
	if o.Wrap != nil {
		router = o.Wrap(router)
	}
	if o.TestMode {
		o.Gateway.Gates = n.Model
	}
	n.Gateway = gateway.New(router, o.Gateway)
	n.Server = httptest.NewServer(n.Gateway)
	n.URL = n.Server.URL
	t.Cleanup(func() {
		n.Gateway.Close() // end live streams, so that the server's Close returns
		n.Server.Close()
		n.Runtime.Close()
		if err := n.Store.Close(); err != nil {
			t.Errorf("closing the store: %v", err)
		}
	})
	return n
}

// quietPebble keeps Pebble's informational lines out of the test output.
type quietPebble struct{ t testing.TB }

func (quietPebble) Infof(string, ...any) {}

func (q quietPebble) Errorf(format string, args ...any) { q.t.Logf("pebble: "+format, args...) }

func (q quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
