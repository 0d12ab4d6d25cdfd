package protocol

import (
	"encoding/json"
	"strings"
	"testing"
)

// R-CONTRACT-15 R-CONTRACT-14: a contract built WithHandlers records each
// event of a handled type as handler work until ai.handler.completed names
// it; the work survives a snapshot round trip and a clone, is listed by
// Pending (even once the session closed), and events of other types owe
// nothing. Handler types are checked, and the completion cannot be pushed.
func TestHandlerWork(t *testing.T) {
	base, err := AgentContract(ContractOptions{Name: "desk", Events: map[string]Schema{"ticket.flagged": nil, "note.added": nil}})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{{"ai.message.created"}, {"ticket.unknown"}} {
		if _, err := base.WithHandlers(bad); err == nil || !strings.Contains(err.Error(), "handlers") {
			t.Errorf("WithHandlers(%v): %v, want a handlers error", bad, err)
		}
	}
	c, err := base.WithHandlers([]string{"ticket.flagged"})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := AgentContract(ContractOptions{Name: "desk", Events: map[string]Schema{"ticket.flagged": nil}})
	if !c.Is(base) || !base.Is(c) || !c.Is(c) || c.Is(other) || other.Is(base) || c.Is(nil) {
		t.Fatal("a contract with handlers must be the same definition as the one it copies, and only that one")
	}
	st := c.NewState()
	fold := func(evs ...Event) {
		t.Helper()
		for _, ev := range evs {
			ev.Session = "s1"
			if err := c.Fold(st, ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	fold(Event{ID: "f1", Type: "ticket.flagged", Payload: json.RawMessage(`{}`)},
		Event{ID: "n1", Type: "note.added", Payload: json.RawMessage(`{}`)},
		Event{ID: "f2", Type: "ticket.flagged", Payload: json.RawMessage(`{}`)})
	work := func(s *AIState) []string {
		var ids []string
		for _, w := range Pending(WorkPolicy{}, s) {
			if w.Kind == WorkHandler {
				ids = append(ids, w.EventID+":"+w.EventType)
			}
		}
		return ids
	}
	if got := strings.Join(work(st.AI), " "); got != "f1:ticket.flagged f2:ticket.flagged" {
		t.Fatalf("handler work %q", got)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	restored, err := c.UnmarshalState(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(work(restored.AI), " "); got != "f1:ticket.flagged f2:ticket.flagged" {
		t.Fatalf("handler work after a snapshot %q", got)
	}
	clone := st.AI.Clone()
	fold(Event{ID: "h1", Type: TypeHandlerCompleted, Payload: mustJSON(HandlerCompleted{EventID: "f1"})})
	if got := strings.Join(work(st.AI), " "); got != "f2:ticket.flagged" {
		t.Fatalf("handler work after f1 completed %q", got)
	}
	if len(clone.PendingHandlers) != 2 {
		t.Fatalf("the completion changed a clone: %v", clone.PendingHandlers)
	}
	fold(Event{ID: "close", Type: TypeSessionClosed, Payload: json.RawMessage(`{}`)})
	if got := strings.Join(work(st.AI), " "); got != "f2:ticket.flagged" {
		t.Fatalf("handler work of a closed session %q, want the event appended before closing", got)
	}
	// A contract without handlers owes nothing for the same events.
	plain := base.NewState()
	if err := base.Fold(plain, Event{ID: "f1", Type: "ticket.flagged", Payload: json.RawMessage(`{}`), Session: "s1"}); err != nil {
		t.Fatal(err)
	}
	if len(plain.AI.PendingHandlers) != 0 {
		t.Fatalf("a contract without handlers recorded %v", plain.AI.PendingHandlers)
	}
	for _, trust := range []Trust{Untrusted, Trusted} {
		err := c.ValidateIngress(Event{ID: "x", Type: TypeHandlerCompleted, Payload: mustJSON(HandlerCompleted{EventID: "f2"})}, trust)
		if err == nil {
			t.Fatalf("ai.handler.completed was accepted at ingress (trust %v)", trust)
		}
	}
}
