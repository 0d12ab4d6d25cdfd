package protocol

import (
	"encoding/json"
	"fmt"
)

// checkState checks the structural invariants that hold for every log:
//   - exactly one receipt per decided command, and every undecided command
//     is in pendingQueueCommands;
//   - every input sent by an applied send or steer is exactly one of
//     pending (in the inbox), admitted (in messages) or removed;
//   - message and inbox IDs are unique, and no input is both pending and
//     admitted;
//   - an active turn's input is an admitted message.
func checkState(log []Event, s *AIState) error {
	commands := map[string]Command{}
	receipts := map[string]int{}
	applied := map[string]bool{}
	for _, ev := range log {
		switch ev.Type {
		case TypeControlRequested:
			c, _ := ParseCommand(ev.Payload)
			commands[ev.ID] = c
		case TypeControlDecided:
			var d Decided
			if err := json.Unmarshal(ev.Payload, &d); err != nil {
				return err
			}
			receipts[d.CommandID]++
			if d.Outcome == OutcomeApplied {
				applied[d.CommandID] = true
			}
		}
	}
	pending := map[string]bool{}
	for _, pc := range s.PendingQueueCommands {
		pending[pc.ID] = true
	}
	for id := range commands {
		switch {
		case receipts[id] > 1:
			return fmt.Errorf("command %q has %d receipts", id, receipts[id])
		case receipts[id] == 0 && !pending[id]:
			return fmt.Errorf("command %q has no receipt and is not pending", id)
		case receipts[id] == 1 && pending[id]:
			return fmt.Errorf("command %q is decided but still pending", id)
		}
	}
	inInbox := map[string]bool{}
	for _, it := range s.Inbox.Items {
		if inInbox[it.ID] {
			return fmt.Errorf("input %q is queued twice", it.ID)
		}
		inInbox[it.ID] = true
	}
	inMessages := map[string]bool{}
	for _, m := range s.Messages {
		if inMessages[m.ID] {
			return fmt.Errorf("message %q appears twice", m.ID)
		}
		inMessages[m.ID] = true
	}
	removed := map[string]bool{}
	for id, c := range commands {
		if applied[id] && c.Action == ActionRemove {
			removed[c.InputID] = true
		}
	}
	for id, c := range commands {
		if !applied[id] || (c.Action != ActionSend && c.Action != ActionSteer) {
			continue
		}
		n := 0
		for _, b := range []bool{inInbox[id], inMessages[id], removed[id]} {
			if b {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("input %q is pending=%v admitted=%v removed=%v", id, inInbox[id], inMessages[id], removed[id])
		}
	}
	if a := s.Active; a != nil && !inMessages[a.Input.ID] {
		return fmt.Errorf("active turn's input %q is not admitted", a.Input.ID)
	}
	return nil
}
