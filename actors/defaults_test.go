package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/persistence"
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

// replay restores the snapshot at an activation (upTo 0) and for a
// boundary read at or after the snapshot, and ignores one taken after the
// boundary (mutants session.go:381, 383 twice).
func TestReplayRestoresTheSnapshotItMay(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, nil)
	f.push("s1", protocol.Inputs.Text("m1", "hi"))
	f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	ctx := context.Background()
	c := f.agent.contract
	st, last, err := f.rt.State(ctx, "assistant", "s1")
	if err != nil {
		t.Fatal(err)
	}
	// A snapshot at the log's end that says something the log does not:
	// whoever restores it shows the marker.
	st.AI.Messages = append(st.AI.Messages, protocol.TranscriptMessage{ID: "from-the-snapshot", Role: protocol.RoleUser,
		Parts: []protocol.Part{{Type: protocol.PartText, Text: "marker"}}})
	b, err := st.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.SaveSnapshot(ctx, persistence.Snapshot{Session: "s1", Reducer: c.ReducerName(), Index: last, State: b}); err != nil {
		t.Fatal(err)
	}
	restored := func(upTo uint64) (bool, uint64) {
		t.Helper()
		got, at, err := replay(ctx, f.store, c, "s1", upTo, func(msg string, err error) { t.Errorf("%s: %v", msg, err) })
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range got.AI.Messages {
			if m.ID == "from-the-snapshot" {
				return true, at
			}
		}
		return false, at
	}
	if ok, at := restored(0); !ok || at != last {
		t.Fatalf("an activation did not restore the snapshot (restored %v, at %d of %d)", ok, at, last)
	}
	if ok, _ := restored(last); !ok {
		t.Fatal("a boundary read at the snapshot's index did not restore it")
	}
	if ok, at := restored(last - 1); ok || at != last-1 {
		t.Fatalf("a boundary read before the snapshot restored it (restored %v, at %d)", ok, at)
	}
}

// A session whose handler succeeded is idle once the completion is
// folded: it passivates like any other (mutant handlers.go:88).
func TestASessionPassivatesAfterItsHandlerSucceeded(t *testing.T) {
	f := handlerFixture(t, func(context.Context, protocol.Event) error { return nil })
	f.flag("h1", "flag-1")
	if done := f.handled("h1"); len(done) != 1 {
		t.Fatalf("%d handler completions, want 1", len(done))
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.rt.IsActive("h1") {
		f.rt.PassivateIdle()
		if time.Now().After(deadline) {
			t.Fatal("the session did not passivate after its handler succeeded")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gatedStore holds its appends while held is set, reporting each one held
// on entered, until gate is closed.
type gatedStore struct {
	*countingStore
	held    atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedStore) wait() {
	if g.held.Load() {
		g.entered <- struct{}{}
		<-g.gate
	}
}

func (g *gatedStore) Append(ctx context.Context, session string, expected uint64, events []protocol.Event) ([]protocol.Event, error) {
	g.wait()
	return g.countingStore.Append(ctx, session, expected, events)
}

func (g *gatedStore) AppendAsync(ctx context.Context, session string, expected uint64, events []protocol.Event, done func([]protocol.Event, error)) {
	go func() {
		g.wait()
		done(g.countingStore.Append(ctx, session, expected, events))
	}()
}

// A push that arrives while another push's batch is being written waits
// for the next batch and is answered once durable; only a push that
// repeats an ID being written is told to retry (mutant session.go:466).
func TestAPushWhileAnotherIsWritten(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, nil)
	f.recovered()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	passive := false
	note := func(id string) protocol.Event {
		return protocol.Inputs.Message(protocol.UIMessage{ID: id, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: id}}},
			protocol.MessageOptions{Generate: &passive})
	}
	g := &gatedStore{countingStore: f.store, entered: make(chan struct{}, 8), gate: make(chan struct{})}
	var release sync.Once
	open := func() { release.Do(func() { g.held.Store(false); close(g.gate) }) }
	t.Cleanup(open)          // registered after the fixture's: runs first, so that its Close does not wait on held writes
	f.rt.store = g           // before the session's activation, which takes its store
	f.push("w1", note("n0")) // the session exists and is claimed
	g.held.Store(true)
	first := make(chan error, 1)
	go func() { _, err := f.rt.Push(ctx, "assistant", "w1", []protocol.Event{note("n1")}, false); first <- err }()
	select {
	case <-g.entered: // n1's batch is being written
	case <-ctx.Done():
		t.Fatal("the first push's write never started")
	}
	second := make(chan error, 1)
	go func() {
		_, err := f.rt.Push(ctx, "assistant", "w1", []protocol.Event{note("n2")}, false)
		second <- err
	}()
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := f.rt.Push(rctx, "assistant", "w1", []protocol.Event{note("n1")}, false)
	rcancel()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a push repeating an ID being written: %v, want ErrUnavailable (retry)", err)
	}
	open()
	for name, ch := range map[string]chan error{"the first push": first, "the push that arrived meanwhile": second} {
		if err := <-ch; err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// heldSession is a fixture whose session w1 exists and whose next writes
// hang until release (which the test's cleanup calls too, before the
// fixture's Close); note makes a message that asks for no turn.
func heldSession(t *testing.T, opts Options) (f *fixture, note func(string) protocol.Event, release func()) {
	f = newFixtureWith(t, `{"default":{"text":"ok"}}`, opts)
	f.recovered()
	passive := false
	note = func(id string) protocol.Event {
		return protocol.Inputs.Message(protocol.UIMessage{ID: id, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: id}}},
			protocol.MessageOptions{Generate: &passive})
	}
	g := &gatedStore{countingStore: f.store, entered: make(chan struct{}, 64), gate: make(chan struct{})}
	var once sync.Once
	release = func() { once.Do(func() { g.held.Store(false); close(g.gate) }) }
	t.Cleanup(release)
	f.rt.store = g // before the session's activation, which takes its store
	f.push("w1", note("n0"))
	g.held.Store(true)
	return f, note, release
}

