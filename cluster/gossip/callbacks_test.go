// Admission (callbacks.go): nodes of another cluster or store, and
// foreign gossip, are refused, and no metadata makes the check panic.

package gossip

import (
	"bytes"
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/a2-runtime/a2/internal/testutil"
)

// assertNeverListed checks, for a while, that n never lists id.
func assertNeverListed(t *testing.T, n *node, id string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if _, ok := find(n.p.Nodes(), id); ok {
			t.Fatalf("%s lists refused node %s", n.id, id)
		}
	}
	if n.rec.everSaw(id) {
		t.Fatalf("%s gave refused node %s to OnChange", n.id, id)
	}
}

// refusalLogs counts n's Warn lines about refusing id.
func refusalLogs(n *node, id string) (count int, lines string) {
	for _, l := range strings.Split(n.logs.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "refused a node") && strings.Contains(l, "node="+id) {
			count++
			lines += l + "\n"
		}
	}
	return count, lines
}

func TestRefusesOtherClusterName(t *testing.T) {
	a := startNode(t, nodeOpts{cluster: "alpha"})
	b := newNode(t, nodeOpts{cluster: "beta", join: []string{a.p.LocalAddr()}, joinTimeout: 20 * time.Second})
	start := time.Now()
	err := b.p.Start(context.Background())
	elapsed := time.Since(start)
	if err == nil {
		t.Fatal("Start joined a node of another cluster")
	}
	t.Logf("refused after %s: %v", elapsed.Round(time.Millisecond), err)
	for _, s := range []string{`"alpha"`, `"beta"`, a.p.LocalAddr(), "cluster name"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not name %s: %v", s, err)
		}
	}
	if elapsed > 5*time.Second {
		t.Errorf("refusal took %s, JoinTimeout is 20s: it was retried", elapsed)
	}
	if b.p.LocalAddr() != "" || len(b.p.Nodes()) != 0 {
		t.Errorf("failed Start left state: %q %v", b.p.LocalAddr(), b.p.Nodes())
	}
	assertNeverListed(t, a, b.id, time.Second)
	count, lines := refusalLogs(a, b.id)
	if count != 1 || !strings.Contains(lines, `\"alpha\"`) || !strings.Contains(lines, `\"beta\"`) {
		t.Errorf("a logged the refusal %d times (want once, with both names):\n%s", count, lines)
	}
	if count, _ := refusalLogs(b, a.id); count != 1 {
		t.Errorf("b logged its refusal of a %d times, want once", count)
	}
}

func TestRefusesOtherStoreAcceptsGateway(t *testing.T) {
	a := startNode(t, nodeOpts{store: "pebble:/data/a", kinds: []string{"session"}})

	b := newNode(t, nodeOpts{store: "pebble:/data/b", join: []string{a.p.LocalAddr()}, joinTimeout: 20 * time.Second})
	start := time.Now()
	err := b.p.Start(context.Background())
	elapsed := time.Since(start)
	if err == nil {
		t.Fatal("Start joined a node with another store")
	}
	for _, s := range []string{`"pebble:/data/a"`, `"pebble:/data/b"`, a.p.LocalAddr(), "store"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not name %s: %v", s, err)
		}
	}
	if elapsed > 5*time.Second {
		t.Errorf("refusal took %s, JoinTimeout is 20s", elapsed)
	}

	g := startNode(t, nodeOpts{store: "", role: "gateway", join: []string{a.p.LocalAddr()}})
	want := sortedIDs(a, g)
	waitFor(t, 5*time.Second, "a and the gateway see each other", func() bool {
		return slices.Equal(ids(a.p.Nodes()), want) && slices.Equal(ids(g.p.Nodes()), want)
	})

	// Joining through the gateway does not get around the store check: the
	// gateway's state includes a.
	b2 := newNode(t, nodeOpts{store: "pebble:/data/b", join: []string{g.p.LocalAddr()}, joinTimeout: 20 * time.Second})
	err = b2.p.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), `"pebble:/data/a"`) || !strings.Contains(err.Error(), g.p.LocalAddr()) {
		t.Fatalf("join through the gateway: %v", err)
	}
	assertNeverListed(t, a, b.id, 500*time.Millisecond)
	assertNeverListed(t, a, b2.id, 0)
	assertNeverListed(t, g, b2.id, 0)
}

// rawNode is a bare memberlist (none of our delegates but metadata) that
// does not refuse anything, so its join is only refused on the other side
// and it then gossips about itself: the AliveDelegate must keep it out.
type rawDelegate struct{ meta []byte }

func (d rawDelegate) NodeMeta(int) []byte { return d.meta }

func (rawDelegate) NotifyMsg([]byte) {}

func (rawDelegate) GetBroadcasts(_, _ int) [][]byte { return nil }

func (rawDelegate) LocalState(bool) []byte { return nil }

func (rawDelegate) MergeRemoteState(_ []byte, _ bool) {}

func rawNode(t *testing.T, name string, meta []byte) *memberlist.Memberlist {
	t.Helper()
	mc := memberlist.DefaultLANConfig()
	mc.Name = name
	mc.BindAddr, mc.BindPort = "127.0.0.1", 0
	mc.ProbeInterval, mc.ProbeTimeout, mc.GossipInterval = 250*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	mc.Delegate = rawDelegate{meta}
	mc.LogOutput = &testutil.SyncBuffer{}
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ml.Shutdown() })
	return ml
}

