package protocol

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Fold applies one event to s, in place: the AI reducer (reduceAIState of the
// reference). It ignores application events (R-CONTRACT-08) and events of
// fenced owners (R-STOP-09, R-STOP-15..17), which stay in raw history but
// change nothing. It returns an error only for a log that cannot be folded:
// a built-in payload that does not decode, an ai.message.created whose
// command was never folded (R-LOG-13), a decision for an unknown command, or
// a gap in a generation's progress. On error s may be partly changed; folding
// stops there.
//
// Fold never keeps a reference to ev.Payload's bytes beyond raw JSON values
// it copies out of it, and never writes to them.
func Fold(s *AIState, ev Event) error {
	if !IsBuiltinType(ev.Type) {
		return nil
	}
	if s.Session.ID == "" && ev.Session != "" {
		s.Session.ID = ev.Session
	}
	var err error
	switch ev.Type {
	case TypeControlRequested:
		err = s.foldCommand(ev)
	case TypeControlDecided:
		err = s.foldDecided(ev)
	case TypeMessageCreated:
		err = s.foldMessageCreated(ev)
	case TypeMessageInterrupted:
		var p MessageInterrupted
		if err = decodePayload(ev, &p); err == nil {
			s.foldInterrupted(p)
		}
	case TypeGenerationRequested:
		var p GenerationRequested
		if err = decodePayload(ev, &p); err == nil {
			s.foldRequested(ev.ID, p)
		}
	case TypeGenerationStarted:
		var p GenerationStarted
		if err = decodePayload(ev, &p); err == nil {
			s.foldStarted(p)
		}
	case TypeGenerationProgress:
		if d := ev.progress; d != nil {
			err = s.foldProgress(d.generationID, d.fromIndex, d.raws, d.chunks)
			break
		}
		var p progressPayload
		if err = decodePayload(ev, &p); err == nil {
			err = s.foldProgress(p.GenerationID, p.FromIndex, p.Chunks, nil)
		}
	case TypeGenerationCompleted:
		var p GenerationCompleted
		if err = decodePayload(ev, &p); err == nil {
			s.foldCompleted(p)
		}
	case TypeGenerationFailed:
		var p GenerationFailed
		if err = decodePayload(ev, &p); err == nil {
			s.foldFailed(p)
		}
	case TypeGenerationSuperseded:
		var p GenerationSuperseded
		if err = decodePayload(ev, &p); err == nil {
			s.foldSuperseded(p)
		}
	case TypeRetryRequested:
		var p RetryRequested
		if err = decodePayload(ev, &p); err == nil {
			s.foldRetry(p)
		}
	case TypeToolExecRequested:
		var p ToolExecutionRequested
		if err = decodePayload(ev, &p); err == nil {
			s.foldToolRequested(p)
		}
	case TypeToolExecCompleted:
		var p ToolExecutionCompleted
		if err = decodePayload(ev, &p); err == nil {
			s.foldToolCompleted(p)
		}
	case TypeToolExecClaimed:
		var p ToolExecutionClaimed
		if err = decodePayload(ev, &p); err == nil {
			s.foldToolClaimed(p)
		}
	case TypeToolOutputPreliminary:
		var p ToolOutputPreliminary
		if err = decodePayload(ev, &p); err == nil {
			s.foldToolPreliminary(p)
		}
	case TypeCompactionRequested:
		var p CompactionRequested
		if err = decodePayload(ev, &p); err == nil {
			s.foldCompactionRequested(p)
		}
	case TypeCompactionCompleted:
		var p CompactionCompleted
		if err = decodePayload(ev, &p); err == nil {
			s.foldCompactionCompleted(p)
		}
	case TypeModelMetaRequested:
		var p ModelMetadataRequested
		if err = decodePayload(ev, &p); err == nil && p.Model != "" {
			if _, ok := s.ModelMetadata[p.Model]; !ok {
				s.ModelMetadata[p.Model] = ModelMetadata{Status: MetadataPending}
			}
		}
	case TypeModelMetaResolved:
		var p ModelMetadataResolved
		if err = decodePayload(ev, &p); err == nil && p.Model != "" {
			m := ModelMetadata{Status: MetadataResolved, ContextWindow: p.ContextWindow, MaxOutputTokens: p.MaxOutputTokens}
			if p.Unavailable {
				m = ModelMetadata{Status: MetadataUnavailable}
			}
			s.ModelMetadata[p.Model] = m
		}
	case TypeHandlerCompleted:
		var p HandlerCompleted
		if err = decodePayload(ev, &p); err == nil {
			delete(s.PendingHandlers, p.EventID)
		}
	case TypeSessionCreated:
		if s.Session.Status == SessionStatusNew {
			s.Session.Status = SessionStatusOpen
		}
	case TypeSessionClosed:
		s.foldClosed()
	}
	if err != nil {
		return fmt.Errorf("protocol: fold %s %q at index %d: %w", ev.Type, ev.ID, ev.Index, err)
	}
	s.deriveStatus()
	return nil
}

func decodePayload(ev Event, v any) error {
	if err := json.Unmarshal(ev.Payload, v); err != nil {
		return jsonError("payload", err)
	}
	return nil
}

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

func (s *AIState) foldRequested(id string, p GenerationRequested) {
	a := s.Active
	if a == nil || a.TurnID != p.TurnID || s.TerminalRequestIDs[id] {
		return
	}
	if a.ResponseMessageID != "" && a.ResponseMessageID != p.ResponseMessageID {
		return
	}
	a.ResponseMessageID = p.ResponseMessageID
	a.Failed = false
	if p.Version > a.Version {
		a.Version = p.Version
	}
	s.ActiveRequestID = id
	s.ActiveRequestReason = p.Reason
	s.ActiveRequestSourceGenerationID = p.SourceGenerationID
	s.ActiveResponseMessageID = p.ResponseMessageID
}

func (s *AIState) foldStarted(p GenerationStarted) {
	a := s.Active
	if a == nil || p.RequestID == "" || p.RequestID != s.ActiveRequestID ||
		s.TerminalRequestIDs[p.RequestID] || s.TerminalGenerations[p.GenerationID] != "" {
		return
	}
	if g := s.ActiveGeneration; g != nil && g.GenerationID == p.GenerationID {
		return
	}
	if g := s.ActiveGeneration; g != nil && g.State == "streaming" {
		// A new attempt of the same request replaces one that was never
		// marked superseded: remove what the old one wrote.
		s.dropAttempt(g.GenerationID)
	}
	resp := a.ResponseMessageID
	msg := s.message(resp)
	if msg == nil {
		s.addMessage(TranscriptMessage{ID: resp, Role: RoleAssistant, Parts: []Part{}})
		msg = &s.Messages[len(s.Messages)-1]
	}
	s.ActiveGeneration = &ActiveGeneration{
		GenerationID: p.GenerationID, RequestID: p.RequestID, ResponseMessageID: resp,
		Attempt: p.Attempt, Model: p.Model, State: "streaming",
	}
	s.ResponseOwners[resp] = Owner{GenerationID: p.GenerationID, RequestID: p.RequestID, Attempt: p.Attempt}
	s.ActiveResponseMessageID = ""
	s.ActiveProjection = &Projection{
		GenerationID: p.GenerationID, ResponseMessageID: resp, Base: len(msg.Parts),
		Entries: []json.RawMessage{},
	}
}

// streaming returns the active generation if it is generationID and still
// streaming, else nil: events of any other generation are fenced.
func (s *AIState) streaming(generationID string) *ActiveGeneration {
	g := s.ActiveGeneration
	if g == nil || g.GenerationID != generationID || g.State != "streaming" || s.TerminalGenerations[generationID] != "" {
		return nil
	}
	return g
}

// progressPayload decodes ai.generation.progress keeping each chunk raw: the
// projection stores chunks as their JSON (compact, and a plain copy), and
// only chunks not applied yet are decoded.
type progressPayload struct {
	GenerationID string            `json:"generationId"`
	FromIndex    int               `json:"fromIndex"`
	Chunks       []json.RawMessage `json:"chunks"`
}

// foldProgress applies the chunks of one progress payload that were not
// applied yet. raws are the chunks' JSON; decoded, when not nil, holds
// their decoding (NewProgressEvent), else each raw is decoded here.
func (s *AIState) foldProgress(generationID string, fromIndex int, raws []json.RawMessage, decoded []UIMessageChunk) error {
	if s.streaming(generationID) == nil {
		return nil
	}
	pr := s.ActiveProjection
	if pr == nil || pr.GenerationID != generationID {
		return nil
	}
	skip := pr.Chunks - fromIndex
	if skip < 0 {
		return fmt.Errorf("progress of generation %q starts at chunk %d but only %d chunks were applied", generationID, fromIndex, pr.Chunks)
	}
	if skip >= len(raws) {
		return nil // re-delivered chunks (R-STATE-22)
	}
	msg := s.message(pr.ResponseMessageID)
	var scratch *UIMessageChunk // decoding target, allocated once per payload
	for i := skip; i < len(raws); i++ {
		if decoded == nil {
			if scratch == nil {
				scratch = new(UIMessageChunk)
			}
			*scratch = UIMessageChunk{}
			if err := json.Unmarshal(raws[i], scratch); err != nil {
				return jsonError(fmt.Sprintf("payload.chunks[%d]", pr.Chunks-fromIndex), err)
			}
		}
		pr.Entries = append(pr.Entries, raws[i])
		pr.Chunks++
		if decoded != nil {
			s.applyChunk(msg, pr, decoded[i], len(pr.Entries)-1)
		} else {
			s.applyChunk(msg, pr, *scratch, len(pr.Entries)-1)
		}
	}
	return nil
}

func (s *AIState) foldCompleted(p GenerationCompleted) {
	g := s.streaming(p.GenerationID)
	if g == nil {
		return
	}
	g.State = GenCompleted
	s.TerminalGenerations = setStr(s.TerminalGenerations, g.GenerationID, GenCompleted)
	s.TerminalRequestIDs = setTrue(s.TerminalRequestIDs, g.RequestID)
	if p.Usage != nil {
		s.Usage[g.GenerationID] = *p.Usage
		if p.InputBytes > 0 && p.Usage.InputTokens > 0 {
			s.Calibration = &Calibration{Model: g.Model, Bytes: p.InputBytes, InputTokens: p.Usage.InputTokens}
		}
	}
	s.ActiveRequestID, s.ActiveRequestReason, s.ActiveRequestSourceGenerationID = "", "", ""
	a := s.Active
	a.Steps++
	a.LastStep = g.GenerationID
	msg := s.message(g.ResponseMessageID)
	if msg != nil && s.ActiveProjection != nil {
		s.dropDrafts(msg, s.ActiveProjection.Base)
		settleStreaming(msg, s.ActiveProjection.Base, s.ActiveProjection)
	}
	// A final step ends the turn, unless trusted code asked the user for
	// input during it: then the turn waits for the answer (awaiting-input).
	// Inputs asked during an earlier, failed step close with the turn.
	if !s.stepHasToolCalls(g.GenerationID) && !s.inputsPendingFor(g.GenerationID) {
		s.endTurn()
	}
}

// inputsPendingFor reports whether an application input asked during
// generation is still unanswered.
func (s *AIState) inputsPendingFor(generationID string) bool {
	for _, pi := range s.PendingInputs {
		if pi.GenerationID == generationID {
			return true
		}
	}
	return false
}

// stepHasToolCalls reports whether generation made tool calls: such a step
// needs a continuation once its results are in.
func (s *AIState) stepHasToolCalls(generationID string) bool {
	if x := s.index(); x != nil {
		return x.toolGens[generationID] > 0
	}
	for _, t := range s.Tools {
		if t.GenerationID == generationID {
			return true
		}
	}
	return false
}

func (s *AIState) foldFailed(p GenerationFailed) {
	a := s.Active
	if a == nil {
		return
	}
	if p.StepLimit {
		if p.RequestID == "" || s.TerminalRequestIDs[p.RequestID] {
			return
		}
		s.TerminalRequestIDs = setTrue(s.TerminalRequestIDs, p.RequestID)
		a.Failed = true
		s.Error = &ErrorInfo{Message: p.Message, StepLimit: true}
		return
	}
	g := s.streaming(p.GenerationID)
	if g == nil {
		return
	}
	g.State = GenFailed
	s.TerminalGenerations = setStr(s.TerminalGenerations, g.GenerationID, GenFailed)
	s.TerminalRequestIDs = setTrue(s.TerminalRequestIDs, g.RequestID)
	s.ActiveRequestID, s.ActiveRequestReason, s.ActiveRequestSourceGenerationID = "", "", ""
	a.Failed = true
	s.Error = &ErrorInfo{Message: p.Message, GenerationID: g.GenerationID}
	if msg := s.message(g.ResponseMessageID); msg != nil && s.ActiveProjection != nil {
		s.dropDrafts(msg, s.ActiveProjection.Base)
		settleStreaming(msg, s.ActiveProjection.Base, s.ActiveProjection)
		for i := range msg.Parts {
			if msg.Parts[i].Type == PartCompaction && msg.Parts[i].ID == g.GenerationID {
				setCompactionStatus(&msg.Parts[i], CompactionStatusRunning, CompactionStatusFailed)
			}
		}
	}
	if s.Compaction != nil && s.Compaction.GenerationID == g.GenerationID && s.Compaction.Status == CompactionStatusRunning {
		s.Compaction.Status = CompactionStatusFailed
	}
}

// foldSuperseded marks an attempt that will not finish. If it is still the
// active attempt its partial output is removed (R-COMPACT-33) and the request
// waits for a new attempt; if Pause now already fenced it, the owner has now
// settled.
func (s *AIState) foldSuperseded(p GenerationSuperseded) {
	if s.Active != nil {
		s.settle(p.GenerationID)
	}
	if s.streaming(p.GenerationID) == nil {
		if s.TerminalGenerations[p.GenerationID] == "" && p.GenerationID != "" {
			s.TerminalGenerations = setStr(s.TerminalGenerations, p.GenerationID, GenSuperseded)
		}
		return
	}
	s.dropAttempt(p.GenerationID)
}

// interruptCompaction settles the running compaction part of generationID
// as interrupted.
func (s *AIState) interruptCompaction(generationID string) {
	if pr := s.ActiveProjection; pr != nil && pr.GenerationID == generationID {
		if msg := s.message(pr.ResponseMessageID); msg != nil {
			for i := range msg.Parts {
				if msg.Parts[i].Type == PartCompaction && msg.Parts[i].ID == generationID {
					setCompactionStatus(&msg.Parts[i], CompactionStatusRunning, CompactionStatusInterrupted)
				}
			}
		}
	}
	if s.Compaction != nil && s.Compaction.GenerationID == generationID && s.Compaction.Status == CompactionStatusRunning {
		s.Compaction.Status = CompactionStatusInterrupted
	}
}

func compactionInterrupted(p Part) bool {
	var d CompactionData
	return json.Unmarshal(p.Data, &d) == nil && d.Status == CompactionStatusInterrupted
}

// dropAttempt fences a streaming attempt as superseded and removes what it
// wrote into the response.
func (s *AIState) dropAttempt(generationID string) {
	g := s.ActiveGeneration
	s.TerminalGenerations = setStr(s.TerminalGenerations, generationID, GenSuperseded)
	if pr := s.ActiveProjection; pr != nil && pr.GenerationID == generationID {
		if msg := s.message(pr.ResponseMessageID); msg != nil {
			base := pr.Base
			if base > len(msg.Parts) {
				base = len(msg.Parts)
			}
			msg.Parts = msg.Parts[:base]
			msg.Parts = slices.DeleteFunc(msg.Parts, func(p Part) bool {
				return p.Type == PartCompaction && p.ID == generationID && !compactionInterrupted(p)
			})
		}
	}
	for _, id := range sortedKeys(s.Tools) {
		if s.Tools[id].GenerationID == generationID {
			s.dropTool(id)
		}
	}
	for _, id := range sortedKeys(s.PendingApprovals) {
		if s.PendingApprovals[id].GenerationID == generationID {
			delete(s.PendingApprovals, id)
		}
	}
	if s.Compaction != nil && s.Compaction.GenerationID == generationID && s.Compaction.Status != CompactionStatusInterrupted {
		s.Compaction = nil
	}
	s.ActiveProjection = nil
	if g != nil && g.GenerationID == generationID {
		s.ActiveGeneration = nil
		if s.Active != nil {
			s.ActiveResponseMessageID = s.Active.ResponseMessageID
		}
	}
}

// foldRetry drops the failed call's uncommitted step and keeps everything
// before it: earlier steps, their tool results and committed compactions
// (R-RETRY-03).
func (s *AIState) foldRetry(p RetryRequested) {
	a := s.Active
	if a == nil || !a.Failed || a.ResponseMessageID != p.ResponseMessageID {
		return
	}
	g := s.ActiveGeneration
	if g != nil && g.State == GenFailed && s.ActiveProjection != nil && s.ActiveProjection.GenerationID == g.GenerationID {
		if msg := s.message(g.ResponseMessageID); msg != nil && s.ActiveProjection.Base <= len(msg.Parts) {
			msg.Parts = msg.Parts[:s.ActiveProjection.Base]
		}
		for _, id := range sortedKeys(s.Tools) {
			if s.Tools[id].GenerationID == g.GenerationID {
				s.dropTool(id)
			}
		}
		for _, id := range sortedKeys(s.PendingApprovals) {
			if s.PendingApprovals[id].GenerationID == g.GenerationID {
				delete(s.PendingApprovals, id)
			}
		}
		s.ActiveProjection = nil
		s.ActiveGeneration = nil
	}
	// The failure is answered: a request follows now, or at Resume when the
	// turn is paused (OQ-17). A retry resets calibration (R-RETRY-10).
	a.Failed = false
	s.Calibration = nil
}

// foldToolRequested records the work event of a tool call: it may now run
// under execution version p.Version.
func (s *AIState) foldToolRequested(p ToolExecutionRequested) {
	t, ok := s.Tools[p.ToolCallID]
	if !ok || toolTerminal(t.Status) || t.GenerationID != p.GenerationID || p.Version < t.Version {
		return
	}
	t.Version = p.Version
	t.Status = ToolStatusRequested
	s.putTool(p.ToolCallID, t)
}

// foldToolClaimed records that an attempt took the call: the claim is
// appended before execute runs (R-DELIVERY-01).
func (s *AIState) foldToolClaimed(p ToolExecutionClaimed) {
	t, ok := s.Tools[p.ToolCallID]
	if !ok || toolTerminal(t.Status) || t.GenerationID != p.GenerationID || p.Version != t.Version {
		return
	}
	t.Status = ToolStatusRunning
	t.Attempt = p.Attempt
	t.ClaimedVersion = p.Version
	t.Running = true
	s.putTool(p.ToolCallID, t)
}

// foldToolPreliminary shows a running tool's streamed output; a retried
// attempt may stream different output under the same call (R-TOOL-07).
func (s *AIState) foldToolPreliminary(p ToolOutputPreliminary) {
	t, ok := s.Tools[p.ToolCallID]
	if !ok || toolTerminal(t.Status) || t.GenerationID != p.GenerationID || p.Version != t.Version || p.Attempt != t.Attempt {
		return
	}
	msg, k := s.toolPart(p.ToolCallID)
	if msg == nil {
		return
	}
	yes := true
	part := &msg.Parts[k]
	part.State, part.Output, part.Preliminary = ToolOutputAvailable, p.Output, &yes
}

// foldToolCompleted records a tool outcome. Any outcome settles the call's
// A2-owned work (Running), even one the fold then fences.
func (s *AIState) foldToolCompleted(p ToolExecutionCompleted) {
	t, ok := s.Tools[p.ToolCallID]
	if !ok || t.GenerationID != p.GenerationID {
		return
	}
	if t.Running {
		t.Running = false
		s.putTool(p.ToolCallID, t)
	}
	version := p.Version
	if p.Interrupted && p.Version == t.ClaimedVersion && !toolTerminal(t.Status) {
		version = t.Version // a report tool's interrupted result outlives Pause now
	}
	if s.Active != nil {
		s.settle("tool:" + p.ToolCallID)
	}
	s.foldToolOutcome(p.ToolCallID, p.GenerationID, version, p.Output, p.ErrorText)
}

// foldToolOutcome records a tool call's terminal outcome, once (at most one
// terminal outcome per call). Outcomes of a fenced owner or of an older
// execution version change nothing, but a final result racing a generation
// failure wins (R-STOP-12).
func (s *AIState) foldToolOutcome(toolCallID, generationID string, version int, output json.RawMessage, errorText string) {
	t, ok := s.Tools[toolCallID]
	if !ok || toolTerminal(t.Status) || t.GenerationID != generationID || version < t.Version {
		return
	}
	switch s.TerminalGenerations[generationID] {
	case GenInterrupted, GenSuperseded:
		return
	}
	if s.Active != nil {
		s.settle("tool:" + toolCallID)
	}
	c := UIMessageChunk{ToolCallID: toolCallID}
	if errorText != "" {
		c.Type, c.ErrorText = ChunkToolOutputError, errorText
	} else {
		c.Type, c.Output = ChunkToolOutput, output
	}
	msg := s.message(t.ResponseID)
	if msg == nil {
		return
	}
	pr := s.ActiveProjection
	if pr != nil && pr.ResponseMessageID == t.ResponseID {
		pr.Entries = append(pr.Entries, mustJSON(c))
		s.applyChunk(msg, pr, c, len(pr.Entries)-1)
		return
	}
	s.applyChunk(msg, &Projection{ResponseMessageID: t.ResponseID}, c, -1)
}

// foldCompactionRequested appends a running compaction part to the active
// response before the step it compacts for (R-COMPACT-29). The part counts
// toward the step's recovery base, so Stop cut-offs, failures and retries
// keep it (R-STOP-19).
func (s *AIState) foldCompactionRequested(p CompactionRequested) {
	g := s.streaming(p.GenerationID)
	pr := s.ActiveProjection
	if g == nil || pr == nil || pr.GenerationID != g.GenerationID || len(pr.Entries) > 0 {
		return
	}
	msg := s.message(g.ResponseMessageID)
	if msg == nil {
		return
	}
	for _, part := range msg.Parts {
		if part.Type == PartCompaction && part.ID == p.GenerationID {
			return
		}
	}
	data := CompactionData{Status: CompactionStatusRunning, InputTokens: p.InputTokens, ThresholdTokens: p.ThresholdTokens}
	msg.Parts = append(msg.Parts, Part{Type: PartCompaction, ID: p.GenerationID, Data: mustJSON(data)})
	pr.Base = len(msg.Parts)
	s.Compaction = &CompactionState{GenerationID: p.GenerationID, Status: CompactionStatusRunning}
}

// foldCompactionCompleted settles a running compaction part in place with
// its summary and usage (R-COMPACT-30). A part whose generation ended first
// stays failed or interrupted.
func (s *AIState) foldCompactionCompleted(p CompactionCompleted) {
	for i := len(s.Messages) - 1; i >= 0; i-- {
		msg := &s.Messages[i]
		for k := range msg.Parts {
			part := &msg.Parts[k]
			if part.Type != PartCompaction || part.ID != p.GenerationID {
				continue
			}
			var d CompactionData
			if json.Unmarshal(part.Data, &d) != nil || d.Status != CompactionStatusRunning {
				return
			}
			d.Status, d.Summary, d.Usage = CompactionStatusCompleted, p.Summary, p.Usage
			part.Data = mustJSON(d)
			s.Calibration = nil // the prompt shrank: calibrate again (R-COMPACT-20)
			if s.Compaction != nil && s.Compaction.GenerationID == p.GenerationID {
				s.Compaction.Status = CompactionStatusCompleted
			}
			return
		}
	}
}

// foldClosed ends the session (OQ-34): the active response is interrupted,
// a running compaction is interrupted, and no admission happens again.
func (s *AIState) foldClosed() {
	s.Session.Status = SessionStatusClosed
	if a := s.Active; a != nil {
		if g := s.ActiveGeneration; g != nil && g.State == "streaming" {
			s.TerminalGenerations = setStr(s.TerminalGenerations, g.GenerationID, GenInterrupted)
			g.State = GenInterrupted
		}
		if s.ActiveRequestID != "" {
			s.TerminalRequestIDs = setTrue(s.TerminalRequestIDs, s.ActiveRequestID)
		}
		if a.ResponseMessageID != "" {
			s.closeResponse(a.ResponseMessageID, false)
		}
		s.endTurn()
	}
	if s.Compaction != nil && s.Compaction.Status == CompactionStatusRunning {
		s.Compaction.Status = CompactionStatusInterrupted
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

// deriveStatus recomputes state.status from the rest of the state (OQ-06).
func (s *AIState) deriveStatus() {
	a := s.Active
	switch {
	case s.Session.Status == SessionStatusClosed:
		s.Status = StatusClosed
	case a == nil:
		if s.Inbox.Paused {
			s.Status = StatusPaused
		} else {
			s.Status = StatusIdle
		}
	case a.Phase != PhaseRunning:
		s.Status = StatusPaused
	case a.Failed:
		s.Status = StatusFailed
	case s.ActiveGeneration != nil && s.ActiveGeneration.State == "streaming":
		s.Status = StatusStreaming
	case s.ActiveRequestID != "":
		s.Status = StatusSubmitted
	case len(s.PendingApprovals) > 0:
		s.Status = StatusAwaitingApproval
	case len(s.PendingInputs) > 0:
		s.Status = StatusAwaitingInput
	case s.toolsOutstanding(a.ResponseMessageID):
		s.Status = StatusAwaitingTools
	default:
		s.Status = StatusSubmitted
	}
}

// toolsOutstanding reports whether a response has tool calls without a
// terminal outcome.
func (s *AIState) toolsOutstanding(responseID string) bool {
	if x := s.index(); x != nil {
		for id := range x.open {
			if s.Tools[id].ResponseID == responseID {
				return true
			}
		}
		return false
	}
	for _, t := range s.Tools {
		if t.ResponseID == responseID && !toolTerminal(t.Status) {
			return true
		}
	}
	return false
}

func setTrue(m map[string]bool, k string) map[string]bool {
	if m == nil {
		m = map[string]bool{}
	}
	m[k] = true
	return m
}

func setStr(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
