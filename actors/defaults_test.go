package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/a2-runtime/a2/protocol"
)

// The runtime's option defaults are the documented ones, and explicit
// values are kept (mutants runtime.go:63, 67 of the session-9 run).
func TestRuntimeOptionDefaults(t *testing.T) {
	d := Options{}.withDefaults()
	if d.SnapshotEvery != 1000 || d.SnapshotBytes != 4<<20 || d.PassivateAfter != 2*time.Minute || d.RequestTimeout != 30*time.Second {
		t.Fatalf("defaults %+v", d)
	}
	set := Options{SnapshotEvery: 5, SnapshotBytes: 7, PassivateAfter: time.Second, RequestTimeout: 3 * time.Second}.withDefaults()
	if set.SnapshotEvery != 5 || set.SnapshotBytes != 7 || set.PassivateAfter != time.Second || set.RequestTimeout != 3*time.Second {
		t.Fatalf("explicit options were not kept: %+v", set)
	}
}

// An application handler's retries wait 100 ms after the first failure,
// doubling up to 30 s (docs/protocol.md §3.17; mutants handlers.go:60, 61).
func TestHandlerBackoffIsTheDocumentedOne(t *testing.T) {
	if handlerBackoff != 100*time.Millisecond || handlerMaxBackoff != 30*time.Second {
		t.Fatalf("handler backoff %v up to %v, want 100ms up to 30s", handlerBackoff, handlerMaxBackoff)
	}
}

// StateJSON, what a member answers another node with, is the state's JSON:
// the initial state with the session's ID for a session nobody wrote to,
// the folded state at its index for one that was (mutants runtime.go:414).
func TestStateJSON(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, nil)
	ctx := context.Background()
	b, index, err := f.rt.StateJSON(ctx, "assistant", "nobody")
	if err != nil || index != 0 {
		t.Fatalf("an unwritten session: index %d, %v", index, err)
	}
	var empty struct {
		Session protocol.SessionInfo `json:"session"`
		Status  string               `json:"status"`
	}
	if err := json.Unmarshal(b, &empty); err != nil || empty.Session.ID != "nobody" || empty.Status != protocol.StatusIdle {
		t.Fatalf("an unwritten session's state %s (%v)", b, err)
	}
	f.push("s1", protocol.Inputs.Text("m1", "hi"))
	f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	b, index, err = f.rt.StateJSON(ctx, "assistant", "s1")
	st, sindex, serr := f.rt.State(ctx, "assistant", "s1")
	if err != nil || serr != nil || index == 0 || index != sindex {
		t.Fatalf("StateJSON at %d (%v), State at %d (%v)", index, err, sindex, serr)
	}
	want, _ := st.MarshalJSON()
	if string(b) != string(want) {
		t.Fatalf("StateJSON differs from State:\n%s\n%s", b, want)
	}
	if _, _, err := f.rt.StateJSON(ctx, "nope", "s1"); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("StateJSON of an unknown agent: %v", err)
	}
}

// A pushed event may name its session, and only that one (mutant
// runtime.go:360).
func TestPushedEventsNameTheirSession(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, nil)
	ctx := context.Background()
	own := protocol.Inputs.Text("m1", "hi")
	own.Session = "s1"
	if _, err := f.rt.Push(ctx, "assistant", "s1", []protocol.Event{own}, false); err != nil {
		t.Fatalf("an event naming its own session was refused: %v", err)
	}
	other := protocol.Inputs.Text("m2", "hi")
	other.Session = "s2"
	_, err := f.rt.Push(ctx, "assistant", "s1", []protocol.Event{other}, false)
	var ve *protocol.ValidationError
	if !errors.As(err, &ve) || ve.Field != "events[0].session" {
		t.Fatalf("an event naming another session: %v, want a validation error on events[0].session", err)
	}
}

// lastIndexFailing fails LastIndex, as a store that cannot be read does.
type lastIndexFailing struct{ *countingStore }

func (s lastIndexFailing) LastIndex(context.Context, string) (uint64, error) {
	return 0, fmt.Errorf("injected: the disk is gone")
}

// A store that cannot say where a session's log ends makes the state read
// unavailable, not an empty session (mutant runtime.go:434).
func TestStateOfAnUnreadableStoreIsUnavailable(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, nil)
	f.recovered()
	f.rt.store = lastIndexFailing{f.store}
	if _, _, err := f.rt.State(context.Background(), "assistant", "s1"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("the state of a session on an unreadable store: %v, want ErrUnavailable", err)
	}
}

// A session's claim: the first agent's stands, a second agent is told the
// session is owned (not the store's raw conflict), and the first may claim
// it again (mutant owner.go:79).
func TestClaimSession(t *testing.T) {
	f := newFixture(t, `{}`, nil)
	ctx := context.Background()
	if err := claimSession(ctx, f.store, "support", "c1"); err != nil {
		t.Fatalf("the first claim: %v", err)
	}
	err := claimSession(ctx, f.store, "sales", "c1")
	if !errors.Is(err, ErrSessionOwned) {
		t.Fatalf("another agent's claim: %v, want ErrSessionOwned", err)
	}
	if err := claimSession(ctx, f.store, "support", "c1"); err != nil && errors.Is(err, ErrSessionOwned) {
		t.Fatalf("the owner's second claim: %v", err)
	}
}

// A session snapshots after SnapshotBytes bytes of payloads even when
// SnapshotEvery is far off (mutant session.go:773).
func TestSnapshotAfterSnapshotBytes(t *testing.T) {
	snapshotted := func(opts Options) bool {
		t.Helper()
		f := newFixtureWith(t, `{"default":{"text":"an answer long enough to carry a few hundred bytes of payload in its progress events, word after word after word"}}`, opts)
		f.push("s1", protocol.Inputs.Text("m1", "hi"))
		f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
		// The snapshot is saved off the actor's goroutine: wait for it
		// (bounded).
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, found, err := f.store.LoadSnapshot(context.Background(), "s1", f.agent.contract.ReducerName())
			if err != nil {
				t.Fatal(err)
			}
			if found || time.Now().After(deadline) {
				return found
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if !snapshotted(Options{SnapshotEvery: 1 << 20, SnapshotBytes: 200}) {
		t.Fatal("no snapshot after more than SnapshotBytes of payloads")
	}
}
