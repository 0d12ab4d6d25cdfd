package actors

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
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
