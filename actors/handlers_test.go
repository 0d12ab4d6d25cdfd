package actors

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/protocol"
)

// handlerLog records the calls of an application handler.
type handlerLog struct {
	mu    sync.Mutex
	calls []protocol.Event
}

func (h *handlerLog) add(ev protocol.Event) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, ev)
	return len(h.calls)
}

func (h *handlerLog) all() []protocol.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]protocol.Event(nil), h.calls...)
}

// handlerFixture is an agent whose contract has the application event
// ticket.flagged, handled by handle.
func handlerFixture(t *testing.T, handle Handler) *fixture {
	t.Helper()
	old := handlerBackoff
	handlerBackoff = time.Millisecond
	t.Cleanup(func() { handlerBackoff = old })
	return newFixture(t, `{"default":{"text":"ok"}}`, func(a *AgentOptions) {
		a.Events = map[string]protocol.Schema{"ticket.flagged": nil, "note.added": nil}
		a.Handlers = map[string]Handler{"ticket.flagged": handle}
	})
}

func (f *fixture) flag(session, id string) {
	f.t.Helper()
	ev := protocol.Event{ID: id, Type: "ticket.flagged", Payload: json.RawMessage(`{"ticketId":"T-7"}`)}
	if _, err := f.rt.Push(context.Background(), "assistant", session, []protocol.Event{ev}, true); err != nil {
		f.t.Fatal(err)
	}
}

// handled waits until the session owes no handler run, and returns the
// completions in its log.
func (f *fixture) handled(session string) []protocol.Event {
	f.t.Helper()
	f.waitFor(session, "handlers done", func(s *protocol.AIState) bool { return len(s.PendingHandlers) == 0 })
	log, err := f.store.Read(context.Background(), session, 0, 1<<20)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []protocol.Event
	for _, ev := range log {
		if ev.Type == protocol.TypeHandlerCompleted {
			out = append(out, ev)
		}
	}
	return out
}

// R-CONTRACT-15 R-LOG-18: an application handler runs for each event of
// its type, receives the event, and runs again after a failure (or a
// panic) with the same event ID, its idempotency key, until it succeeds;
// its completion is written once. Events of other types run nothing.
func TestApplicationHandlers(t *testing.T) {
	var log handlerLog
	f := handlerFixture(t, func(ctx context.Context, ev protocol.Event) error {
		switch log.add(ev) {
		case 1:
			return errors.New("on-call paging is down")
		case 2:
			panic("a bug in the handler")
		}
		return nil
	})
	f.flag("s1", "flag-1")
	if _, err := f.rt.Push(context.Background(), "assistant", "s1", []protocol.Event{{ID: "note-1", Type: "note.added", Payload: json.RawMessage(`{}`)}}, true); err != nil {
		t.Fatal(err)
	}
	done := f.handled("s1")
	calls := log.all()
	if len(calls) != 3 {
		t.Fatalf("the handler ran %d times, want a failure, a panic and a success", len(calls))
	}
	for _, c := range calls {
		if c.ID != "flag-1" || c.Type != "ticket.flagged" || string(c.Payload) != `{"ticketId":"T-7"}` || c.Index == 0 {
			t.Fatalf("the handler received %+v, want the stored event", c)
		}
	}
	if len(done) != 1 || done[0].Cause != "flag-1" {
		t.Fatalf("completions %+v, want one caused by flag-1", done)
	}
	// The completion is A2's own: no client or server may push it.
	if _, err := f.rt.Push(context.Background(), "assistant", "s1", []protocol.Event{{ID: "fake", Type: protocol.TypeHandlerCompleted,
		Payload: json.RawMessage(`{"eventId":"flag-2"}`)}}, true); err == nil {
		t.Fatal("a pushed ai.handler.completed was accepted")
	}
}

