package actors

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

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

// Append waits at the gate before each append, the claim's and the
// batch's one after the other.
func (g *gatedStore) Append(ctx context.Context, session string, expected uint64, events []protocol.Event, opts ...persistence.AppendOption) ([]protocol.Event, error) {
	return persistence.AppendInTurn(ctx, func(ctx context.Context, session string, expected uint64, events []protocol.Event, o persistence.AppendOptions) ([]protocol.Event, error) {
		g.wait()
		return g.countingStore.Append(ctx, session, expected, events, o.Options()...)
	}, session, expected, events, persistence.OptionsOf(opts))
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
