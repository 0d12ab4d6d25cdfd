// Package protocol is the pure core of A2: the event envelope and payloads,
// the AI SDK message shapes, the AIState reducer (Fold), the controller
// (Decide, Step) and the input builders.
//
// Nothing in this package performs I/O, starts goroutines, reads a clock or
// draws randomness. IDs are derived from their inputs and timestamps arrive
// inside events, so folding the same log always yields the same state, byte
// for byte. The session actor (package actors) persists what this package
// decides, then acts on it.
package protocol

import (
	"bytes"
	"encoding/json"
)

// Event is the envelope of every entry in a session log.
//
// On disk and between nodes the envelope is protobuf; the payload stays JSON
// so that messages keep the AI SDK UIMessage shape a browser understands.
type Event struct {
	// ID is unique across the whole store. Caller IDs follow ValidateCallerID;
	// A2's own IDs come from DeriveID and start with ReservedPrefix.
	ID string `json:"id"`
	// Type names the payload schema, for example "ai.control.requested".
	Type string `json:"type"`
	// Payload is the JSON payload. It is never truncated.
	Payload json.RawMessage `json:"payload"`
	// Index is the event's position in its session log, starting at 1. It is
	// assigned by the store at append; zero means "not yet appended".
	Index uint64 `json:"index,omitempty"`
	// Session is the session the event belongs to.
	Session string `json:"session,omitempty"`
	// Time is the append time in Unix milliseconds, set by the store. It is
	// informational: folds never branch on it.
	Time int64 `json:"time,omitempty"`
	// Cause is the ID of the event whose handling produced this one, if any:
	// the command's ID on every event Decide returns (docs/protocol.md), the
	// work event's on what its work produced (a tool's outcome, a handler's
	// completion).
	Cause string `json:"cause,omitempty"`

	// progress is the decoded payload of a progress event built by
	// NewProgressEvent, which Fold applies instead of decoding Payload
	// again. It is equal to Payload's decoding by construction; events read
	// from a store or received over the wire never have it.
	progress *decodedProgress
}

// Built-in event types. Every type in the "ai." namespace belongs to A2;
// application contracts cannot declare event types with that prefix.
const (
	TypeControlRequested      = "ai.control.requested"
	TypeControlDecided        = "ai.control.decided"
	TypeMessageCreated        = "ai.message.created"
	TypeMessageInterrupted    = "ai.message.interrupted"
	TypeGenerationRequested   = "ai.generation.requested"
	TypeGenerationStarted     = "ai.generation.started"
	TypeGenerationProgress    = "ai.generation.progress"
	TypeGenerationCompleted   = "ai.generation.completed"
	TypeGenerationFailed      = "ai.generation.failed"
	TypeGenerationSuperseded  = "ai.generation.superseded"
	TypeRetryRequested        = "ai.retry.requested"
	TypeToolExecRequested     = "ai.tool.execution.requested"
	TypeToolExecClaimed       = "ai.tool.execution.claimed"
	TypeToolExecCompleted     = "ai.tool.execution.completed"
	TypeToolOutputPreliminary = "ai.tool.output.preliminary"
	TypeCompactionRequested   = "ai.compaction.requested"
	TypeCompactionCompleted   = "ai.compaction.completed"
	TypeModelMetaRequested    = "ai.model.metadata.requested"
	TypeModelMetaResolved     = "ai.model.metadata.resolved"
	TypeSessionCreated        = "ai.session.created"
	TypeSessionClosed         = "ai.session.closed"
	TypeHandlerCompleted      = "ai.handler.completed"
)

// BuiltinTypes lists every built-in event type, in a fixed order.
var BuiltinTypes = []string{
	TypeControlRequested, TypeControlDecided, TypeMessageCreated,
	TypeMessageInterrupted, TypeGenerationRequested, TypeGenerationStarted,
	TypeGenerationProgress, TypeGenerationCompleted, TypeGenerationFailed,
	TypeGenerationSuperseded, TypeRetryRequested, TypeToolExecRequested,
	TypeToolExecClaimed, TypeToolExecCompleted, TypeToolOutputPreliminary,
	TypeCompactionRequested, TypeCompactionCompleted, TypeModelMetaRequested,
	TypeModelMetaResolved, TypeSessionCreated, TypeSessionClosed,
	TypeHandlerCompleted,
}

// IsBuiltinType reports whether t is in the reserved "ai." namespace.
func IsBuiltinType(t string) bool {
	return len(t) >= 3 && t[:3] == "ai."
}

// SameContent reports whether two events are the same submission: same ID,
// type, session and payload (payloads compared as canonical JSON). The store
// uses it to tell an identical replay from a conflicting reuse (R-LOG-09,
// R-LOG-10, OQ-36).
func SameContent(a, b Event) bool {
	if a.ID != b.ID || a.Type != b.Type || a.Session != b.Session {
		return false
	}
	ca, errA := CanonicalJSON(a.Payload)
	cb, errB := CanonicalJSON(b.Payload)
	if errA != nil || errB != nil {
		return string(a.Payload) == string(b.Payload)
	}
	return string(ca) == string(cb)
}

// CanonicalJSON re-encodes a JSON value with object keys sorted and
// insignificant whitespace removed, so that equal values compare equal.
func CanonicalJSON(raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return []byte("null"), nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// Size is the bytes an event's envelope strings and payload hold: its ID,
// type, cause and payload. The stores' group limits, a session's size
// quota and the gateway's byte limits all count this.
func (e Event) Size() int {
	return len(e.ID) + len(e.Type) + len(e.Cause) + len(e.Payload)
}
