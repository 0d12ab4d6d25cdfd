// The fold of a turn: its messages, interruptions and cut, and its end (Fold, fold.go).

package protocol

import (
	"encoding/json"
	"fmt"
	"slices"
)

func (s *AIState) foldMessageCreated(ev Event) error {
	var p MessageCreated
	if err := decodePayload(ev, &p); err != nil {
		return err
	}
	k := s.inboxIndex(p.MessageID)
	if k < 0 {
		return fmt.Errorf("input %q was admitted but the command that sent it was not folded before (R-LOG-13)", p.MessageID)
	}
	it := s.Inbox.Items[k]
	s.Inbox.Items = slices.Delete(s.Inbox.Items, k, k+1)
	msg := it.Message
	if msg.Parts == nil {
		msg.Parts = []Part{}
	}
	s.addMessage(msg)
	if p.TurnID != "" {
		s.Active = &Turn{
			TurnID: p.TurnID,
			Input:  TurnInput{ID: it.ID, Role: it.Role, Generate: true},
			Phase:  PhaseRunning,
		}
	}
	return nil
}

// ownerMatches reports whether an interruption names the active response's
// current owner (R-STOP-06..08): the active request (before or after it
// started) or the started generation.
func (s *AIState) ownerMatches(messageID, requestID, generationID string) bool {
	a := s.Active
	if a == nil || a.ResponseMessageID == "" || a.ResponseMessageID != messageID {
		return false
	}
	g := s.ActiveGeneration
	if requestID != "" {
		return requestID == s.ActiveRequestID || (g != nil && g.RequestID == requestID)
	}
	return g != nil && g.GenerationID == generationID
}

// ownerlessHandoff reports whether p is the steering handoff of an active
// turn that has no owner to fence (no request or generation in flight, see
// stepOnce): it names neither, and the turn's response (empty when the turn
// never requested one).
func (s *AIState) ownerlessHandoff(p MessageInterrupted) bool {
	a := s.Active
	if a == nil || p.Reason != ReasonSteeredAfterStep || p.RequestID != "" || p.GenerationID != "" || p.MessageID != a.ResponseMessageID {
		return false
	}
	_, _, owned := s.owner()
	return !owned
}

// foldInterrupted ends the active response for good (R-STOP-09): it fences
// its owner, cuts the projection at lastSeenIndex when given (R-STOP-10),
// settles its tool calls (OQ-12), closes pending approvals and inputs, and
// ends the turn. An interruption naming an older or mismatched owner changes
// nothing (R-STOP-08).
func (s *AIState) foldInterrupted(p MessageInterrupted) {
	if !s.ownerMatches(p.MessageID, p.RequestID, p.GenerationID) && !s.ownerlessHandoff(p) {
		return
	}
	steered := p.Reason == ReasonSteeredAfterStep
	if s.ActiveRequestID != "" {
		s.TerminalRequestIDs = setTrue(s.TerminalRequestIDs, s.ActiveRequestID)
	}
	if g := s.ActiveGeneration; g != nil {
		s.TerminalRequestIDs = setTrue(s.TerminalRequestIDs, g.RequestID)
		if g.State == "streaming" {
			s.TerminalGenerations = setStr(s.TerminalGenerations, g.GenerationID, GenInterrupted)
			g.State = GenInterrupted
		}
	}
	if pr := s.ActiveProjection; pr != nil && p.LastSeenIndex != nil && !steered {
		s.cutProjection(int(*p.LastSeenIndex))
	}
	s.closeResponse(p.MessageID, steered)
	s.endTurn()
}

// closeResponse settles what an ended response leaves open: input-streaming
// drafts are dropped (R-STOP-13); calls still waiting for approval close as
// not executed; other calls without a result settle as interrupted errors;
// a running compaction part is interrupted (R-STOP-18); pending approvals
// and inputs of the response are removed.
func (s *AIState) closeResponse(responseID string, steered bool) {
	msg := s.message(responseID)
	if msg != nil {
		s.dropDrafts(msg, 0)
		settleStreaming(msg, 0, s.ActiveProjection)
		for i := range msg.Parts {
			part := &msg.Parts[i]
			switch {
			case part.IsToolPart():
				switch part.State {
				case ToolApprovalRequested:
					part.State = ToolOutputDenied
					reason := "closed: the turn ended before an answer"
					if steered {
						reason = "closed by steering before an answer"
					}
					f := false
					if part.Approval == nil {
						part.Approval = &ToolApproval{}
					}
					part.Approval.Approved = &f
					part.Approval.Reason = reason
				case ToolInputAvailable, ToolApprovalResponded:
					part.State = ToolOutputError
					part.ErrorText = InterruptedToolError
				}
				if t, ok := s.Tools[part.ToolCallID]; ok && !toolTerminal(t.Status) {
					t.Status = toolStatusOfPart(part)
					s.putTool(part.ToolCallID, t)
				}
			case part.Type == PartCompaction:
				setCompactionStatus(part, CompactionStatusRunning, CompactionStatusInterrupted)
			}
		}
	}
	if s.Compaction != nil && s.Compaction.Status == CompactionStatusRunning {
		s.Compaction.Status = CompactionStatusInterrupted
	}
	for _, id := range sortedKeys(s.PendingApprovals) {
		if t, ok := s.Tools[s.PendingApprovals[id].ToolCallID]; !ok || t.ResponseID == responseID {
			delete(s.PendingApprovals, id)
		}
	}
	for _, id := range sortedKeys(s.PendingInputs) {
		delete(s.PendingInputs, id)
	}
}

