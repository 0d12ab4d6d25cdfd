package gossip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/a2-runtime/a2/internal/testutil"
)

// recorder records OnChange calls and whether two ever overlapped.
type recorder struct {
	mu      sync.Mutex
	calls   [][]Meta
	seen    map[string]bool // every ID ever delivered
	in      atomic.Int32
	overlap atomic.Bool
}

func (r *recorder) onChange(nodes []Meta) {
	if r.in.Add(1) != 1 {
		r.overlap.Store(true)
	}
	defer r.in.Add(-1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = make(map[string]bool)
	}
	for _, n := range nodes {
		r.seen[n.ID] = true
	}
	r.calls = append(r.calls, nodes)
}

func (r *recorder) last() []Meta {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		return nil
	}
	return r.calls[len(r.calls)-1]
}

func (r *recorder) everSaw(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[id]
}

type node struct {
	p    *Provider
	id   string
	rec  *recorder
	logs *testutil.SyncBuffer
}

type nodeOpts struct {
	cluster, store, role, status string
	kinds                        []string
	join                         []string
	joinTimeout                  time.Duration
	probeInterval                time.Duration
	port                         int  // protoactor port in Meta (0: a made-up one)
	noPort                       bool // Meta.Port 0
	id                           string
	keys                         [][]byte // Config.Keys
}

var idSeq atomic.Int64

func newNode(t *testing.T, o nodeOpts) *node {
	t.Helper()
	if o.cluster == "" {
		o.cluster = "a2-test"
	}
	if o.role == "" {
		o.role = "member"
	}
	if o.status == "" {
		o.status = StatusStarting
	}
	if o.port == 0 {
		o.port = 20000 + int(idSeq.Load())
	}
	if o.noPort {
		o.port = 0
	}
	id := o.id
	if id == "" {
		id = fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), idSeq.Add(1))
	}
	n := &node{id: id, rec: &recorder{}, logs: &testutil.SyncBuffer{}}
	n.p = New(Config{
		Bind:          "127.0.0.1:0",
		Join:          o.join,
		JoinTimeout:   o.joinTimeout,
		ProbeInterval: o.probeInterval,
		Keys:          o.keys,
		Meta: Meta{
			ID: id, Host: "127.0.0.1", Port: o.port, Kinds: o.kinds,
			Cluster: o.cluster, Store: o.store, Role: o.role, Status: o.status,
		},
		Logger:   slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnChange: n.rec.onChange,
	})
	t.Cleanup(func() {
		if err := n.p.Shutdown(false); err != nil {
			t.Errorf("%s: Shutdown: %v", id, err)
		}
		if n.rec.overlap.Load() {
			t.Errorf("%s: OnChange calls overlapped", id)
		}
		if t.Failed() {
			t.Logf("log of %s:\n%s", id, n.logs.String())
		}
	})
	return n
}

// startNode creates and starts a node; the test fails if Start fails.
func startNode(t *testing.T, o nodeOpts) *node {
	t.Helper()
	n := newNode(t, o)
	if err := n.p.Start(context.Background()); err != nil {
		t.Fatalf("%s: Start: %v", n.id, err)
	}
	return n
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("not within %s: %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func ids(ms []Meta) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func sortedIDs(ns ...*node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.id
	}
	slices.Sort(out)
	return out
}

func find(ms []Meta, id string) (Meta, bool) {
	for _, m := range ms {
		if m.ID == id {
			return m, true
		}
	}
	return Meta{}, false
}

func TestThreeNodesJoinAndSeeStatus(t *testing.T) {
	a := startNode(t, nodeOpts{store: "pebble:/s"})
	b := startNode(t, nodeOpts{store: "pebble:/s", join: []string{a.p.LocalAddr()}})
	c := startNode(t, nodeOpts{store: "pebble:/s", join: []string{a.p.LocalAddr()}, kinds: []string{"session"}})
	want := sortedIDs(a, b, c)
	all := []*node{a, b, c}

	waitFor(t, 5*time.Second, "every node lists all three, in Nodes and OnChange", func() bool {
		for _, n := range all {
			if !slices.Equal(ids(n.p.Nodes()), want) || !slices.Equal(ids(n.rec.last()), want) {
				return false
			}
		}
		return true
	})
	for _, n := range all {
		got, _ := find(n.p.Nodes(), c.id)
		if got.Address() != fmt.Sprintf("127.0.0.1:%d", got.Port) || !slices.Equal(got.Kinds, []string{"session"}) ||
			got.Cluster != "a2-test" || got.Store != "pebble:/s" || got.Status != StatusStarting || got.Role != "member" {
			t.Errorf("%s sees %s as %+v", n.id, c.id, got)
		}
	}

	start := time.Now()
	if err := b.p.SetStatus(StatusUp); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "every node sees b up, in Nodes and OnChange", func() bool {
		for _, n := range all {
			m1, _ := find(n.p.Nodes(), b.id)
			m2, _ := find(n.rec.last(), b.id)
			if m1.Status != StatusUp || m2.Status != StatusUp {
				return false
			}
		}
		return true
	})
	t.Logf("status change seen everywhere %s after SetStatus was called", time.Since(start).Round(time.Millisecond))
	if m, _ := find(a.p.Nodes(), c.id); m.Status != StatusStarting {
		t.Errorf("c's status changed too: %+v", m)
	}
}

