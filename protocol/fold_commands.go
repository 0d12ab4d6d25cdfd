// The fold of commands, their receipts and what they change (the inbox, Pause now, approvals) (Fold, fold.go).

package protocol

import (
	"fmt"
	"slices"
)

// foldCommand records a command until its decision (OQ-04). The payload was
// validated at ingress; a command that no longer decodes is kept with an
// empty action and decided as rejected.
func (s *AIState) foldCommand(ev Event) error {
	c, err := ParseCommand(ev.Payload)
	if err != nil {
		c = Command{}
	}
	s.PendingQueueCommands = append(s.PendingQueueCommands, PendingCommand{ID: ev.ID, Command: c})
	return nil
}

func (s *AIState) pendingCommand(id string) (int, *PendingCommand) {
	for i := range s.PendingQueueCommands {
		if s.PendingQueueCommands[i].ID == id {
			return i, &s.PendingQueueCommands[i]
		}
	}
	return -1, nil
}

// receiptCounts reports whether a command's decision becomes state.receipt:
// every user command, not the server-only actions nor trusted non-user seeds
// (OQ-04).
func receiptCounts(c *Command) bool {
	switch c.Action {
	case ActionRequestInput, ActionToolResult:
		return false
	case ActionSend, ActionEdit:
		return c.Message == nil || c.Message.Role == RoleUser
	}
	return true
}

func (s *AIState) foldDecided(ev Event) error {
	var d Decided
	if err := decodePayload(ev, &d); err != nil {
		return err
	}
	i, pc := s.pendingCommand(d.CommandID)
	if pc == nil {
		return fmt.Errorf("decision for command %q, which is not awaiting a decision", d.CommandID)
	}
	cmd := pc.Command
	s.PendingQueueCommands = slices.Delete(s.PendingQueueCommands, i, i+1)
	if receiptCounts(&cmd) {
		r := d
		s.Receipt = &r
	}
	if d.Outcome == OutcomeApplied {
		s.applyCommand(d.CommandID, &cmd)
	}
	return nil
}

// applyCommand applies an accepted command's effect on the inbox, the turn
// and pending requests. Effects that are events of their own (admission,
// interruptions, generation requests) are folded from those events.
func (s *AIState) applyCommand(id string, c *Command) {
	switch c.Action {
	case ActionSend:
		it := InboxItem{ID: c.Message.ID, Role: c.Message.Role, Message: *c.Message, Generate: c.generate(), CommandID: id}
		s.Inbox.Items = append(s.Inbox.Items, it)
	case ActionSteer:
		it := InboxItem{ID: c.Message.ID, Role: c.Message.Role, Message: *c.Message, Generate: true, CommandID: id}
		if c.TurnID != nil {
			it.AfterStepOf = *c.TurnID
		}
		s.Inbox.Items = slices.Insert(s.Inbox.Items, s.steeringPosition(it.AfterStepOf), it)
	case ActionEdit:
		if k := s.inboxIndex(c.Message.ID); k >= 0 {
			s.Inbox.Items[k].Message = *c.Message
			s.Inbox.Items[k].EditID = id
		}
	case ActionMove:
		k := s.inboxIndex(c.InputID)
		if k < 0 {
			return
		}
		it := s.Inbox.Items[k]
		if c.BeforeID != nil && *c.BeforeID == it.ID {
			return
		}
		s.Inbox.Items = slices.Delete(s.Inbox.Items, k, k+1)
		at := len(s.Inbox.Items)
		if c.BeforeID != nil && *c.BeforeID != "" {
			if b := s.inboxIndex(*c.BeforeID); b >= 0 {
				at = b
			}
		}
		s.Inbox.Items = slices.Insert(s.Inbox.Items, at, it)
	case ActionRemove:
		if k := s.inboxIndex(c.InputID); k >= 0 {
			s.Inbox.Items = slices.Delete(s.Inbox.Items, k, k+1)
		}
	case ActionSendNow:
		k := s.inboxIndex(c.InputID)
		if k < 0 {
			return
		}
		it := s.Inbox.Items[k]
		s.Inbox.Items = slices.Delete(s.Inbox.Items, k, k+1)
		it.Generate = true
		it.AfterStepOf = ""
		if c.TurnID != nil {
			it.AfterStepOf = *c.TurnID
		}
		s.Inbox.Items = slices.Insert(s.Inbox.Items, s.steeringPosition(it.AfterStepOf), it)
	case ActionPause:
		s.Inbox.Paused = true
		if c.When == PauseNow && s.Active != nil && s.Active.Phase == PhaseRunning {
			s.pauseNow()
		}
	case ActionResume:
		s.Inbox.Paused = false
		if a := s.Active; a != nil && a.Phase != PhaseRunning {
			a.Phase = PhaseRunning
			if len(s.Inbox.Items) > 0 && s.Inbox.Items[0].AfterStepOf == a.TurnID {
				a.Yield = true
			}
		}
	case ActionApproval:
		s.applyApproval(c)
	case ActionInput:
		delete(s.PendingInputs, c.InputID)
		// A final step (no tool calls) that closed while the input was
		// pending held the turn open for the answer; the last answer ends it.
		if g := s.ActiveGeneration; s.Active != nil && g != nil && g.State == GenCompleted &&
			g.GenerationID == s.Active.LastStep && !s.stepHasToolCalls(g.GenerationID) && !s.inputsPendingFor(g.GenerationID) {
			s.endTurn()
		}
	case ActionRequestInput:
		s.PendingInputs[c.InputID] = PendingInput{Request: c.Request, RequestID: c.RequestID, GenerationID: c.GenerationID}
	case ActionToolResult:
		if t, ok := s.Tools[c.ToolCallID]; ok {
			s.foldToolOutcome(c.ToolCallID, c.GenerationID, t.Version, c.Output, c.ErrorText)
		}
	}
}

