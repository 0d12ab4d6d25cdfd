// Package gatewaytest starts a real node for tests: Pebble on an in-memory
// filesystem, the runtime with one agent on the script model, and the
// gateway served over HTTP on a loopback port. The gateway's, the Go
// client's and the binary's tests share it.
//
// With A2_TEST_ROUTER=cluster in the environment (or Options.Cluster), the
// gateway serves the cluster's router instead of the runtime's: the node
// is a one-member cluster on loopback, and every request goes through the
// cluster's envelopes, grains, activations and remote streams, so that the
// same tests check that a cluster answers exactly as a single node does
// (.ci/run runs the gateway's and the client's tests that way too).
package gatewaytest

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/cluster"
	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/persistence"
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
	// Cluster serves the cluster's router (see the package comment); it is
	// also on when A2_TEST_ROUTER is "cluster".
	Cluster bool
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
	// Cluster is the one-member cluster the gateway routes through, in
	// cluster mode (nil otherwise).
	Cluster *cluster.Node
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
	ropts := actors.Options{}
	if o.Cluster || os.Getenv("A2_TEST_ROUTER") == "cluster" {
		n.Cluster = newMember(t, n.Store, agents)
		ropts.Place, ropts.RecoverLater = n.Cluster.Place, true
	}
	n.Runtime, err = actors.New(n.Store, agents, ropts)
	if err != nil {
		t.Fatal(err)
	}
	var router gateway.Router = gateway.RuntimeRouter{Runtime: n.Runtime}
	if n.Cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.Cluster.Start(ctx, n.Runtime); err != nil {
			t.Fatal(err)
		}
		router = n.Cluster.Router()
		for len(n.Cluster.Hosts()) == 0 {
			if ctx.Err() != nil {
				t.Fatal("the one-member cluster never saw itself up")
			}
			time.Sleep(5 * time.Millisecond)
		}
		o.Gateway.ClusterStatus = func() any { return n.Cluster.Status() }
	}
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
		if n.Cluster != nil {
			n.Cluster.Leave(context.Background())
		}
		n.Runtime.Close()
		if err := n.Store.Close(); err != nil {
			t.Errorf("closing the store: %v", err)
		}
	})
	return n
}

// newMember prepares a one-member cluster on a free loopback port pair.
func newMember(t testing.TB, store persistence.Store, agents []*actors.Agent) *cluster.Node {
	t.Helper()
	id, err := cluster.StoreIdentity(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	node, err := cluster.New(cluster.Config{Name: "gatewaytest", Role: cluster.RoleMember, Bind: freeGossipAddr(t),
		StoreID: id, Agents: agents})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// freeGossipAddr returns 127.0.0.1:p with p (TCP and UDP) and p+1 (TCP)
// free now: a node's gossip and actor remote.
func freeGossipAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		l1, err1 := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		l2, err2 := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p))
		if l1 != nil {
			l1.Close()
		}
		if l2 != nil {
			l2.Close()
		}
		if err1 == nil && err2 == nil {
			return "127.0.0.1:" + strconv.Itoa(p)
		}
	}
	t.Fatal("no free pair of loopback ports")
	return ""
}

// quietPebble keeps Pebble's informational lines out of the test output.
type quietPebble struct{ t testing.TB }

func (quietPebble) Infof(string, ...any) {}

func (q quietPebble) Errorf(format string, args ...any) { q.t.Logf("pebble: "+format, args...) }

func (q quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