func TestRefusesForeignNodesInGossip(t *testing.T) {
	a := startNode(t, nodeOpts{cluster: "alpha", store: "s1"})
	foreign := []struct{ name, meta string }{
		{"raw-beta", `{"id":"raw-beta","host":"127.0.0.1","port":1,"cluster":"beta","status":"up"}`},
		{"raw-store", `{"id":"raw-store","host":"127.0.0.1","port":1,"cluster":"alpha","store":"s2","status":"up"}`},
		{"raw-garbage", "\xff{not json"},
		{"raw-empty", ""},
		{"raw-wrongid", `{"id":"someone-else","cluster":"alpha"}`},
	}
	var mls []*memberlist.Memberlist
	for _, f := range foreign {
		ml := rawNode(t, f.name, []byte(f.meta))
		// a refuses in its MergeDelegate, after sending its own state, so
		// the bare joiner believes it joined and goes on gossiping to a.
		if _, err := ml.Join([]string{a.p.LocalAddr()}); err != nil {
			t.Fatalf("%s: bare join: %v", f.name, err)
		}
		mls = append(mls, ml)
	}
	waitFor(t, 5*time.Second, "the bare nodes list a", func() bool {
		for _, ml := range mls {
			if ml.NumMembers() < 2 {
				return false
			}
		}
		return true
	})
	time.Sleep(time.Second) // a few gossip and probe rounds
	for _, f := range foreign {
		assertNeverListed(t, a, f.name, 0)
		if count, lines := refusalLogs(a, f.name); count != 1 {
			t.Errorf("refusal of %s logged %d times, want once:\n%s", f.name, count, lines)
		}
	}
	if got := ids(a.p.Nodes()); !slices.Equal(got, []string{a.id}) {
		t.Errorf("a lists %v", got)
	}
	// Not only hidden from Nodes: a's memberlist itself never took them in
	// (so it does not probe them or gossip about them).
	for _, m := range a.p.ml.Members() {
		if m.Name != a.id {
			t.Errorf("a's memberlist has %s", m.Name)
		}
	}
}

func TestCheckNeverPanics(t *testing.T) {
	p := New(Config{Meta: Meta{ID: "me", Cluster: "alpha", Store: "s1"}})
	valid := &memberlist.Node{Name: "n1", Addr: net.IPv4(127, 0, 0, 1), Port: 1, Meta: []byte(`{"id":"n1","cluster":"alpha","store":"s1","extra":[1,2]}`)}
	if err := (alive{p}).NotifyAlive(valid); err != nil {
		t.Fatalf("valid node refused: %v", err)
	}
	gateway := &memberlist.Node{Name: "g", Meta: []byte(`{"id":"g","cluster":"alpha","store":""}`)}
	if err := (alive{p}).NotifyAlive(gateway); err != nil {
		t.Fatalf("gateway refused: %v", err)
	}
	bad := [][]byte{nil, {}, []byte("null"), []byte("{"), []byte(`[]`), []byte(`"x"`), []byte(`{"id":5}`),
		[]byte(`{"id":"n2","cluster":"alpha","port":"80"}`), []byte(`{"id":"n2","kinds":{}}`),
		[]byte(`{"id":"n2","cluster":"beta"}`), []byte(`{"id":"n2","cluster":"alpha","store":"s2"}`),
		[]byte(`{"id":"other","cluster":"alpha"}`), bytes.Repeat([]byte{0xff}, 600), []byte(`{"id":"n2","cluster":"alpha","port":1e400}`)}
	for _, m := range bad {
		n := &memberlist.Node{Name: "n2", Meta: m} // no address: Address() must not panic either
		if err := (alive{p}).NotifyAlive(n); err == nil {
			t.Errorf("meta %q accepted", m)
		}
		events{p}.NotifyJoin(n)
		events{p}.NotifyUpdate(n)
		if err := (merge{p}).NotifyMerge([]*memberlist.Node{nil, valid, n}); err == nil {
			t.Errorf("merge with meta %q accepted", m)
		}
	}
	if err := (merge{p}).NotifyMerge([]*memberlist.Node{nil, valid, gateway, {Name: "me"}}); err != nil {
		t.Errorf("good merge refused: %v", err)
	}
	if got := ids(p.Nodes()); len(got) != 0 {
		t.Errorf("refused nodes listed: %v", got)
	}
}

func FuzzCheck(f *testing.F) {
	f.Add([]byte(`{"id":"n","cluster":"c"}`))
	f.Add([]byte("{"))
	f.Add([]byte(nil))
	p := New(Config{Meta: Meta{ID: "me", Cluster: "c", Store: "s"}})
	f.Fuzz(func(t *testing.T, meta []byte) {
		n := &memberlist.Node{Name: "n", Meta: meta}
		_ = (alive{p}).NotifyAlive(n)
		_ = (merge{p}).NotifyMerge([]*memberlist.Node{n})
		events{p}.NotifyJoin(n)
		events{p}.NotifyLeave(n)
	})
}
