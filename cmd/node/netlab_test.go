// The partition tests' network: a namespace per node on one bridge, cuts
// and heals made with blackhole routing rules (iproute2), and the proxy
// through which the nodes reach PostgreSQL.

package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// labNode is one node's namespace.
type labNode struct {
	ns, ip, hostIf string
}

// netLab is the test's network: a bridge in the root namespace (with the
// address the store's proxy listens on) and one namespace per node.
type netLab struct {
	t      *testing.T
	prefix string // of every name the lab makes
	subnet string // "10.R.0"
	bridge string
	nodes  map[string]*labNode
	order  []string
	drops  [][2]string // (namespace, from-address) rules in place
	mu     sync.Mutex
}

// needNetLab skips the test unless network namespaces can be made here.
func needNetLab(t *testing.T) {
	t.Helper()
	if os.Getenv("A2_TEST_PARTITIONS") != "1" {
		// They take a minute or two of real processes and cuts: .ci/run
		// runs them once, in its PostgreSQL step, not again in go test ./...
		t.Skip("the partition tests run with A2_TEST_PARTITIONS=1, as root, with A2_TEST_POSTGRES_URL (sudo A2_TEST_PARTITIONS=1 A2_TEST_POSTGRES_URL=... go test -run Partition ./cmd/node); .ci/run sets it")
	}
	if os.Geteuid() != 0 {
		t.Skip("the partition tests make network namespaces: run them as root (sudo A2_TEST_POSTGRES_URL=... go test -run Partition ./cmd/node)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("the partition tests need iproute2's ip (apt-get install iproute2); iptables and nft are not needed")
	}
}

// ip runs ip with args and fails the test on an error.
func (l *netLab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newNetLab makes the bridge; it is removed, with every namespace the lab
// made, when the test ends (registered first: it runs after the
// processes are killed).
func newNetLab(t *testing.T) *netLab {
	t.Helper()
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	l := &netLab{t: t, prefix: "a2p" + hex.EncodeToString(b), nodes: map[string]*labNode{}}
	l.bridge = l.prefix + "b"
	// A /24 with no address and no route in it yet.
	for i := 0; ; i++ {
		subnet := fmt.Sprintf("10.%d.%d", 64+(int(b[0])+i*37)%180, (int(b[1])+i)%250)
		addrs, err1 := exec.Command("ip", "-4", "-o", "addr", "show", "to", subnet+".0/24").Output()
		routes, err2 := exec.Command("ip", "-4", "route", "show", "root", subnet+".0/24").Output()
		if err1 == nil && err2 == nil && len(strings.TrimSpace(string(addrs))) == 0 && len(strings.TrimSpace(string(routes))) == 0 {
			l.subnet = subnet
			break
		}
		if i == 20 {
			t.Skip("no free 10.x.y.0/24 subnet for the partition test's bridge")
		}
	}
	if out, err := exec.Command("ip", "link", "add", l.bridge, "type", "bridge").CombinedOutput(); err != nil {
		t.Skipf("cannot make a bridge here (ip link add type bridge: %v: %s); the partition tests need network namespaces and veth pairs", err, out)
	}
	t.Cleanup(l.close)
	l.ip("addr", "add", l.subnet+".1/24", "dev", l.bridge)
	l.ip("link", "set", l.bridge, "up")
	return l
}

// close removes the namespaces (their veth pairs go with them) and the
// bridge.
func (l *netLab) close() {
	for _, name := range l.order {
		// Deleting one end of a veth pair deletes the other at once; a
		// namespace's own teardown is asynchronous (and slow).
		if out, err := exec.Command("ip", "link", "del", l.nodes[name].hostIf).CombinedOutput(); err != nil {
			l.t.Logf("ip link del %s: %v: %s", l.nodes[name].hostIf, err, out)
		}
		if out, err := exec.Command("ip", "netns", "del", l.nodes[name].ns).CombinedOutput(); err != nil {
			l.t.Logf("ip netns del %s: %v: %s", l.nodes[name].ns, err, out)
		}
	}
	if out, err := exec.Command("ip", "link", "del", l.bridge).CombinedOutput(); err != nil {
		l.t.Logf("ip link del %s: %v: %s", l.bridge, err, out)
	}
}

// add makes a namespace for a node, linked to the bridge, and returns its
// address.
func (l *netLab) add(name string) string {
	l.t.Helper()
	i := len(l.order) + 1
	n := &labNode{ns: fmt.Sprintf("%s-%s", l.prefix, name), ip: fmt.Sprintf("%s.%d", l.subnet, 10+i), hostIf: fmt.Sprintf("%sh%d", l.prefix, i)}
	inner := fmt.Sprintf("%sn%d", l.prefix, i)
	if out, err := exec.Command("ip", "netns", "add", n.ns).CombinedOutput(); err != nil {
		l.t.Skipf("cannot make a network namespace here (ip netns add: %v: %s)", err, out)
	}
	l.nodes[name] = n
	l.order = append(l.order, name)
	l.ip("link", "add", n.hostIf, "type", "veth", "peer", "name", inner)
	l.ip("link", "set", inner, "netns", n.ns)
	l.ip("link", "set", n.hostIf, "master", l.bridge)
	l.ip("link", "set", n.hostIf, "up")
	l.ip("-n", n.ns, "link", "set", "lo", "up")
	l.ip("-n", n.ns, "addr", "add", n.ip+"/24", "dev", inner)
	l.ip("-n", n.ns, "link", "set", inner, "up")
	// The local table after the drop rules (pref 100), so that a packet
	// from a dropped address is routed to the blackhole before it is
	// delivered.
	l.ip("-n", n.ns, "rule", "add", "pref", "1000", "lookup", "local")
	l.ip("-n", n.ns, "rule", "del", "pref", "0")
	return n.ip
}

// drop makes node to drop every packet from node from (one way).
func (l *netLab) drop(to, from string) {
	l.t.Helper()
	ns, addr := l.nodes[to].ns, l.nodes[from].ip+"/32"
	l.ip("-n", ns, "rule", "add", "pref", "100", "from", addr, "blackhole")
	l.mu.Lock()
	l.drops = append(l.drops, [2]string{ns, addr})
	l.mu.Unlock()
}

// cut drops every packet between the nodes of a and those of b, both ways.
func (l *netLab) cut(a, b []string) {
	l.t.Helper()
	for _, x := range a {
		for _, y := range b {
			l.drop(x, y)
			l.drop(y, x)
		}
	}
}

// heal removes every drop rule.
func (l *netLab) heal() {
	l.t.Helper()
	l.mu.Lock()
	drops := l.drops
	l.drops = nil
	l.mu.Unlock()
	for _, d := range drops {
		l.ip("-n", d[0], "rule", "del", "pref", "100", "from", d[1], "blackhole")
	}
}

// storeProxy forwards TCP connections from the bridge's address to the
// PostgreSQL server, so that the nodes in their namespaces reach it; it
// returns the database URL through the proxy.
func (l *netLab) storeProxy(dbURL string) string {
	l.t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		l.t.Fatal(err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	ln, err := net.Listen("tcp", l.subnet+".1:0")
	if err != nil {
		l.t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	l.t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	u.Host = ln.Addr().String()
	return u.String()
}

// start runs a node process in its namespace and waits until it serves
// HTTP; it is killed (by its PID) when the test ends.
func (l *netLab) start(name string, args ...string) *clusterProc {
	l.t.Helper()
	t := l.t
	n := l.nodes[name]
	p := &clusterProc{name: name, url: "http://" + n.ip + ":8080", gossip: n.ip + ":7946",
		log: filepath.Join(t.TempDir(), name+".log"), exited: make(chan struct{})}
	argv := append([]string{"netns", "exec", n.ns, nodeBinary(t), "--addr", n.ip + ":8080", "--bind", p.gossip}, args...)
	p.run(t, exec.Command("ip", argv...), nil) // ip execs the node in the namespace: the PID is the node's
	hc := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if resp, err := hc.Get(p.url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.exited:
			b, _ := os.ReadFile(p.log)
			t.Fatalf("%s exited before serving:\n%s", name, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not serve within 30 s", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