func TestCrashIsDetected(t *testing.T) {
	a := startNode(t, nodeOpts{})
	b := startNode(t, nodeOpts{join: []string{a.p.LocalAddr()}})
	c := startNode(t, nodeOpts{join: []string{a.p.LocalAddr()}})
	want := sortedIDs(a, b, c)
	waitFor(t, 5*time.Second, "all three see each other", func() bool {
		return slices.Equal(ids(a.p.Nodes()), want) && slices.Equal(ids(b.p.Nodes()), want) && slices.Equal(ids(c.p.Nodes()), want)
	})

	start := time.Now()
	if err := c.p.Shutdown(false); err != nil { // stands in for kill -9: no leave message
		t.Fatal(err)
	}
	survivors := sortedIDs(a, b)
	var dropped [2]time.Duration
	waitFor(t, 10*time.Second, "a and b drop the crashed node, in Nodes and OnChange", func() bool {
		for i, n := range []*node{a, b} {
			if dropped[i] == 0 && slices.Equal(ids(n.p.Nodes()), survivors) && slices.Equal(ids(n.rec.last()), survivors) {
				dropped[i] = time.Since(start)
			}
		}
		return dropped[0] > 0 && dropped[1] > 0
	})
	t.Logf("crash detected by a after %s, by b after %s (defaults: probe 250ms, timeout 100ms, suspicion x2, gossip 50ms)",
		dropped[0].Round(time.Millisecond), dropped[1].Round(time.Millisecond))
}

func TestGracefulLeaveIsSeen(t *testing.T) {
	// a probes only every 20 s, so within the bound below it can only learn
	// of b's departure from b's leave message, not by detecting a failure.
	a := startNode(t, nodeOpts{probeInterval: 20 * time.Second})
	b := startNode(t, nodeOpts{join: []string{a.p.LocalAddr()}})
	want := sortedIDs(a, b)
	waitFor(t, 5*time.Second, "a and b see each other", func() bool {
		return slices.Equal(ids(a.p.Nodes()), want) && slices.Equal(ids(b.p.Nodes()), want)
	})
	if err := b.p.SetStatus(StatusLeaving); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "a sees b leaving", func() bool {
		m, _ := find(a.p.Nodes(), b.id)
		return m.Status == StatusLeaving
	})
	start := time.Now()
	if err := b.p.Shutdown(true); err != nil {
		t.Fatalf("graceful Shutdown: %v", err)
	}
	d := waitFor(t, 3*time.Second, "a drops b after its leave", func() bool {
		return slices.Equal(ids(a.p.Nodes()), []string{a.id}) && slices.Equal(ids(a.rec.last()), []string{a.id})
	})
	t.Logf("leave seen %s after Shutdown(true) returned, %s after it was called", d.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

func TestJoinWhereNothingAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now

	n := newNode(t, nodeOpts{join: []string{addr}, joinTimeout: time.Second})
	start := time.Now()
	err = n.p.Start(context.Background())
	elapsed := time.Since(start)
	t.Logf("failed after %s: %v", elapsed.Round(time.Millisecond), err)
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "no node answered") {
		t.Fatalf("Start: %v", err)
	}
	if elapsed < 900*time.Millisecond || elapsed > 5*time.Second {
		t.Errorf("Start gave up after %s with JoinTimeout 1s", elapsed)
	}
	if strings.Contains(err.Error(), "(1 attempts") {
		t.Errorf("no retry: %v", err)
	}

	// ctx ends the retrying too.
	m := newNode(t, nodeOpts{join: []string{addr}, joinTimeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	err = m.p.Start(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), addr) || time.Since(start) > 3*time.Second {
		t.Fatalf("Start with a 300ms ctx: %v after %s", err, time.Since(start))
	}
}

