package actors

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/a2-runtime/a2/protocol"
)

// The simulated schedules' clients (simulate_test.go): a client edits,
// moves, removes or sends now one of the inputs queued in the session's
// inbox, as it last saw it, stops a turn at a seen index that may be
// anywhere in the response, past it, or absent, and retries; at the end
// every push must have its answer.

// queueCommand builds the queue command op (0 edit, 1 move, 2 remove,
// 3 send now) for a random queued input; the zero event when the inbox is
// empty. id names an edit's new content.
func (sm *simulation) queueCommand(op int, id string) protocol.Event {
	st, _ := sm.frontier()
	if st == nil || len(st.Inbox.Items) == 0 {
		return protocol.Event{}
	}
	items := st.Inbox.Items
	item := items[sm.r.IntN(len(items))]
	switch op {
	case 0:
		sm.logf("edit %s", item.ID)
		return protocol.Inputs.Queue.Edit(protocol.UIMessage{ID: item.ID, Role: item.Role,
			Parts: []protocol.Part{{Type: protocol.PartText, Text: "edited as " + id}}})
	case 1:
		var before *string
		if n := sm.r.IntN(len(items) + 1); n < len(items) {
			before = &items[n].ID
		}
		sm.logf("move %s before %v", item.ID, before)
		return protocol.Inputs.Queue.Move(item.ID, before)
	case 2:
		sm.logf("remove %s", item.ID)
		return protocol.Inputs.Queue.Remove(item.ID)
	default:
		var turn *string
		if st.Active != nil {
			turn = &st.Active.TurnID
		}
		sm.logf("send now %s", item.ID)
		return protocol.Inputs.Queue.SendNow(item.ID, turn, sm.seenIndex())
	}
}

// seenIndex is a random last seen index of the active generation's
// projection (R-STATE-21): none (the client saw everything), or anything
// from -1 (nothing seen) to a little past the entries there are.
func (sm *simulation) seenIndex() *int64 {
	if sm.r.IntN(3) == 0 {
		return nil
	}
	n := int64(0)
	if st, _ := sm.frontier(); st != nil && st.ActiveProjection != nil {
		n = int64(st.ActiveProjection.Base + len(st.ActiveProjection.Entries))
	}
	i := sm.r.Int64N(n+3) - 1
	return &i
}

// applied lists the commands of a log its decisions applied, in order.
func applied(log []protocol.Event) []protocol.Command {
	commands := map[string]protocol.Command{}
	var out []protocol.Command
	for _, ev := range log {
		switch ev.Type {
		case protocol.TypeControlRequested:
			var c protocol.Command
			if json.Unmarshal(ev.Payload, &c) == nil {
				commands[ev.ID] = c
			}
		case protocol.TypeControlDecided:
			var d protocol.Decided
			if json.Unmarshal(ev.Payload, &d) != nil || d.Outcome != protocol.OutcomeApplied {
				continue
			}
			if c, ok := commands[d.CommandID]; ok {
				out = append(out, c)
			}
		}
	}
	return out
}

// appliedCommands counts the commands of a log its decisions applied, by
// action (a schedule's summary: which of the clients' commands took effect).
func appliedCommands(log []protocol.Event) map[string]int {
	counts := map[string]int{}
	for _, c := range applied(log) {
		counts[c.Action]++
	}
	return counts
}

// retry builds a retry of the last response (the user message before it
// and its ID) with a new retry ID; the zero event when the session has no
// response yet.
func (sm *simulation) retry(retryID string) protocol.Event {
	st, _ := sm.frontier()
	if st == nil || len(st.Messages) < 2 {
		return protocol.Event{}
	}
	resp := st.Messages[len(st.Messages)-1]
	user := ""
	for i := len(st.Messages) - 2; i >= 0; i-- {
		if st.Messages[i].Role == protocol.RoleUser {
			user = st.Messages[i].ID
			break
		}
	}
	sm.logf("retry %s after %s (status %s)", resp.ID, user, st.Status)
	return protocol.Inputs.Retry(protocol.RetryOptions{MessageID: user, ResponseMessageID: resp.ID, RetryID: retryID})
}

// allAnswered waits (bounded) for every push's answer, acknowledging the
// writes that still come: a push the runtime sends again to a new
// activation (after a failed write) can arrive after the drain settled.
func (sm *simulation) allAnswered() error {
	deadline := time.Now().Add(transcriptWait)
	for _, p := range sm.pushes {
		for p.done == nil {
			select {
			case r := <-p.result:
				p.done = &r
			case <-time.After(5 * time.Millisecond):
				for sm.tr.store.ack() == nil {
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("push %s was never answered", p.ev.ID)
				}
			}
		}
	}
	for sm.tr.store.ack() == nil {
	}
	sm.settle()
	return sm.check()
}
