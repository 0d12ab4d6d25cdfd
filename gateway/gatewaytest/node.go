// Package gatewaytest starts a real node for tests: Pebble on an in-memory
// filesystem, the runtime with one agent on the script model, and the
// gateway served over HTTP on a loopback port. The gateway's, the Go
// client's and the binary's tests share it.
//
// With A2_TEST_ROUTER=cluster in the environment (or Options.Cluster), the
// gateway serves the router of a cluster gateway instead of the runtime's:
// the process runs a cluster member (with the runtime) and a gateway node
// (no sessions), two actor systems that talk over the loopback remote, and
// every request crosses that hop through the cluster's envelopes, grains,
// activations and remote streams. So the same tests check that a cluster
// answers exactly as a single node does (.ci/run runs the gateway's and the
// client's tests that way too).
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
	// Runtime is the runtime's options (placement and leases are the
	// cluster's when it serves the cluster's router).
	Runtime actors.Options
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
	// Member and ClusterGateway are the cluster's member and gateway node
	// in cluster mode (nil otherwise); the HTTP gateway serves
	// ClusterGateway's router.
	Member, ClusterGateway *cluster.Node
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
	ropts := o.Runtime
	if o.Cluster || os.Getenv("A2_TEST_ROUTER") == "cluster" {
		n.Member = newClusterNode(t, n.Store, agents, cluster.RoleMember, nil)
		n.ClusterGateway = newClusterNode(t, nil, agents, cluster.RoleGateway, []string{n.Member.Config().Bind})
		ropts.Place, ropts.SkipRecovery, ropts.Lease = n.Member.Place, true, n.Member.LeaseOptions()
	}
	n.Runtime, err = actors.New(n.Store, agents, ropts)
	if err != nil {
		t.Fatal(err)
	}
	var router gateway.Router = gateway.RuntimeRouter{Runtime: n.Runtime}
	if n.Member != nil {
		startCluster(t, n.Member, n.ClusterGateway, n.Runtime)
		router = n.ClusterGateway.Router()
		o.Gateway.ClusterStatus = func() any { return n.ClusterGateway.Status() }
		if len(o.Gateway.Agents) == 0 { // the cluster's router does not list them
			for _, a := range agents {
				o.Gateway.Agents = append(o.Gateway.Agents, a.Name())
			}
		}
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
		if n.Member != nil {
			n.ClusterGateway.Stop()
			n.Member.Leave(context.Background())
		}
		n.Runtime.Close()
		if err := n.Store.Close(); err != nil {
			t.Errorf("closing the store: %v", err)
		}
	})
	return n
}

// newClusterNode prepares a node of the test cluster on a free loopback
// port pair; a member names its store.
func newClusterNode(t testing.TB, store persistence.Store, agents []*actors.Agent, role string, join []string) *cluster.Node {
	t.Helper()
	cfg := cluster.Config{Name: "gatewaytest", Role: role, Bind: freeGossipAddr(t), Join: join, Agents: agents}
	if store != nil {
		id, err := cluster.StoreIdentity(context.Background(), store)
		if err != nil {
			t.Fatal(err)
		}
		cfg.StoreID = id
	}
	node, err := cluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// startCluster starts the member and the gateway node at once (the
// gateway's join retries until the member's gossip answers) and waits until
// both see the member up.
func startCluster(t testing.TB, member, gw *cluster.Node, rt *actors.Runtime) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	memberErr := make(chan error, 1)
	go func() { memberErr <- member.Start(ctx, rt) }()
	if err := gw.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-memberErr; err != nil {
		t.Fatal(err)
	}
	for len(member.Hosts()) == 0 || len(gw.Hosts()) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the test cluster never saw its member up")
		}
		time.Sleep(5 * time.Millisecond)
	}
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