// With Config.Keys the cluster admits only nodes that hold one of its
// keys: a node without a key, or with another, cannot join and is logged
// as refused. A rotation: every node holds the old key and the new one
// (the old first), then a node encrypts with the new one, and all see each
// other throughout.
func TestGossipKeysAdmitOnlyKeyHolders(t *testing.T) {
	key := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	a := startNode(t, nodeOpts{keys: [][]byte{key(1), key(3)}})
	for name, keys := range map[string][][]byte{"no key": nil, "another key": {key(2)}} {
		stranger := newNode(t, nodeOpts{join: []string{a.p.LocalAddr()}, joinTimeout: 700 * time.Millisecond, keys: keys})
		if err := stranger.p.Start(context.Background()); err == nil {
			t.Fatalf("%s: joined a keyed cluster", name)
		}
		if a.rec.everSaw(stranger.id) {
			t.Fatalf("%s: the keyed node saw the stranger %s", name, stranger.id)
		}
	}
	waitFor(t, 5*time.Second, "the keyed node logs the refusal", func() bool {
		return strings.Contains(a.logs.String(), "refused a message that no cluster key opens")
	})

	// Rotation: a and b hold the old key first and the new one second; c
	// encrypts with the new one and still opens the old.
	b := startNode(t, nodeOpts{join: []string{a.p.LocalAddr()}, keys: [][]byte{key(1), key(3)}})
	c := startNode(t, nodeOpts{join: []string{b.p.LocalAddr()}, keys: [][]byte{key(3), key(1)}})
	waitFor(t, 5*time.Second, "the three keyed nodes see each other", func() bool {
		return slices.Equal(ids(a.rec.last()), sortedIDs(a, b, c)) && slices.Equal(ids(c.rec.last()), sortedIDs(a, b, c))
	})

	// A key of a length AES does not take is refused at Start.
	bad := newNode(t, nodeOpts{keys: [][]byte{[]byte("short")}})
	if err := bad.p.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "cluster key") {
		t.Fatalf("Start with a 5-byte key: %v", err)
	}
}

func TestLifecycle(t *testing.T) {
	c := &cluster.Cluster{MemberList: &cluster.MemberList{}}

	p := newNode(t, nodeOpts{}).p
	if err := p.StartMember(c); err == nil || !strings.Contains(err.Error(), "before Start") {
		t.Errorf("StartMember before Start: %v", err)
	}
	if err := p.StartClient(c); err == nil || !strings.Contains(err.Error(), "before Start") {
		t.Errorf("StartClient before Start: %v", err)
	}
	if err := p.StartMember(nil); err == nil {
		t.Error("StartMember(nil) succeeded")
	}
	for i := 0; i < 2; i++ {
		if err := p.Shutdown(true); err != nil {
			t.Errorf("Shutdown %d of a never-started provider: %v", i, err)
		}
	}

	q := startNode(t, nodeOpts{})
	if err := q.p.Start(context.Background()); err == nil {
		t.Error("second Start succeeded")
	}
	if err := q.p.Shutdown(true); err != nil {
		t.Errorf("first Shutdown: %v", err)
	}
	if err := q.p.Shutdown(true); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := q.p.Shutdown(false); err != nil {
		t.Errorf("third Shutdown: %v", err)
	}
	if err := q.p.Start(context.Background()); err == nil {
		t.Error("Start after Shutdown succeeded")
	}
	if err := q.p.SetStatus(StatusUp); err == nil {
		t.Error("SetStatus after Shutdown succeeded")
	}
	if err := q.p.StartMember(c); err == nil {
		t.Error("StartMember after Shutdown succeeded")
	}
	if got := q.p.Nodes(); len(got) != 0 {
		t.Errorf("Nodes after Shutdown: %v", got)
	}

	// A status set before Start is the one Start gossips.
	s := newNode(t, nodeOpts{})
	if err := s.p.SetStatus(StatusUp); err != nil {
		t.Fatal(err)
	}
	if err := s.p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.p.Nodes(); len(got) != 1 || got[0].Status != StatusUp {
		t.Errorf("after SetStatus before Start: %+v", got)
	}

	r := newNode(t, nodeOpts{})
	r.p.cfg.Meta.ID = ""
	if err := r.p.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "ID") {
		t.Errorf("Start without an ID: %v", err)
	}
}

