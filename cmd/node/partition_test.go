package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
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
	// The nodes listen on their namespaces' addresses, not loopback: each
	// gets the cluster's key and a certificate of its CA (docs/security.md).
	certDir := t.TempDir()
	member := func(name string, more ...string) []string {
		return append(append([]string{"--role", "member", "--cluster", "part", "--store", store, "--script", scriptFile}, more...), securityFlags(t, certDir, name)...)
	}
	c := &partitionCluster{t: t, turns: map[string]int{}}
	c.m1 = lab.start("m1", member("m1")...)
	c.m2 = lab.start("m2", member("m2", "--join", c.m1.gossip)...)
	c.m3 = lab.start("m3", member("m3", "--join", c.m1.gossip+","+c.m2.gossip)...)
	c.gw = lab.start("gw", append([]string{"--role", "gateway", "--cluster", "part", "--join", c.m1.gossip + "," + c.m2.gossip}, securityFlags(t, certDir, "gw")...)...)
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
