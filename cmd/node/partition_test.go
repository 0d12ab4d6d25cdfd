package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/cluster"
	"github.com/a2-runtime/a2/protocol"
)

// Partitions with real processes (docs/cluster.md, "Partitions"): three members and a gateway,
// each in a network namespace of its own made by the test, on one bridge;
// PostgreSQL is reached through a proxy the test runs on the bridge's
// address, so a member cut off from its peers still reaches the store. A
// cut drops, in the receiving namespace, every packet from the nodes on
// the other side (an `ip rule ... blackhole` ahead of the local table:
// silent, like a lost link, and only for the addresses the test made).
//
// Needs root and iproute2's ip (no iptables or nft: policy routing does
// the dropping); it skips otherwise, saying so. Run it with
//
//	sudo A2_TEST_POSTGRES_URL=postgres://... go test -run Partition ./cmd/node

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

// partitionCluster is the test's cluster and what it expects of each
// session: the turns acknowledged.
type partitionCluster struct {
	t              *testing.T
	m1, m2, m3, gw *clusterProc
	members, procs []*clusterProc
	sessions       []string
	cutAt          time.Time

	mu    sync.Mutex
	turns map[string]int // acknowledged turns per session
}

// push pushes one turn through base and records it when acknowledged.
func (c *partitionCluster) push(base, session, text string) (int, string, error) {
	return c.pushUntil(base, session, text, time.Now().Add(30*time.Second))
}

