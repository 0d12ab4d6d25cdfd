// The fold of generations: requests, attempts, progress and their ends (Fold, fold.go).

package protocol

import (
	"encoding/json"
	"fmt"
	"slices"
)

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
