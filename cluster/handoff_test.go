package cluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/cluster/gossip"
	"github.com/a2-runtime/a2/persistence"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
)

// heldStore holds the appends of one session until released, so that a
// member's write in flight lasts as long as the test wants.
type heldStore struct {
	persistence.Store
	session string
	hold    atomic.Bool
	release chan struct{}
	once    sync.Once
}

func (h *heldStore) Append(ctx context.Context, session string, expected uint64, events []protocol.Event, opts ...persistence.AppendOption) ([]protocol.Event, error) {
	return persistence.AppendInTurn(ctx, func(ctx context.Context, s string, expected uint64, events []protocol.Event, o persistence.AppendOptions) ([]protocol.Event, error) {
		if s == h.session && h.hold.Load() {
			<-h.release
		}
		return h.Store.Append(ctx, s, expected, events, o.Options()...)
	}, session, expected, events, persistence.OptionsOf(opts))
}

func (h *heldStore) open() { h.once.Do(func() { close(h.release) }) }

// loadWatch records, whenever its member starts to load a session (its
// snapshot read), whether the session is still active on another member.
type loadWatch struct {
	persistence.Store
	session  string
	other    func() *actors.Runtime
	loads    atomic.Int32
	overlaps atomic.Int32
}

func (w *loadWatch) LoadSnapshot(ctx context.Context, session, reducer string) (persistence.Snapshot, bool, error) {
	if session == w.session {
		w.loads.Add(1)
		if w.other().IsActive(session) {
			w.overlaps.Add(1)
		}
	}
	return w.Store.LoadSnapshot(ctx, session, reducer)
}

// A member that joins takes over a session that is busy on another member,
// with a write in flight there: it activates the session only after the
// other member has released it, once that write is durable. So a graceful
// change never runs a session on two members at once.
func TestJoinTakesABusySessionOnlyAfterItsReleaseOnTheOtherMember(t *testing.T) {
	shared, err := pebblestore.Open("data", pebblestore.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	bindA, bindB := freeGossipAddr(t), freeGossipAddr(t)
	// A session that the hash places on A alone, and on B once B joins.
	remoteOf := func(bind string) gossip.Meta {
		host, port, _ := net.SplitHostPort(bind)
		p, _ := strconv.Atoi(port)
		return gossip.Meta{Host: host, Port: p + 1}
	}
	var session string
	for i := 0; session == ""; i++ {
		s := fmt.Sprintf("moving-%d", i)
		if o, _ := ownerOf(s, []gossip.Meta{remoteOf(bindA), remoteOf(bindB)}); o.Port == remoteOf(bindB).Port {
			session = s
		}
	}
	held := &heldStore{session: session, release: make(chan struct{})}
	defer held.open()
	script := `{"default":{"text":"one two three four five six seven eight nine ten eleven twelve","delayMs":20}}`
	a, rtA := startTestMember(t, memberSetup{script: script, store: shared, bind: bindA,
		wrap: func(s persistence.Store) persistence.Store { held.Store = s; return held }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.Router().Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Text("m1", "hello")}, false); err != nil {
		t.Fatal(err)
	}
	for {
		st, _, err := a.Router().State(ctx, "assistant", session)
		if err != nil {
			t.Fatal(err)
		}
		if st.AI.Status == protocol.StatusStreaming {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	held.hold.Store(true) // A's next write of the session stays in flight

	watch := &loadWatch{session: session, other: func() *actors.Runtime { return rtA }}
	b, _ := startTestMember(t, memberSetup{script: script, store: shared, bind: bindB, join: []string{bindA},
		wrap: func(s persistence.Store) persistence.Store { watch.Store = s; return watch }})
	for len(b.Hosts()) < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	answered := make(chan error, 1)
	go func() {
		_, err := b.Router().Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Text("m2", "and now?")}, false)
		answered <- err
	}()
	// A's write stays held until B has asked A to release the session, or
	// (were B not to ask) until B loads the session itself.
	for {
		a.mu.Lock()
		_, asked := a.handedOff[session]
		a.mu.Unlock()
		if asked || watch.loads.Load() > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("B neither asked A to release the session nor loaded it")
		}
		time.Sleep(time.Millisecond)
	}
	held.open()
	if err := <-answered; err != nil {
		t.Fatalf("push through the new owner: %v", err)
	}
	if n := watch.overlaps.Load(); n > 0 {
		t.Fatalf("B loaded the session %d time(s) while A still had it active", n)
	}
	if rtA.IsActive(session) {
		t.Fatal("the session is still active on A after B took it over")
	}
	// The turn A was running resumes on B and both turns complete there.
	for {
		st, _, err := b.Router().State(ctx, "assistant", session)
		if err != nil {
			t.Fatal(err)
		}
		if st.AI.Active == nil && len(st.AI.Messages) == 4 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the turns did not complete on B: %d messages", len(st.AI.Messages))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