// pushUntil pushes one turn through base, trying again with the same
// event ID (pushes are idempotent by ID) until it is acknowledged or the
// deadline passes, and records it when acknowledged.
func (c *partitionCluster) pushUntil(base, session, text string, deadline time.Time) (int, string, error) {
	c.mu.Lock()
	id := fmt.Sprintf("%s-%d", session, c.turns[session]+1)
	c.mu.Unlock()
	body, _ := json.Marshal(map[string]any{"events": []protocol.Event{protocol.Inputs.Text(id, text)}})
	for {
		hc := &http.Client{Timeout: max(time.Until(deadline), 100*time.Millisecond)}
		var code int
		var answer string
		resp, err := hc.Post(base+"/v1/agents/assistant/sessions/"+session+"/events", "application/json", strings.NewReader(string(body)))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			code, answer = resp.StatusCode, string(b)
		}
		if err == nil && code == http.StatusOK {
			c.mu.Lock()
			c.turns[session]++
			c.mu.Unlock()
			return code, answer, nil
		}
		if time.Now().After(deadline) {
			return code, answer, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// whole reports whether p sees every node of the cluster, the three
// members up and hosting sessions, and does not stand down.
func (c *partitionCluster) whole(p *clusterProc) bool {
	var st cluster.Status
	resp, err := (&http.Client{Timeout: time.Second}).Get(p.url + "/v1/cluster")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &st); err != nil {
		return false
	}
	return len(st.Members) == 4 && len(st.Hosts) == 3 && (st.Quorum == nil || !st.Quorum.SteppedDown)
}

// waitWhole waits until every node sees the whole cluster, and returns
// how long that took from since.
func (c *partitionCluster) waitWhole(since time.Time, within time.Duration) time.Duration {
	c.t.Helper()
	for {
		all := true
		for _, p := range c.procs {
			if !c.whole(p) {
				all = false
				break
			}
		}
		if all {
			return time.Since(since)
		}
		if time.Since(since) > within {
			for _, p := range c.procs {
				st := p.status(c.t)
				c.t.Logf("%s sees %d nodes, hosts %v, quorum %+v", p.name, len(st.Members), st.Hosts, st.Quorum)
			}
			c.t.Fatalf("the cluster was not whole again within %v", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// done reports whether the session's acknowledged turns have all
// completed; broken is an answer that is not one whole answer, or a
// message out of turn; readErr, a state that could not be read (yet).
func (c *partitionCluster) done(base, session string) (ok bool, readErr, broken error) {
	cl, err := client.New(base, "assistant", client.Options{})
	if err != nil {
		return false, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, _, err := cl.State(ctx, session)
	if err != nil {
		return false, err, nil
	}
	c.mu.Lock()
	turns := c.turns[session]
	c.mu.Unlock()
	ai := st.AI
	if ai.Active != nil || len(ai.Messages) != 2*turns {
		return false, nil, nil
	}
	for i, m := range ai.Messages {
		want := "user"
		if i%2 == 1 {
			want = "assistant"
		}
		if m.Role != want {
			return false, nil, fmt.Errorf("session %s: message %d is %s's, want %s's", session, i, m.Role, want)
		}
		if m.Role == "assistant" {
			var b strings.Builder
			for _, p := range m.Parts {
				if p.Type == protocol.PartText {
					b.WriteString(p.Text)
				}
			}
			if b.String() != clusterAnswer && b.String() != longAnswer {
				return false, nil, fmt.Errorf("session %s: answer %d is %q, not one whole answer", session, i/2+1, b.String())
			}
		}
	}
	return true, nil, nil
}

// waitDone waits until every acknowledged turn of sessions has completed.
func (c *partitionCluster) waitDone(base string, sessions []string, within time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for _, s := range sessions {
		for {
			ok, err, broken := c.done(base, s)
			if broken != nil {
				c.t.Fatal(broken)
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				c.mu.Lock()
				turns := c.turns[s]
				c.mu.Unlock()
				c.t.Fatalf("session %s: its %d acknowledged turns did not complete within %v (last error %v)", s, turns, within, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// logsWhole reads every session's log through base: indexes run 1, 2,
// 3, ... and no event ID repeats.
func (c *partitionCluster) logsWhole(base string) {
	c.t.Helper()
	cl, err := client.New(base, "assistant", client.Options{})
	if err != nil {
		c.t.Fatal(err)
	}
	ids := map[string]string{}
	total := 0
	for _, s := range c.sessions {
		var after uint64
		for {
			evs, next, err := cl.History(context.Background(), s, after, 1000)
			if err != nil {
				c.t.Fatalf("history of %s: %v", s, err)
			}
			for _, e := range evs {
				if e.Index != after+1 {
					c.t.Fatalf("session %s: index %d after %d: the log is not whole", s, e.Index, after)
				}
				if prev, dup := ids[e.ID]; dup {
					c.t.Fatalf("event ID %s repeats (sessions %s and %s)", e.ID, prev, s)
				}
				ids[e.ID] = s
				after = e.Index
				total++
			}
			if len(evs) == 0 || next <= after && len(evs) < 1000 {
				break
			}
		}
	}
	c.t.Logf("%d events in %d logs: indexes consecutive, no event ID repeated", total, len(c.sessions))
}

// ownedBy returns the sessions m has active.
func ownedBy(t *testing.T, members []*clusterProc, m *clusterProc) []string {
	t.Helper()
	var out []string
	for s, o := range ownersOf(t, members) {
		if o == m.name {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// servedWithin has every session of sessions served through base after
// the cut: busy ones (a turn in flight) read, the others given a new turn;
// it returns the longest time from the cut until one was served.
func (c *partitionCluster) servedWithin(base string, sessions []string, busy map[string]bool) time.Duration {
	c.t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var worst time.Duration
	var failures []string
	each := map[string]time.Duration{}
	for _, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := c.cutAt.Add(15 * time.Second)
			var err error
			if busy[s] {
				cl, _ := client.New(base, "assistant", client.Options{})
				for {
					ctx, cancel := context.WithDeadline(context.Background(), deadline)
					_, _, err = cl.State(ctx, s)
					cancel()
					if err == nil || time.Now().After(deadline) {
						break
					}
				}
			} else {
				var code int
				var body string
				code, body, err = c.pushUntil(base, s, "are you there?", deadline)
				if err == nil && code != http.StatusOK {
					err = fmt.Errorf("%d %s", code, body)
				}
			}
			took := time.Since(c.cutAt)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, fmt.Sprintf("%s: %v", s, err))
				return
			}
			each[s] = took.Round(time.Millisecond)
			worst = max(worst, took)
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		c.t.Fatalf("sessions not served after the cut: %v", failures)
	}
	c.t.Logf("served again after the cut: %v", each)
	return worst
}

// waitSteppedDown waits until p says it stepped down, and returns when.
func waitSteppedDown(t *testing.T, p *clusterProc, since time.Time, within time.Duration) cluster.Status {
	t.Helper()
	for {
		st := p.status(t)
		if st.Quorum != nil && st.Quorum.SteppedDown {
			return st
		}
		if time.Since(since) > within {
			t.Fatalf("%s did not step down within %v of the cut: %+v", p.name, within, st.Quorum)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// servedAgainAndSteppedDown waits until every session of cut is served
// again through url (servedWithin), fails unless that took at most 3 s of
// the cut (the bound), and waits for m3 to step down, logging both
// after what.
func (c *partitionCluster) servedAgainAndSteppedDown(url string, cut []string, busy map[string]bool, what string) cluster.Status {
	t := c.t
	t.Helper()
	worst := c.servedWithin(url, cut, busy)
	t.Logf("%s within %v of the cut", what, worst.Round(time.Millisecond))
	if worst > 3*time.Second {
		t.Errorf("m3's sessions were served again %v after the cut; want within 3 s", worst.Round(time.Millisecond))
	}
	st := waitSteppedDown(t, c.m3, c.cutAt, 5*time.Second)
	t.Logf("m3 stepped down %v after the cut", st.Quorum.Since.Sub(c.cutAt).Round(time.Millisecond))
	return st
}

func TestPartitionOfProcesses(t *testing.T) {
	needNetLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	store := testDatabase(t, ctx, "a2_partition")
	lab := newNetLab(t)
	for _, n := range []string{"m1", "m2", "m3", "gw"} {
		lab.add(n)
	}
	store = lab.storeProxy(store)
	scriptFile := filepath.Join(t.TempDir(), "script.json")
	script := `{"replies":[{"match":"long","text":"` + longAnswer + `","delayMs":40}],"default":{"text":"` + clusterAnswer + `","delayMs":5}}`
	if err := os.WriteFile(scriptFile, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	member := []string{"--role", "member", "--cluster", "part", "--store", store, "--script", scriptFile}
	c := &partitionCluster{t: t, turns: map[string]int{}}
	c.m1 = lab.start("m1", member...)
	c.m2 = lab.start("m2", append(member, "--join", c.m1.gossip)...)
	c.m3 = lab.start("m3", append(member, "--join", c.m1.gossip+","+c.m2.gossip)...)
	c.gw = lab.start("gw", "--role", "gateway", "--cluster", "part", "--join", c.m1.gossip+","+c.m2.gossip)
	c.members = []*clusterProc{c.m1, c.m2, c.m3}
	c.procs = []*clusterProc{c.m1, c.m2, c.m3, c.gw}
	c.waitWhole(time.Now(), 20*time.Second)

	// 24 sessions with a turn each.
	for i := range 24 {
		c.sessions = append(c.sessions, fmt.Sprintf("p-%02d", i))
	}
	for _, s := range c.sessions {
		if code, body, err := c.push(c.gw.url, s, "hello"); err != nil || code != http.StatusOK {
			t.Fatalf("push %s: %d %s %v", s, code, body, err)
		}
	}
	c.waitDone(c.gw.url, c.sessions, 30*time.Second)
	cut := ownedBy(t, c.members, c.m3)
	if len(cut) < 2 {
		t.Fatalf("m3 owns %d of the 24 sessions; the test needs two", len(cut))
	}
	t.Logf("m3 owns %d of the 24 sessions: %v", len(cut), cut)

	t.Run("a member cut off from its peers and the gateway steps down; the majority serves its sessions; the healed cluster is one again", func(t *testing.T) {
		c.t = t
		// Half of m3's sessions have a long turn in flight at the cut.
		busy := map[string]bool{}
		for i, s := range cut {
			if i%2 == 0 {
				if code, body, err := c.push(c.gw.url, s, "a long question"); err != nil || code != http.StatusOK {
					t.Fatalf("push %s: %d %s %v", s, code, body, err)
				}
				busy[s] = true
			}
		}
		time.Sleep(300 * time.Millisecond) // the answers stream
		lab.cut([]string{"m3"}, []string{"m1", "m2", "gw"})
		c.cutAt = time.Now()
		defer lab.heal() // if the test fails before it heals
		t.Logf("cut at %s", c.cutAt.UTC().Format("15:04:05.000"))
		st := c.servedAgainAndSteppedDown(c.gw.url, cut, busy, fmt.Sprintf("symmetric cut of m3 (%d sessions, %d with a turn in flight): every one served again through the majority's gateway", len(cut), len(busy)))
		t.Logf("m3 says: %s (lease %s; it sees %d of %d members)", st.Quorum.Reason, st.Lease, st.Quorum.Visible, st.Quorum.Known)
		if st.Lease != "stepped down" || st.SessionCount != 0 {
			t.Errorf("m3 stepped down but its lease is %q and it has %d sessions active", st.Lease, st.SessionCount)
		}
		b, _ := os.ReadFile(c.m3.log)
		if !strings.Contains(string(b), "steps down") {
			t.Errorf("m3's log does not say it stepped down")
		}
		for _, p := range []*clusterProc{c.m1, c.m2} {
			if st := p.status(t); st.Quorum == nil || st.Quorum.SteppedDown || len(st.Hosts) != 2 {
				t.Errorf("%s during the cut: hosts %v, quorum %+v; want 2 hosts, serving", p.name, st.Hosts, st.Quorum)
			}
		}
		c.waitDone(c.gw.url, c.sessions, 30*time.Second)
		// Past memberlist's 30 s of gossip to the dead: only the rejoin
		// brings the two sides together again.
		time.Sleep(time.Until(c.cutAt.Add(35 * time.Second)))
		if st := c.m3.status(t); len(st.Members) != 1 || !st.Quorum.SteppedDown {
			t.Fatalf("m3 after 35 s of the cut sees %d nodes, quorum %+v; want itself only, stepped down", len(st.Members), st.Quorum)
		}
		lab.heal()
		healed := time.Now()
		took := c.waitWhole(healed, 10*time.Second)
		t.Logf("healed after %v: every node saw every other, m3 up again, %v after the heal", healed.Sub(c.cutAt).Round(time.Second), took.Round(time.Millisecond))
		c.allServed(c.gw.url)
	})

	t.Run("a gateway on the minority side: the majority's members serve the cut member's sessions", func(t *testing.T) {
		c.t = t
		lab.cut([]string{"m3", "gw"}, []string{"m1", "m2"})
		c.cutAt = time.Now()
		defer lab.heal() // if the test fails before it heals
		c.servedAgainAndSteppedDown(c.m1.url, cut, nil, fmt.Sprintf("m3 and the gateway cut off from m1 and m2: m3's %d sessions served again through m1", len(cut)))
		// The minority's gateway routes to no member: nothing is served
		// on the minority side.
		for deadline := time.Now().Add(5 * time.Second); ; {
			if st := c.gw.status(t); len(st.Hosts) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the minority's gateway still routes to %v", c.gw.status(t).Hosts)
			}
			time.Sleep(20 * time.Millisecond)
		}
		hc := &http.Client{Timeout: 2 * time.Second}
		resp, err := hc.Get(c.gw.url + "/v1/agents/assistant/sessions/" + cut[0] + "/state")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("the minority's gateway served %s", cut[0])
			}
		}
		c.waitDone(c.m1.url, c.sessions, 30*time.Second)
		time.Sleep(time.Until(c.cutAt.Add(5 * time.Second)))
		lab.heal()
		healed := time.Now()
		took := c.waitWhole(healed, 10*time.Second)
		t.Logf("healed: the cluster whole again %v after the heal", took.Round(time.Millisecond))
		c.allServed(c.gw.url)
	})

	t.Run("a one-way cut: the member hears none of its peers", func(t *testing.T) {
		c.t = t
		for _, from := range []string{"m1", "m2", "gw"} {
			lab.drop("m3", from)
		}
		c.cutAt = time.Now()
		defer lab.heal() // if the test fails before it heals
		c.servedAgainAndSteppedDown(c.gw.url, cut, nil, fmt.Sprintf("m3 hears nobody (its own packets still go out): its %d sessions served again through the gateway", len(cut)))
		for _, p := range []*clusterProc{c.m1, c.m2} {
			if st := p.status(t); st.Quorum == nil || st.Quorum.SteppedDown {
				t.Errorf("%s during the one-way cut: quorum %+v; want serving", p.name, st.Quorum)
			}
		}
		c.waitDone(c.gw.url, c.sessions, 30*time.Second)
		time.Sleep(time.Until(c.cutAt.Add(5 * time.Second)))
		lab.heal()
		healed := time.Now()
		took := c.waitWhole(healed, 10*time.Second)
		t.Logf("healed: the cluster whole again %v after the heal", took.Round(time.Millisecond))
		c.allServed(c.gw.url)
	})

	c.t = t
	c.logsWhole(c.gw.url)
	var steps []string
	for _, p := range c.members {
		b, _ := os.ReadFile(p.log)
		steps = append(steps, fmt.Sprintf("%s stepped down %d times", p.name, strings.Count(string(b), "it steps down")))
	}
	t.Logf("%s", strings.Join(steps, ", "))
	for _, p := range []*clusterProc{c.m1, c.m2} {
		if b, _ := os.ReadFile(p.log); strings.Contains(string(b), "it steps down") {
			t.Errorf("%s, on the majority side every time, stepped down", p.name)
		}
	}
}

// allServed gives every session a turn through base once the cluster is
// whole (no session is left unreachable), and waits until every
// acknowledged turn has completed; every session is then active on the
// member the hash places it on, and on one only.
func (c *partitionCluster) allServed(base string) {
	c.t.Helper()
	t := c.t
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	for _, s := range c.sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, body, err := c.push(base, s, "and now?"); err != nil || code != http.StatusOK {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s: %d %s %v", s, code, body, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("after the heal, pushes failed: %v", failed)
	}
	c.waitDone(base, c.sessions, 30*time.Second)
	hosts := hostsOf(c.gw.status(t).Members)
	byID := map[string]string{}
	for _, m := range c.members {
		byID[m.status(t).Self.ID] = m.name
	}
	owners := ownersOf(t, c.members)
	for _, s := range c.sessions {
		o, _ := cluster.Owner(s, hosts)
		if owners[s] != byID[o.ID] {
			t.Errorf("after the heal %s is active on %q; the hash places it on %q", s, owners[s], byID[o.ID])
		}
	}
	t.Logf("after the heal: every session answered a turn, each on the member the hash places it on")
}
