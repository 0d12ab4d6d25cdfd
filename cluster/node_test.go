package cluster

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/proto"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/actors/sessionpb"
	"github.com/a2-runtime/a2/cluster/clusterpb"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/persistence"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
)

// freeGossipAddr returns 127.0.0.1:p with p and p+1 free now.
func freeGossipAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1)); err == nil {
			l2.Close()
			return "127.0.0.1:" + strconv.Itoa(p)
		}
	}
	t.Fatal("no free ports")
	return ""
}

// memberSetup configures startTestMember.
type memberSetup struct {
	script string                                    // the script model's JSON
	store  persistence.Store                         // the store (default: Pebble on an in-memory filesystem)
	wrap   func(persistence.Store) persistence.Store // wraps the store for this member's runtime
	bind   string                                    // gossip address (default: a free one)
	join   []string
	keys   [][]byte     // Config.Keys
	tls    *TLS         // Config.TLS
	logger *slog.Logger // Config.Logger

	grainIdle      time.Duration // Config.GrainIdle
	passivateAfter time.Duration // the runtime's Options.PassivateAfter
}

// scriptAgent is the agent "assistant" on the script model of this JSON.
func scriptAgent(t testing.TB, scriptJSON string) *actors.Agent {
	t.Helper()
	sc, err := script.Parse([]byte(scriptJSON))
	if err != nil {
		t.Fatal(err)
	}
	model := script.New(sc)
	agent, err := actors.NewAgent(actors.AgentOptions{Name: "assistant", Model: harness.ModelID("script/test"),
		Models: func(string) (harness.Model, error) { return model, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return agent
}

// startTestMember starts a cluster member in this process: the script
// model, the runtime placed by the node, over a Pebble store.
func startTestMember(t testing.TB, m memberSetup) (*Node, *actors.Runtime) {
	t.Helper()
	if m.store == nil {
		st, err := pebblestore.Open("data", pebblestore.Options{FS: vfs.NewMem()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		m.store = st
	}
	if m.bind == "" {
		m.bind = freeGossipAddr(t)
	}
	agent := scriptAgent(t, m.script)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := StoreIdentity(ctx, m.store)
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{Name: "unit", Role: RoleMember, Bind: m.bind, Join: m.join, StoreID: id, Agents: []*actors.Agent{agent},
		Keys: m.keys, TLS: m.tls, Logger: m.logger, GrainIdle: m.grainIdle})
	if err != nil {
		t.Fatal(err)
	}
	store := m.store
	if m.wrap != nil {
		store = m.wrap(store)
	}
	rt, err := actors.New(store, []*actors.Agent{agent}, actors.Options{Place: n.Place, SkipRecovery: true, Lease: n.LeaseOptions(),
		PassivateAfter: m.passivateAfter})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx, rt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Leave(context.Background())
		rt.Close()
	})
	deadline := time.Now().Add(10 * time.Second)
	for len(n.Hosts()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the member never saw itself up")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return n, rt
}

// One member in this process serves the cluster's router, and refuses
// every malformed or unknown envelope with an error answer, never a crash;
// it serves requests as before afterwards.
func TestMemberRefusesBadEnvelopesAndServesTheRouter(t *testing.T) {
	n, _ := startTestMember(t, memberSetup{script: `{"default":{"text":"served by the member"}}`})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := n.Router()
	if _, err := r.Push(ctx, "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m1", "hello")}, false); err != nil {
		t.Fatalf("push: %v", err)
	}

	grainPID := actor.NewPID(n.self.Address(), grainPrefix+"s1")
	activatorPID := actor.NewPID(n.self.Address(), activatorName)
	garbage := []byte{0xff, 0xff, 0xff}
	pushFor := func(session string) []byte {
		b, _ := proto.Marshal(&sessionpb.PushRequest{Agent: "assistant", Session: session})
		return b
	}
	cases := []struct {
		name string
		to   *actor.PID
		env  *clusterpb.Envelope
		code string
	}{
		{"unknown kind at a grain", grainPID, &clusterpb.Envelope{Version: version, Kind: "banana"}, codeUnsupported},
		{"unknown kind at the activator", activatorPID, &clusterpb.Envelope{Version: version, Kind: "banana"}, codeUnsupported},
		{"newer version at a grain", grainPID, &clusterpb.Envelope{Version: version + 1, Kind: kindPush, Body: pushFor("s1")}, codeUnsupported},
		{"newer version at the activator", activatorPID, &clusterpb.Envelope{Version: version + 1, Kind: kindActivate}, codeUnsupported},
		{"a body that does not decode", grainPID, &clusterpb.Envelope{Version: version, Kind: kindPush, Body: garbage}, codeBadMessage},
		{"an idle question that does not decode", grainPID, &clusterpb.Envelope{Version: version, Kind: kindIdle, Body: garbage}, codeBadMessage},
		{"an activation that does not decode", activatorPID, &clusterpb.Envelope{Version: version, Kind: kindActivate, Body: garbage}, codeBadMessage},
		{"a push for another session", grainPID, &clusterpb.Envelope{Version: version, Kind: kindPush, Body: pushFor("other")}, codeBadMessage},
		{"a result sent as a request", grainPID, &clusterpb.Envelope{Version: version, Kind: kindResult}, codeUnsupported},
		{"a push with a stream that does not decode", grainPID, &clusterpb.Envelope{Version: version, Kind: kindPushStream, Body: garbage}, codeBadMessage},
		{"a push with a stream without its subscription", grainPID, wrap(kindPushStream, &clusterpb.PushStreamRequest{Push: &sessionpb.PushRequest{Agent: "assistant", Session: "s1"}}, time.Time{}), codeBadMessage},
		{"a push with a stream without a subscriber", grainPID, wrap(kindPushStream, &clusterpb.PushStreamRequest{Push: &sessionpb.PushRequest{Agent: "assistant", Session: "s1"},
			Subscribe: &clusterpb.SubscribeRequest{Agent: "assistant", Session: "s1", Stream: "x"}}, time.Time{}), codeBadMessage},
		{"a push with a stream for another session", grainPID, wrap(kindPushStream, &clusterpb.PushStreamRequest{Push: &sessionpb.PushRequest{Agent: "assistant", Session: "other"},
			Subscribe: &clusterpb.SubscribeRequest{Agent: "assistant", Session: "other", Stream: "x", SubscriberAddress: "a", SubscriberId: "b"}}, time.Time{}), codeBadMessage},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := n.ask(c.to, c.env, 5*time.Second)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			var e sessionpb.Error
			if res.Kind != kindError || proto.Unmarshal(res.Body, &e) != nil || e.Code != c.code {
				t.Fatalf("answer %s %q, want an error %s", res.Kind, res.Body, c.code)
			}
		})
	}
	// A message that is not an envelope is ignored by both.
	n.system.Root.Send(grainPID, &sessionpb.Event{Id: "stray"})
	n.system.Root.Send(activatorPID, &sessionpb.Event{Id: "stray"})

	// Still serving: the turn completes and reads back through the router.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, idx, err := r.State(ctx, "assistant", "s1")
		if err != nil {
			t.Fatalf("state: %v", err)
		}
		if st.AI.Active == nil && len(st.AI.Messages) == 2 {
			evs, err := r.History(ctx, "assistant", "s1", 0, 1000)
			if err != nil || uint64(len(evs)) != idx {
				t.Fatalf("history: %d events (%v), state at %d", len(evs), err, idx)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the turn did not complete")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Errors keep their kind across the router.
	if _, err := r.Push(ctx, "nope", "s1", []protocol.Event{protocol.Inputs.Text("m2", "x")}, false); !errors.Is(err, actors.ErrUnknownAgent) {
		t.Fatalf("unknown agent: %v", err)
	}
	var ve *protocol.ValidationError
	if _, err := r.Push(ctx, "assistant", "s1", []protocol.Event{{ID: "m3", Type: "ai.control.requested", Payload: []byte(`{"action":"banana"}`)}}, false); !errors.As(err, &ve) {
		t.Fatalf("bad command: %v, want a validation error", err)
	}
	if _, err := r.Push(ctx, "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m1", "other text")}, false); !errors.Is(err, actors.ErrPartialDuplicateBatch) {
		t.Fatalf("reused ID: %v, want PARTIAL_DUPLICATE_BATCH", err)
	}
	if _, _, err := r.State(ctx, "assistant", ""); !errors.As(err, &ve) {
		t.Fatalf("empty session ID: %v, want a validation error", err)
	}
	// A live stream through the router sees the log from the start.
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	evs, _, err := r.Subscribe(sctx, "assistant", "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 3; i++ {
		ev := <-evs
		if ev.Index != i {
			t.Fatalf("stream: index %d, want %d", ev.Index, i)
		}
	}
}

// Two opens of one store read one identity; another store has another.
func TestStoreIdentity(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	a, err := pebblestore.Open("data", pebblestore.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	id1, err := StoreIdentity(ctx, a)
	if err != nil || id1 == "" {
		t.Fatalf("%q %v", id1, err)
	}
	id2, err := StoreIdentity(ctx, a)
	if err != nil || id2 != id1 {
		t.Fatalf("second read %q %v, want %q", id2, err, id1)
	}
	_ = a.Close()
	a, err = pebblestore.Open("data", pebblestore.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if id3, err := StoreIdentity(ctx, a); err != nil || id3 != id1 {
		t.Fatalf("after reopening: %q %v, want %q", id3, err, id1)
	}
	b, err := pebblestore.Open("data", pebblestore.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if other, err := StoreIdentity(ctx, b); err != nil || other == id1 {
		t.Fatalf("another store: %q %v, the same as %q", other, err, id1)
	}
}