// pushWithin runs push and answers its error, failing the test if it has
// not returned within 10 s.
func pushWithin(t *testing.T, what string, push func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- push() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s had not returned after 10 s", what)
		return nil
	}
}

// A push to a session that does not answer (its write hangs) ends by the
// caller's deadline when that comes before the request timeout. It did
// not: the future's timer fired a moment before the context's, the next
// attempt had no time left, and a future with a negative timeout has no
// timer, so the push waited for ever (with mutant runtime.go:290, for the
// whole request timeout).
func TestAPushEndsByItsDeadline(t *testing.T) {
	f, note, _ := heldSession(t, Options{RequestTimeout: time.Minute})
	err := pushWithin(t, "a push with a 300 ms deadline", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := f.rt.Push(ctx, "assistant", "w1", []protocol.Event{note("n1")}, false)
		return err
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a push past its deadline: %v, want context.DeadlineExceeded", err)
	}
	// A deadline already past when the push starts: no attempt at all.
	err = pushWithin(t, "a push whose deadline has passed", func() error {
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		_, err := f.rt.Push(ctx, "assistant", "w1", []protocol.Event{note("n2")}, false)
		return err
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a push whose deadline has passed: %v, want context.DeadlineExceeded", err)
	}
}

// A push without a deadline to a session that does not answer within the
// request timeout is told to retry (ErrUnavailable). It used to activate
// the session again after each timeout: a second actor, a second writer,
// beside the one still waiting on its write, which Close never stopped
// (it waited for ever). Once the write goes through, the one actor writes
// both pushes, each once.
func TestAPushToASessionThatDoesNotAnswer(t *testing.T) {
	f, note, release := heldSession(t, Options{RequestTimeout: 150 * time.Millisecond})
	for _, id := range []string{"n1", "n2"} {
		err := pushWithin(t, "a push without a deadline", func() error {
			_, err := f.rt.Push(context.Background(), "assistant", "w1", []protocol.Event{note(id)}, false)
			return err
		})
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("push %s to a session that does not answer: %v, want ErrUnavailable", id, err)
		}
	}
	release()
	st := f.waitFor("w1", "both held pushes written", func(s *protocol.AIState) bool { return len(s.Messages) == 3 })
	for i, want := range []string{"n0", "n1", "n2"} {
		if st.Messages[i].ID != want {
			t.Fatalf("messages %v: want n0, n1, n2, each once", st.Messages)
		}
	}
	// The retried push is an identical resubmission: answered, nothing added.
	f.push("w1", note("n2"))
	if st := f.waitFor("w1", "the session", func(*protocol.AIState) bool { return true }); len(st.Messages) != 3 {
		t.Fatalf("a resubmitted push added a message: %d", len(st.Messages))
	}
	closed := make(chan struct{})
	go func() { f.rt.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close had not returned after 10 s: an actor it does not know of is still running")
	}
}

// A snapshot is due after SnapshotEvery events or SnapshotBytes bytes, and
// only once the payloads since the last one add up to its size (mutants:
// each clause of snapshotDue dropped or inverted).
func TestSnapshotDue(t *testing.T) {
	o := Options{SnapshotEvery: 1000, SnapshotBytes: 4 << 20}
	for _, c := range []struct {
		events, bytes, last int
		want                bool
	}{
		{999, 100, 0, false},                // neither count nor bytes
		{1000, 100, 0, true},                // the count, first snapshot
		{10, 4 << 20, 0, true},              // the bytes
		{1000, 300 << 10, 600 << 10, false}, // the count, but less log than the last snapshot
		{1000, 600 << 10, 600 << 10, true},  // the count and as much log as the last snapshot
		{10, 4 << 20, 5 << 20, false},       // the bytes, but a larger state
		{10, 5 << 20, 5 << 20, true},
	} {
		if got := snapshotDue(o, c.events, c.bytes, c.last); got != c.want {
			t.Errorf("snapshotDue(%d events, %d bytes, last %d) = %v, want %v", c.events, c.bytes, c.last, got, c.want)
		}
	}
}

// AppendPrecededAsync goes through Append, as AppendAsync does.
func (g *gatedStore) AppendPrecededAsync(ctx context.Context, pre persistence.Preceding, session string, expected uint64, events []protocol.Event, _ persistence.AppendOptions, done func([]protocol.Event, error)) {
	appendPreceded(g.Append, ctx, pre, session, expected, events, done)
}
