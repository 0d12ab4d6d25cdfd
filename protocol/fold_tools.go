// The fold of tool executions and compaction (Fold, fold.go).

package protocol

import (
	"encoding/json"
)

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