func TestMetadataTooLarge(t *testing.T) {
	var kinds []string
	for i := 0; i < 40; i++ {
		kinds = append(kinds, fmt.Sprintf("kind-number-%02d", i))
	}
	n := newNode(t, nodeOpts{kinds: kinds})
	err := n.p.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "512") {
		t.Fatalf("Start with %d kinds: %v", len(kinds), err)
	}
	if n.p.LocalAddr() != "" {
		t.Errorf("bound %s anyway", n.p.LocalAddr())
	}

	m := startNode(t, nodeOpts{})
	if err := m.p.SetStatus(strings.Repeat("x", 600)); err == nil || !strings.Contains(err.Error(), "512") {
		t.Fatalf("SetStatus with a 600-byte status: %v", err)
	}
	if got := m.p.Nodes(); len(got) != 1 || got[0].Status != StatusStarting {
		t.Errorf("status after the refused SetStatus: %+v", got)
	}
}

// freePort returns a TCP port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// topologyWatch keeps the last cluster topology protoactor published on its
// event stream (MemberList.Members reads without protoactor's lock, which
// the race detector reports, so the test watches the events instead).
type topologyWatch struct {
	mu      sync.Mutex
	members map[string]seenMember
}

// seenMember is what protoactor published of one member.
type seenMember struct {
	Host  string
	Port  int32
	Kinds []string
}

func (m seenMember) Address() string { return net.JoinHostPort(m.Host, fmt.Sprint(m.Port)) }

func watchTopology(sys *actor.ActorSystem) *topologyWatch {
	w := &topologyWatch{}
	sys.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*cluster.ClusterTopology); ok {
			m := make(map[string]seenMember, len(t.Members))
			for _, mem := range t.Members {
				m[mem.Id] = seenMember{Host: mem.Host, Port: mem.Port, Kinds: slices.Clone(mem.Kinds)}
			}
			w.mu.Lock()
			w.members = m
			w.mu.Unlock()
		}
	})
	return w
}

// member returns protoactor's view of member id, nil when absent.
func (w *topologyWatch) member(id string) *seenMember {
	w.mu.Lock()
	defer w.mu.Unlock()
	m, ok := w.members[id]
	if !ok {
		return nil
	}
	return &m
}

func (w *topologyWatch) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.members)
}

// TestProtoactorTopology runs one real protoactor cluster member over the
// provider; the other nodes are gossip only. (Two protoactor remotes in one
// process race in gRPC's global logger, which protoactor sets on every
// remote start, so the race detector rules that out.)
func TestProtoactorTopology(t *testing.T) {
	discard := slog.New(slog.DiscardHandler)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return discard }))
	port := freePort(t)
	a := startNode(t, nodeOpts{id: sys.ID, status: StatusUp, kinds: []string{"session"}, port: port})
	kind := cluster.NewKind("session", actor.PropsFromFunc(func(actor.Context) {}))
	w := watchTopology(sys)
	c := cluster.New(sys, cluster.Configure("a2-test", a.p, disthash.New(), remote.Configure("127.0.0.1", port), cluster.WithKinds(kind)))
	c.StartMember()                         // calls a.p.StartMember; sleeps 1 s
	t.Cleanup(func() { c.Shutdown(false) }) // before a's provider is shut down; graceful would sleep 2 s

	b := startNode(t, nodeOpts{status: StatusStarting, kinds: []string{"session"}, join: []string{a.p.LocalAddr()}})
	g := startNode(t, nodeOpts{status: StatusStarting, role: "gateway", join: []string{a.p.LocalAddr()}})
	x := startNode(t, nodeOpts{status: StatusUp, noPort: true, join: []string{a.p.LocalAddr()}})
	waitFor(t, 5*time.Second, "a lists all four nodes", func() bool { return len(a.p.Nodes()) == 4 })
	waitFor(t, 5*time.Second, "a (up) and the gateway are in protoactor's topology, b (starting) and x (no port) are not", func() bool {
		ma, mg := w.member(a.id), w.member(g.id)
		return ma != nil && slices.Equal(ma.Kinds, []string{"session"}) && mg != nil && len(mg.Kinds) == 0 &&
			w.member(b.id) == nil && w.member(x.id) == nil && w.len() == 2
	})
	if m := w.member(g.id); m.Address() != g.p.cfg.Meta.Address() {
		t.Errorf("gateway published at %s, its Meta says %s", m.Address(), g.p.cfg.Meta.Address())
	}

	if err := b.p.SetStatus(StatusUp); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "b is in the topology with its kind once up", func() bool {
		m := w.member(b.id)
		return m != nil && slices.Equal(m.Kinds, []string{"session"})
	})
	if got := c.MemberList.GetActivatorMember("session", ""); got == "" {
		t.Error("protoactor has no member for kind session")
	}

	if err := b.p.Shutdown(true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "b's leave reaches protoactor", func() bool {
		return w.member(b.id) == nil && w.len() == 2
	})
}