func toolStatusOfPart(p *Part) string {
	switch p.State {
	case ToolOutputAvailable:
		if p.Preliminary != nil && *p.Preliminary {
			return ToolStatusRunning
		}
		return ToolStatusCompleted
	case ToolOutputError:
		if p.ErrorText == InterruptedToolError {
			return ToolStatusInterrupted
		}
		return ToolStatusFailed
	case ToolOutputDenied:
		return ToolStatusDenied
	case ToolApprovalRequested:
		return ToolStatusApproval
	case ToolInputStreaming:
		return ToolStatusStreaming
	}
	return ToolStatusPending
}

// setCompactionStatus moves a compaction part from one status to another.
func setCompactionStatus(p *Part, from, to string) {
	var d CompactionData
	if json.Unmarshal(p.Data, &d) != nil || d.Status != from {
		return
	}
	d.Status = to
	p.Data = mustJSON(d)
}

// dropDrafts removes input-streaming tool parts from index `from` on.
func (s *AIState) dropDrafts(msg *TranscriptMessage, from int) {
	out := msg.Parts[:from]
	for _, part := range msg.Parts[from:] {
		if part.IsToolPart() && part.State == ToolInputStreaming {
			if t, ok := s.Tools[part.ToolCallID]; ok && t.Status == ToolStatusStreaming {
				s.dropTool(part.ToolCallID)
			}
			continue
		}
		out = append(out, part)
	}
	msg.Parts = out
}

// endTurn clears the active turn and everything that belongs to it,
// including approvals and input requests nobody answered.
func (s *AIState) endTurn() {
	if a := s.Active; a != nil {
		s.trimParts(a.ResponseMessageID)
		for _, id := range sortedKeys(s.PendingApprovals) {
			if t, ok := s.Tools[s.PendingApprovals[id].ToolCallID]; !ok || t.ResponseID == a.ResponseMessageID {
				delete(s.PendingApprovals, id)
			}
		}
	}
	for _, id := range sortedKeys(s.PendingInputs) {
		delete(s.PendingInputs, id)
	}
	s.Active = nil
	s.ActiveGeneration = nil
	s.ActiveProjection = nil
	s.ActiveRequestID = ""
	s.ActiveRequestReason = ""
	s.ActiveRequestSourceGenerationID = ""
	s.ActiveResponseMessageID = ""
}

// trimParts gives an ended turn's response message an array of parts of
// its own length: a part is a large struct (about 512 bytes), and the array
// that grew by doubling while the response streamed is up to twice that,
// kept for as long as the session is in memory. A part appended later (a
// retry of the response) grows it again.
func (s *AIState) trimParts(responseID string) {
	if responseID == "" {
		return
	}
	if msg := s.message(responseID); msg != nil && cap(msg.Parts)-len(msg.Parts) >= 2 {
		msg.Parts = slices.Clone(msg.Parts)
	}
}

// cutProjection rebuilds the active response from its recovery base and the
// projection entries up to and including lastSeen (R-STOP-10, OQ-11).
func (s *AIState) cutProjection(lastSeen int) {
	pr := s.ActiveProjection
	msg := s.message(pr.ResponseMessageID)
	if msg == nil {
		return
	}
	keep := lastSeen + 1
	if keep < 0 {
		keep = 0
	}
	if keep >= len(pr.Entries) {
		return
	}
	if pr.Base <= len(msg.Parts) {
		msg.Parts = msg.Parts[:pr.Base]
	}
	entries := pr.Entries[:keep]
	pr.Open, pr.ToolInput, pr.text = nil, nil, nil
	// Tool calls of this generation are rebuilt from the kept entries.
	for _, id := range sortedKeys(s.Tools) {
		if s.Tools[id].GenerationID == pr.GenerationID {
			s.dropTool(id)
		}
	}
	for _, id := range sortedKeys(s.PendingApprovals) {
		if s.PendingApprovals[id].GenerationID == pr.GenerationID {
			delete(s.PendingApprovals, id)
		}
	}
	pr.Entries = append([]json.RawMessage(nil), entries...)
	for i, raw := range pr.Entries {
		var c UIMessageChunk
		if json.Unmarshal(raw, &c) == nil {
			s.applyChunk(msg, pr, c, i)
		}
	}
}