// R-CONTRACT-15 R-DELIVERY-01: a handler that is running when its process
// stops runs again when the session is next activated from the store, with
// the same event; a completed one does not.
func TestHandlerRunsAgainAfterRestart(t *testing.T) {
	var log handlerLog
	started := make(chan struct{}, 4)
	handle := func(ctx context.Context, ev protocol.Event) error {
		n := log.add(ev)
		started <- struct{}{}
		if ev.ID == "flag-slow" && n <= 2 { // the first run of flag-slow never finishes
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	f := handlerFixture(t, handle)
	f.flag("s1", "flag-quick")
	f.handled("s1")
	receive(t, started, "flag-quick's run")
	f.flag("s1", "flag-slow")
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not start")
	}
	f.close()
	f.open(func(a *AgentOptions) {
		a.Events = map[string]protocol.Schema{"ticket.flagged": nil, "note.added": nil}
		a.Handlers = map[string]Handler{"ticket.flagged": handle}
	})
	done := f.handled("s1") // reading the state activates the session
	var ids []string
	for _, c := range log.all() {
		ids = append(ids, c.ID)
	}
	if len(ids) != 3 || ids[0] != "flag-quick" || ids[1] != "flag-slow" || ids[2] != "flag-slow" {
		t.Fatalf("handler runs %v, want flag-quick once and flag-slow again after the restart", ids)
	}
	if len(done) != 2 {
		t.Fatalf("%d completions, want one per event", len(done))
	}
}

// R-CONTRACT-15 R-DELIVERY-01: a handler that fails every attempt rests
// after handlerAttempts of them. Resting, it no longer holds its session
// in memory (the session passivates); after the rest the runtime wakes the
// session, activating it, and the handler runs again, until it succeeds:
// its completion is written once.
func TestFailingHandlerRestsAndRunsAgain(t *testing.T) {
	oldAttempts, oldRest := handlerAttempts, handlerRest
	handlerAttempts, handlerRest = 3, 2*time.Second
	t.Cleanup(func() { handlerAttempts, handlerRest = oldAttempts, oldRest })
	var log handlerLog
	var succeed atomic.Bool
	f := handlerFixture(t, func(ctx context.Context, ev protocol.Event) error {
		log.add(ev)
		if succeed.Load() {
			return nil
		}
		return errors.New("the ticketing service is down")
	})
	f.flag("s1", "flag-1")
	deadline := time.Now().Add(10 * time.Second)
	for len(log.all()) < handlerAttempts {
		if time.Now().After(deadline) {
			t.Fatalf("the handler ran %d times in 10 s, want %d failing attempts", len(log.all()), handlerAttempts)
		}
		time.Sleep(time.Millisecond)
	}
	// Resting: the session is idle, and passivates when asked.
	for f.rt.active(f.agent, "s1") {
		if time.Now().After(deadline) {
			t.Fatal("a session whose only work is a resting handler did not passivate")
		}
		f.rt.PassivateIdle()
		time.Sleep(5 * time.Millisecond)
	}
	if n := len(log.all()); n != handlerAttempts {
		t.Fatalf("the handler ran %d times before its rest, want %d", n, handlerAttempts)
	}
	succeed.Store(true)
	// After the rest the runtime activates the session by itself (the test
	// reads only the store, which activates nothing), and the handler
	// succeeds.
	var completions []protocol.Event
	for deadline = time.Now().Add(20 * time.Second); len(completions) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no completion 20 s after the handler's rest began; it ran %d times", len(log.all()))
		}
		evs, err := f.store.Read(context.Background(), "s1", 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		completions = completions[:0]
		for _, ev := range evs {
			if ev.Type == protocol.TypeHandlerCompleted {
				completions = append(completions, ev)
			}
		}
	}
	if n := len(log.all()); n != handlerAttempts+1 || len(completions) != 1 || completions[0].Cause != "flag-1" {
		t.Fatalf("the handler ran %d times and %d completions were written, want %d runs and one completion of flag-1",
			n, len(completions), handlerAttempts+1)
	}
	// The success ends the session's run of rests: a later failure rests
	// the shortest time again.
	f.rt.mu.Lock()
	rests, counted := f.rt.handlerRests[key("assistant", "s1")]
	f.rt.mu.Unlock()
	if counted {
		t.Errorf("after the handler succeeded, the session still counts %d rests", rests)
	}
}

// The rests of a session's failing handlers double, from 5 minutes, up to
// an hour.
func TestHandlerRestsDouble(t *testing.T) {
	for n, want := range []time.Duration{5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 40 * time.Minute, time.Hour, time.Hour} {
		if got := handlerRestAfter(n); got != want {
			t.Errorf("rest after %d rests: %v, want %v", n, got, want)
		}
	}
	if got := handlerRestAfter(1000); got != time.Hour {
		t.Errorf("rest after 1000 rests: %v, want an hour", got)
	}
}

// A session that stops (here released, as a node does when another takes
// it) cancels its running handlers with the reason, errSessionStopped,
// not a bare context.Canceled that a handler cannot tell from its own
// caller's cancel (mutant session.go:251 passed a nil cause).
func TestAStoppingSessionCancelsItsHandlersWithTheReason(t *testing.T) {
	cause := make(chan error, 1)
	started := make(chan struct{}, 1)
	f := handlerFixture(t, func(ctx context.Context, _ protocol.Event) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done()
		select {
		case cause <- context.Cause(ctx):
		default:
		}
		return ctx.Err()
	})
	f.flag("s1", "f1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the handler did not start within 10 s")
	}
	if err := f.rt.Release(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, errSessionStopped) {
			t.Fatalf("the handler was cancelled with %v, want errSessionStopped", err)
		}
	case <-ctx.Done():
		t.Fatal("the handler was not cancelled within 10 s of the release")
	}
}
