package protocol

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// Work kinds named by Pending.
const (
	// WorkGeneration: the active request must have a running attempt.
	WorkGeneration = "generation"
	// WorkTool: a tool call's execution must be running.
	WorkTool = "tool"
	// WorkReportInterrupted: a toolRecovery "report" tool whose claim lapsed
	// must not run again; record the interrupted error result instead
	// (R-TOOL-13).
	WorkReportInterrupted = "report-interrupted"
	// WorkSettle: an owner cancelled by Pause now must be stopped and its end
	// recorded (ai.generation.superseded for a generation, an
	// ai.tool.execution.completed for a tool).
	WorkSettle = "settle"
	// WorkMetadata: a model's catalog lookup (R-META-02).
	WorkMetadata = "metadata"
	// WorkHandler: the agent's handler of an application event must run
	// until it completes (R-CONTRACT-15).
	WorkHandler = "handler"
)

// Work is one piece of work that must be running now. The runtime compares
// it with the children it runs: work it runs already is left alone; work
// that has an attempt in the state (Attempt > 0) but no live owner has
// lapsed: a generation attempt is marked superseded before its replacement
// starts (R-DELIVERY-04) and a tool attempt runs again, or is reported for
// a "report" tool.
type Work struct {
	Kind string `json:"kind"`

	RequestID         string `json:"requestId,omitempty"`
	ResponseMessageID string `json:"responseMessageId,omitempty"`
	// GenerationID is the generation the work belongs to: for a generation,
	// the current attempt's ID when one started (else empty).
	GenerationID string `json:"generationId,omitempty"`
	// Attempt is the latest attempt recorded (0 when none started); the next
	// attempt is Attempt+1. For a tool, a claim of the current version has
	// Attempt equal to it (status running).
	Attempt int    `json:"attempt,omitempty"`
	Reason  string `json:"reason,omitempty"`

	ToolCallID string          `json:"toolCallId,omitempty"`
	ToolName   string          `json:"toolName,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"`
	Version    int             `json:"version,omitempty"`
	TurnID     string          `json:"turnId,omitempty"`

	Model string `json:"model,omitempty"`

	// EventID and EventType name the application event of handler work.
	EventID   string `json:"eventId,omitempty"`
	EventType string `json:"eventType,omitempty"`
}

// GenerationIDFor derives the ID of attempt `attempt` of a generation request
// (OQ-19): a replacement attempt gets a new generation ID.
func GenerationIDFor(requestID string, attempt int) string {
	return DeriveID("generation", requestID, strconv.Itoa(attempt))
}

// WorkPolicy is the agent configuration Pending needs.
type WorkPolicy struct {
	// ToolLane runs local tool executions one at a time in admission order
	// (the log order of their work events) when set (R-TOOL-08, OQ-22).
	ToolLane string
	// ReportTools names the tools with toolRecovery "report".
	ReportTools map[string]bool
	// NoMetadata disables catalog lookups (compaction false or an explicit
	// threshold, R-META-07).
	NoMetadata bool
}

// Pending returns the work that must be running now, derived from the state
// alone (so a fresh fold of the same log yields the same work, which is how
// recovery works), in a deterministic order: settling owners, the
// generation, tool executions in the order the model called them, metadata
// lookups by model name, application handlers by event ID. A closed
// session has no work but the handlers of events appended before it closed.
func Pending(p WorkPolicy, s *AIState) []Work {
	return AppendPending(nil, p, s)
}

// AppendPending appends Pending's work to dst and returns the extended
// slice, so that a caller that asks on every write can reuse one slice.
func AppendPending(dst []Work, p WorkPolicy, s *AIState) []Work {
	out := dst
	if s.Session.Status == SessionStatusClosed {
		return append(out, s.pendingHandlers()...)
	}
	a := s.Active
	if a != nil {
		for _, owner := range a.Settling {
			w := Work{Kind: WorkSettle, TurnID: a.TurnID}
			if len(owner) > 5 && owner[:5] == "tool:" {
				w.ToolCallID = owner[5:]
				if t, ok := s.Tools[w.ToolCallID]; ok {
					w.ToolName, w.GenerationID, w.Version, w.Attempt = t.ToolName, t.GenerationID, t.ClaimedVersion, t.Attempt
				}
			} else {
				w.GenerationID = owner
			}
			out = append(out, w)
		}
	}
	if a != nil && a.Phase == PhaseRunning && len(a.Settling) == 0 {
		if s.ActiveRequestID != "" && !a.Yield {
			w := Work{Kind: WorkGeneration, RequestID: s.ActiveRequestID, ResponseMessageID: a.ResponseMessageID,
				Reason: s.ActiveRequestReason, TurnID: a.TurnID, Version: a.Version}
			if g := s.ActiveGeneration; g != nil && g.RequestID == s.ActiveRequestID && g.State == "streaming" {
				w.GenerationID, w.Attempt = g.GenerationID, g.Attempt
			} else if o, ok := s.ResponseOwners[a.ResponseMessageID]; ok && o.RequestID == s.ActiveRequestID {
				w.Attempt = o.Attempt // a superseded attempt: the next one is o.Attempt+1
			}
			out = append(out, w)
		}
		out = append(out, s.pendingTools(p)...)
	}
	if !p.NoMetadata {
		// The pending lookups in model order. Only those are sorted: the
		// map holds every model the session used, almost all resolved,
		// and Pending runs after every write.
		from := len(out)
		for model, m := range s.ModelMetadata {
			if m.Status == MetadataPending {
				out = append(out, Work{Kind: WorkMetadata, Model: model})
			}
		}
		slices.SortFunc(out[from:], func(a, b Work) int { return strings.Compare(a.Model, b.Model) })
	}
	return append(out, s.pendingHandlers()...)
}

// pendingHandlers lists the handler runs the state still owes.
func (s *AIState) pendingHandlers() []Work {
	var out []Work
	for _, id := range sortedKeys(s.PendingHandlers) {
		out = append(out, Work{Kind: WorkHandler, EventID: id, EventType: s.PendingHandlers[id]})
	}
	return out
}

// pendingTools lists the tool executions that must run: calls with a work
// event for the current version, and claimed calls (whose claim lapses if
// no live attempt owns it). Under a tool lane only the first of them runs.
func (s *AIState) pendingTools(p WorkPolicy) []Work {
	a := s.Active
	msg := s.message(a.ResponseMessageID)
	if msg == nil {
		return nil
	}
	var out []Work
	for _, part := range msg.Parts {
		if !part.IsToolPart() {
			continue
		}
		t, ok := s.Tools[part.ToolCallID]
		if !ok || t.ProviderExecuted || (t.Status != ToolStatusRequested && t.Status != ToolStatusRunning) || t.Version != a.Version {
			continue
		}
		// Attempt is the latest claim's, in any version: attempts count the
		// executions of a call, so a rerun after Resume is attempt 2.
		w := Work{Kind: WorkTool, ToolCallID: part.ToolCallID, ToolName: t.ToolName, Input: part.Input,
			GenerationID: t.GenerationID, Version: t.Version, TurnID: a.TurnID, Attempt: t.Attempt}
		if t.Status == ToolStatusRunning && p.ReportTools[t.ToolName] {
			w.Kind = WorkReportInterrupted
		}
		out = append(out, w)
		if p.ToolLane != "" {
			break
		}
	}
	return out
}
