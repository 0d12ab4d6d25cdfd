package actors

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/persistence"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
)

// countingStore is the real Pebble store with a count of its appends: each
// append is one synced write.
type countingStore struct {
	persistence.Store
	appends atomic.Int64
}

func (c *countingStore) Append(ctx context.Context, session string, expected uint64, events []protocol.Event) ([]protocol.Event, error) {
	c.appends.Add(1)
	return c.Store.Append(ctx, session, expected, events)
}

type fixture struct {
	t     *testing.T
	fs    vfs.FS
	store *countingStore
	rt    *Runtime
	model *script.Model
	agent *Agent
}

func newFixture(t *testing.T, s string, mod func(*AgentOptions)) *fixture {
	t.Helper()
	sc, err := script.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, fs: vfs.NewMem(), model: script.New(sc)}
	f.open(mod)
	return f
}

func (f *fixture) open(mod func(*AgentOptions)) {
	st, err := pebblestore.Open("data", pebblestore.Options{FS: f.fs})
	if err != nil {
		f.t.Fatal(err)
	}
	f.store = &countingStore{Store: st}
	opts := AgentOptions{Name: "assistant", Model: harness.ModelID("script/test"),
		Models: func(string) (harness.Model, error) { return f.model, nil }}
	if mod != nil {
		mod(&opts)
	}
	a, err := NewAgent(opts)
	if err != nil {
		f.t.Fatal(err)
	}
	f.agent = a
	f.rt, err = New(f.store, []*Agent{a}, Options{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(f.close)
}

func (f *fixture) close() {
	if f.rt != nil {
		f.rt.Close()
		f.rt = nil
		_ = f.store.Close()
	}
}

func (f *fixture) push(session string, evs ...protocol.Event) []protocol.Event {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := f.rt.Push(ctx, "assistant", session, evs, false)
	if err != nil {
		f.t.Fatalf("push: %v", err)
	}
	return out
}

// waitFor polls the session state until cond holds (bounded: 10 s).
func (f *fixture) waitFor(session string, what string, cond func(*protocol.AIState) bool) *protocol.AIState {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _, err := f.rt.State(context.Background(), "assistant", session)
		if err != nil {
			f.t.Fatal(err)
		}
		if cond(st.AI) {
			return st.AI
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(st.AI)
			if len(b) > 3000 {
				b = append(b[:3000], "..."...)
			}
			f.t.Fatalf("timed out waiting for %s; state: %s", what, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func lastText(s *protocol.AIState) string {
	if len(s.Messages) == 0 {
		return ""
	}
	var b strings.Builder
	for _, p := range s.Messages[len(s.Messages)-1].Parts {
		if p.Type == protocol.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

func idle(s *protocol.AIState) bool { return s.Active == nil && len(s.Inbox.Items) == 0 }

// R-TURN-01 R-GEN-01 R-GEN-02 R-PROGRESS-04 R-DELIVERY-02: a simple text
// turn: the send is admitted, one model step streams, the response
// completes, and it costs at most 4 synced writes.
func TestSimpleTurn(t *testing.T) {
	f := newFixture(t, `{"replies":[{"text":"Hello there, how can I help?"}]}`, nil)
	before := f.store.appends.Load()
	out := f.push("s1", protocol.Inputs.Text("m1", "Hi"))
	if len(out) != 1 || out[0].ID != "m1" || out[0].Index == 0 {
		t.Fatalf("push returned %+v", out)
	}
	st := f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	if got := lastText(st); got != "Hello there, how can I help?" {
		t.Fatalf("answer %q", got)
	}
	writes := f.store.appends.Load() - before
	t.Logf("a simple text turn took %d synced writes", writes)
	if writes > 4 {
		t.Fatalf("a simple text turn took %d synced writes, want at most 4", writes)
	}
	if n := len(f.model.Calls()); n != 1 {
		t.Fatalf("%d model calls", n)
	}
}
