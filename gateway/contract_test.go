package gateway_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/gateway/gatewaytest"
	"github.com/a2-runtime/a2/protocol"
)

// supportDesk is a contract with one browser event, ticket.flagged, whose
// reducer lists the flagged tickets.
func supportDesk(t *testing.T) *protocol.Contract {
	t.Helper()
	type desk struct {
		Flagged []string `json:"flagged"`
	}
	schema := protocol.SchemaFunc(func(v json.RawMessage) error {
		var p struct {
			TicketID *string `json:"ticketId"`
		}
		if json.Unmarshal(v, &p) != nil || p.TicketID == nil {
			return errors.New("ticketId (a string) is required")
		}
		return nil
	})
	c, err := protocol.AgentContract(protocol.ContractOptions{Name: gatewaytest.Agent,
		Events: map[string]protocol.Schema{"ticket.flagged": schema},
		Reducer: protocol.NewReducer("desk.v1", desk{Flagged: []string{}}, func(d desk, ev protocol.Event) desk {
			if ev.Type == "ticket.flagged" {
				var p struct {
					TicketID string `json:"ticketId"`
				}
				_ = json.Unmarshal(ev.Payload, &p)
				d.Flagged = append(append([]string{}, d.Flagged...), p.TicketID)
			}
			return d
		})})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// R-INPUT-26 R-INPUT-19 R-FETCH-04: browser ingress accepts the output of
// every browser builder and the contract's application events (checked
// against their schema); the state answers the application state merged
// with the AI state; every command gets its receipt.
func TestEveryBuilderAndContractEvents(t *testing.T) {
	n := gatewaytest.Start(t, gatewaytest.Options{Script: `{"default":{"text":"ok"}}`, Agent: func(o *actors.AgentOptions) {
		o.Name, o.Contract = "", supportDesk(t)
	}})
	f := wrapNode(t, n)
	status, b := f.do(http.MethodPost, sessionsPath+"s1/events", events(ev("bad", "ticket.flagged", `{"ticket":1}`)), nil)
	if e := errorBody(t, b); status != http.StatusBadRequest || !strings.Contains(e.Message, "ticketId") {
		t.Fatalf("an event against its schema: %d %s", status, b)
	}
	f.push("s1", protocol.Event{ID: "flag-1", Type: "ticket.flagged", Payload: json.RawMessage(`{"ticketId":"T-1"}`)})

	user := func(id, text string) protocol.UIMessage {
		return protocol.UIMessage{ID: id, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: text}}}
	}
	no := false
	turn := "t-unknown"
	last := int64(0)
	builders := []protocol.Event{
		protocol.Inputs.Message(user("b-send", "first"), protocol.MessageOptions{}),
		protocol.Inputs.Message(user("b-passive", "context"), protocol.MessageOptions{Generate: &no}),
		protocol.Inputs.Seed(user("b-seed", "a user seed")),
		protocol.Inputs.Steer(nil, user("b-steer", "steer"), nil),
		protocol.Inputs.Queue.Edit(user("b-send", "edited")),
		protocol.Inputs.Queue.Move("b-steer", nil),
		protocol.Inputs.Queue.Remove("b-passive"),
		protocol.Inputs.Queue.SendNow("b-steer", nil, nil),
		protocol.Inputs.Stop(turn, &last),
		protocol.Inputs.Pause(protocol.PauseNow),
		protocol.Inputs.Resume(),
		protocol.Inputs.Approval(protocol.ApprovalResponse{ApprovalID: "ap1", Approved: true, RequestID: "r1", GenerationID: "g1"}),
		protocol.Inputs.Input(protocol.InputResponse{InputID: "i1", Value: []byte(`"prod"`), RequestID: "r1", GenerationID: "g1"}),
		protocol.Inputs.Retry(protocol.RetryOptions{MessageID: "b-send", ResponseMessageID: "r1", RetryID: "x1"}),
		protocol.Inputs.Interrupt(protocol.InterruptOptions{MessageID: "r1", RequestID: "r1"}),
	}
	for i := range builders {
		if builders[i].ID == "" {
			builders[i].ID = fmt.Sprintf("b-%d", i)
		}
	}
	out := f.push("s1", builders...)
	if len(out) != len(builders) {
		t.Fatalf("%d events persisted of %d", len(out), len(builders))
	}
	st, _ := f.waitState("s1", "every receipt", func(s *protocol.AIState) bool { return len(s.PendingQueueCommands) == 0 && idle(s) })
	decided := map[string]bool{}
	for _, e := range f.history("s1") {
		if e.Type == protocol.TypeControlDecided {
			var d protocol.Decided
			if err := json.Unmarshal(e.Payload, &d); err != nil {
				t.Fatal(err)
			}
			decided[d.CommandID] = true
		}
	}
	for _, e := range builders {
		if !decided[e.ID] {
			t.Fatalf("no receipt for %s", e.ID)
		}
	}
	if len(st.Messages) == 0 {
		t.Fatal("no transcript")
	}
	status, b = f.do(http.MethodGet, sessionsPath+"s1/state", "", nil)
	var raw struct {
		State struct {
			Flagged  []string        `json:"flagged"`
			Messages json.RawMessage `json:"messages"`
		} `json:"state"`
	}
	if err := json.Unmarshal(b, &raw); status != http.StatusOK || err != nil || len(raw.State.Flagged) != 1 || raw.State.Flagged[0] != "T-1" || len(raw.State.Messages) < 3 {
		t.Fatalf("state: %d %s", status, b)
	}
}