// steeringPosition is where steering for turn `target` enters the queue:
// right after the queue's earlier steering for that turn, or first when there
// is none (R-STEER-01, R-INBOX-11). Steering that observed no turn (target
// "") goes after the whole front run of steering items (OQ-10d).
func (s *AIState) steeringPosition(target string) int {
	pos := 0
	for i, it := range s.Inbox.Items {
		if target != "" && it.AfterStepOf == target {
			pos = i + 1
		}
	}
	if target == "" {
		for pos < len(s.Inbox.Items) && s.Inbox.Items[pos].AfterStepOf != "" {
			pos++
		}
	}
	return pos
}

// pauseNow cancels the active turn's running work (R-PAUSE-02): a streaming
// generation is fenced at once (its partial step is dropped; Resume starts a
// fresh request, R-PAUSE-07) and running tool executions are fenced by a new
// execution version (OQ-23). Each cancelled owner is listed in Settling
// until it reports that it stopped; the phase is pausing until then, and
// paused after (R-PAUSE-03).
func (s *AIState) pauseNow() {
	a := s.Active
	a.Version++
	if g := s.ActiveGeneration; g != nil && g.State == "streaming" {
		// A compaction that was running is interrupted, not removed
		// (R-COMPACT-31, OQ-28): the attempt is cancelled, not superseded
		// by another worker.
		s.interruptCompaction(g.GenerationID)
		s.dropAttempt(g.GenerationID)
		a.Settling = append(a.Settling, g.GenerationID)
	}
	if s.ActiveRequestID != "" {
		// Resume starts a fresh request (R-PAUSE-07): this one is over.
		s.TerminalRequestIDs = setTrue(s.TerminalRequestIDs, s.ActiveRequestID)
		s.ActiveRequestID, s.ActiveRequestReason, s.ActiveRequestSourceGenerationID = "", "", ""
	}
	for _, id := range sortedKeys(s.Tools) {
		t := s.Tools[id]
		if t.ResponseID != a.ResponseMessageID || toolTerminal(t.Status) {
			continue
		}
		if t.Status == ToolStatusRunning {
			a.Settling = append(a.Settling, "tool:"+id)
		}
		if t.Status == ToolStatusRunning || t.Status == ToolStatusRequested {
			t.Status = ToolStatusPending
		}
		t.Version = a.Version // outcomes of the cancelled version are fenced
		s.putTool(id, t)
	}
	a.Phase = PhasePaused
	if len(a.Settling) > 0 {
		a.Phase = PhasePausing
	}
}

// settle removes an owner from the turn's Settling list.
func (s *AIState) settle(owner string) {
	a := s.Active
	if a == nil {
		return
	}
	if k := slices.Index(a.Settling, owner); k >= 0 {
		a.Settling = slices.Delete(a.Settling, k, k+1)
		if len(a.Settling) == 0 {
			a.Settling = nil
			if a.Phase == PhasePausing {
				a.Phase = PhasePaused
			}
		}
	}
}

func (s *AIState) applyApproval(c *Command) {
	pa, ok := s.PendingApprovals[c.ApprovalID]
	if !ok {
		return
	}
	delete(s.PendingApprovals, c.ApprovalID)
	msg, k := s.toolPart(pa.ToolCallID)
	if msg == nil {
		return
	}
	part := &msg.Parts[k]
	approved := *c.Approved
	part.Approval = &ToolApproval{ID: c.ApprovalID, Approved: &approved, Reason: c.Reason}
	t := s.Tools[pa.ToolCallID]
	if approved {
		part.State = ToolApprovalResponded
		t.Status = ToolStatusPending
	} else {
		part.State = ToolOutputDenied
		t.Status = ToolStatusDenied
	}
	s.putTool(pa.ToolCallID, t)
}
