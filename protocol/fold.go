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
