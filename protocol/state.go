package protocol

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// AIStateReducer is the snapshot identity of the built-in AI reducer
// (R-CONTRACT-09). A snapshot saved under another name is never reused.
const AIStateReducer = "a2.ai.state.v27"

// Generation statuses (OQ-06).
const (
	StatusIdle             = "idle"
	StatusSubmitted        = "submitted"
	StatusStreaming        = "streaming"
	StatusAwaitingTools    = "awaiting-tools"
	StatusAwaitingApproval = "awaiting-approval"
	StatusAwaitingInput    = "awaiting-input"
	StatusFailed           = "failed"
	StatusPaused           = "paused"
	StatusClosed           = "closed"
)

// Turn phases (OQ-07).
const (
	PhaseRunning = "running"
	PhasePausing = "pausing"
	PhasePaused  = "paused"
)

// Terminal generation outcomes kept in AIState.TerminalGenerations.
const (
	GenCompleted   = "completed"
	GenFailed      = "failed"
	GenInterrupted = "interrupted"
	GenSuperseded  = "superseded"
)

// AIState is the state of a session as the AI reducer folds it: the value of
// server session state reads, of client snapshots, and of snapshots on disk
// (JSON, with map keys sorted, so equal states encode to equal bytes).
//
// Fold owns the AIState it is given and changes it in place; use Clone to
// keep an earlier state.
type AIState struct {
	// Messages are the admitted inputs and the assistant responses, in order.
	// Server-side they never contain pending inputs (R-STATE-02).
	Messages []TranscriptMessage `json:"messages"`
	// Inbox holds pending inputs in queue order (R-STATE-03).
	Inbox Inbox `json:"inbox"`
	// Active is the logical turn, or nil (R-STATE-05).
	Active *Turn `json:"active"`
	// Status is the generation status (OQ-06), derived after every event.
	Status string `json:"status"`
	// Starting is true only for a speculative optimistic turn on a client;
	// server folds always leave it false (R-STATE-09).
	Starting bool `json:"starting"`
	// Receipt is the latest user command receipt (R-STATE-10).
	Receipt *Receipt `json:"receipt"`
	// PendingQueueCommands holds every command awaiting its decision, in log
	// order (R-STATE-11, OQ-04).
	PendingQueueCommands []PendingCommand `json:"pendingQueueCommands"`
	// Session is the session lifecycle (R-STATE-12).
	Session SessionInfo `json:"session"`
	// PendingApprovals and PendingInputs list what waits on the user
	// (R-STATE-13), keyed by approval and input ID.
	PendingApprovals map[string]PendingApproval `json:"pendingApprovals"`
	PendingInputs    map[string]PendingInput    `json:"pendingInputs"`
	// Tools holds tool identity and execution status only (R-STATE-14).
	Tools map[string]ToolActivity `json:"tools"`
	// Compaction is the current or latest compaction (R-STATE-15).
	Compaction *CompactionState `json:"compaction"`
	// ModelMetadata holds each model's limits and lookup status (R-STATE-16).
	ModelMetadata map[string]ModelMetadata `json:"modelMetadata"`
	// PendingHandlers are the application events whose agent handler has
	// not completed yet (event ID -> event type): a contract built with
	// WithHandlers records them as it folds them, and ai.handler.completed
	// removes them (R-CONTRACT-15).
	PendingHandlers map[string]string `json:"pendingHandlers,omitempty"`
	// Usage is keyed by generation ID; Error is the last error (R-STATE-17).
	Usage map[string]Usage `json:"usage"`
	Error *ErrorInfo       `json:"error"`
	// Calibration is the previous same-model completion's prompt size and
	// reported input tokens; a retry or a compaction drops it (R-COMPACT-20).
	Calibration *Calibration `json:"calibration"`
	// ActiveGeneration is the started generation of the active response
	// (R-STATE-18).
	ActiveGeneration *ActiveGeneration `json:"activeGeneration"`
	// ActiveRequestID is the server-authorized generation request that has
	// not completed; it fences delayed requests before start (R-STATE-19).
	ActiveRequestID                 string `json:"activeRequestId,omitempty"`
	ActiveRequestReason             string `json:"activeRequestReason,omitempty"`
	ActiveRequestSourceGenerationID string `json:"activeRequestSourceGenerationId,omitempty"`
	// ActiveResponseMessageID is the requested response until
	// ActiveGeneration exists (R-STATE-20).
	ActiveResponseMessageID string `json:"activeResponseMessageId,omitempty"`
	// ActiveProjection is the indexed generation frontier (R-STATE-21).
	ActiveProjection *Projection `json:"activeProjection,omitempty"`
	// ResponseOwners maps each response to its latest owner (R-STATE-24).
	ResponseOwners map[string]Owner `json:"responseOwners"`
	// TerminalRequestIDs and TerminalGenerations are fences kept across
	// snapshots and recovery (R-STATE-25).
	TerminalRequestIDs  map[string]bool   `json:"terminalRequestIds"`
	TerminalGenerations map[string]string `json:"terminalGenerations"`

	// idx is the writer's index of Messages and Tools (stateindex.go),
	// derived and never encoded.
	idx *stateIndex
}

// Inbox is the durable queue of pending inputs.
type Inbox struct {
	Paused bool        `json:"paused"`
	Items  []InboxItem `json:"items"`
}

// InboxItem is one pending input (R-STATE-03). CommandID is the command that
// brought it; EditID the accepted edit that last changed its content.
type InboxItem struct {
	ID          string    `json:"id"`
	Role        string    `json:"role"`
	Message     UIMessage `json:"message"`
	Generate    bool      `json:"generate"`
	AfterStepOf string    `json:"afterStepOf,omitempty"`
	CommandID   string    `json:"commandId"`
	EditID      string    `json:"editId,omitempty"`
}

// generating reports whether the item starts a turn when admitted: a user
// message with generate set. Assistant and system items are context only
// (R-INPUT-23).
func (it *InboxItem) generating() bool { return it.Role == RoleUser && it.Generate }

// Turn is the logical unit of one admitted generating input and its whole
// response (R-STATE-05). ResponseMessageID and Steps extend the documented
// shape: the response the turn writes and its committed model steps.
type Turn struct {
	TurnID            string    `json:"turnId"`
	Input             TurnInput `json:"input"`
	Phase             string    `json:"phase"`
	ResponseMessageID string    `json:"responseMessageId,omitempty"`
	Steps             int       `json:"steps,omitempty"`
	Version           int       `json:"version,omitempty"`
	// LastStep is the generation ID of the turn's last completed model step.
	LastStep string `json:"lastStep,omitempty"`
	// Failed is set while a failure awaits retry or Stop (OQ-16).
	Failed bool `json:"failed,omitempty"`
	// Settling lists the owners cancelled by Pause now that have not yet
	// reported that they stopped: generation IDs and "tool:<toolCallId>".
	Settling []string `json:"settling,omitempty"`
	// Yield is set when Resume finds steering for a turn paused with Pause
	// now: the turn hands off to it instead of resuming its own work
	// (R-STEER-12, R-PAUSE-10).
	Yield bool `json:"yield,omitempty"`
}

// TurnInput identifies the admitted input of a turn.
type TurnInput struct {
	ID       string `json:"id"`
	Role     string `json:"role"`
	Generate bool   `json:"generate"`
}

// Receipt is the outcome of a command (R-INPUT-28).
type Receipt struct {
	CommandID string `json:"commandId"`
	Outcome   string `json:"outcome"`
	Reason    string `json:"reason,omitempty"`
}

// PendingCommand is a command awaiting its decision.
type PendingCommand struct {
	ID      string  `json:"id"`
	Command Command `json:"command"`
}

// SessionInfo is the session lifecycle.
type SessionInfo struct {
	ID     string `json:"id"`
	Status string `json:"status"` // "new", "open" or "closed"
}

// Session lifecycle statuses.
const (
	SessionStatusNew    = "new"
	SessionStatusOpen   = "open"
	SessionStatusClosed = "closed"
)

// PendingApproval is a tool approval awaiting the user's answer (OQ-20).
type PendingApproval struct {
	ToolCallID   string `json:"toolCallId"`
	ToolName     string `json:"toolName"`
	RequestID    string `json:"requestId"`
	GenerationID string `json:"generationId"`
}

// PendingInput is an application input request awaiting the user (OQ-20).
type PendingInput struct {
	Request      json.RawMessage `json:"request"`
	RequestID    string          `json:"requestId"`
	GenerationID string          `json:"generationId"`
}

// ToolActivity is a tool call's identity and execution status.
type ToolActivity struct {
	ToolName         string `json:"toolName"`
	GenerationID     string `json:"generationId"`
	RequestID        string `json:"requestId"`
	ResponseID       string `json:"responseMessageId"`
	Status           string `json:"status"`
	ProviderExecuted bool   `json:"providerExecuted,omitempty"`
	Version          int    `json:"version,omitempty"`
	// Attempt is the attempt of the latest claim; ClaimedVersion the version
	// it claimed.
	Attempt        int `json:"attempt,omitempty"`
	ClaimedVersion int `json:"claimedVersion,omitempty"`
	// Running is set from a claim until any outcome of the call is recorded,
	// even one the fold fences: A2-owned tool work that has not settled
	// defers compaction (R-COMPACT-24).
	Running bool `json:"running,omitempty"`
}

// Tool activity statuses.
const (
	ToolStatusStreaming   = "input-streaming"
	ToolStatusPending     = "pending"
	ToolStatusRequested   = "requested"
	ToolStatusApproval    = "awaiting-approval"
	ToolStatusRunning     = "running"
	ToolStatusCompleted   = "completed"
	ToolStatusFailed      = "failed"
	ToolStatusDenied      = "denied"
	ToolStatusInterrupted = "interrupted"
)

func toolTerminal(status string) bool {
	switch status {
	case ToolStatusCompleted, ToolStatusFailed, ToolStatusDenied, ToolStatusInterrupted:
		return true
	}
	return false
}

// CompactionState is the current or latest compaction.
type CompactionState struct {
	GenerationID string `json:"generationId"`
	Status       string `json:"status"`
}

// ModelMetadata is one model's limits and lookup status (OQ-31).
type ModelMetadata struct {
	Status          string `json:"status"` // pending, resolved, unavailable
	ContextWindow   int64  `json:"contextWindow,omitempty"`
	MaxOutputTokens int64  `json:"maxOutputTokens,omitempty"`
}

// ErrorInfo is the last error (OQ-38).
type ErrorInfo struct {
	Message      string `json:"message"`
	GenerationID string `json:"generationId,omitempty"`
	StepLimit    bool   `json:"stepLimit,omitempty"`
}

// ActiveGeneration is the started generation of the active response.
type ActiveGeneration struct {
	GenerationID      string `json:"generationId"`
	RequestID         string `json:"requestId"`
	ResponseMessageID string `json:"responseMessageId"`
	Attempt           int    `json:"attempt"`
	Model             string `json:"model,omitempty"`
	// State is "streaming" until the generation's terminal event, then its
	// terminal outcome.
	State string `json:"state"`
}

// Owner is the latest owner of a response (R-STATE-24).
type Owner struct {
	GenerationID string `json:"generationId"`
	RequestID    string `json:"requestId"`
	Attempt      int    `json:"attempt"`
}

// Projection is the indexed frontier of the active generation (R-STATE-21,
// OQ-11). Entries are the generation's model chunks and the tool outcomes
// recorded while it is active, in log order; lastSeenIndex counts into them
// from 0. Base is the number of parts the response had before this
// generation (its recovery base): a cut, a retry or a superseded attempt
// rebuilds the response from Base and the entries it keeps.
type Projection struct {
	GenerationID      string            `json:"generationId"`
	ResponseMessageID string            `json:"responseMessageId"`
	Base              int               `json:"base"`
	Chunks            int               `json:"chunks"`
	Entries           []json.RawMessage `json:"entries"`
	// Open maps the stream IDs of text and reasoning parts that have started
	// but not ended to their part index in the response.
	Open map[string]int `json:"open,omitempty"`
	// ToolInput accumulates the streamed argument text of tool calls whose
	// input is not yet available, keyed by tool call ID.
	ToolInput map[string]string `json:"toolInput,omitempty"`

	// text holds growable buffers of text parts being streamed, keyed by part
	// index, so that appending a delta costs O(len(delta)). It is rebuilt on
	// demand and never shared between clones.
	text map[int]*strings.Builder
}

// NewAIState returns the initial AIState.
func NewAIState() *AIState {
	s := &AIState{}
	s.normalize()
	s.Status = StatusIdle
	return s
}

// normalize replaces nil collections by empty ones so that JSON encodings
// are stable ([] and {} rather than null).
func (s *AIState) normalize() {
	if s.Messages == nil {
		s.Messages = []TranscriptMessage{}
	}
	if s.Inbox.Items == nil {
		s.Inbox.Items = []InboxItem{}
	}
	if s.PendingQueueCommands == nil {
		s.PendingQueueCommands = []PendingCommand{}
	}
	if s.PendingApprovals == nil {
		s.PendingApprovals = map[string]PendingApproval{}
	}
	if s.PendingInputs == nil {
		s.PendingInputs = map[string]PendingInput{}
	}
	if s.Tools == nil {
		s.Tools = map[string]ToolActivity{}
	}
	if s.ModelMetadata == nil {
		s.ModelMetadata = map[string]ModelMetadata{}
	}
	if s.Usage == nil {
		s.Usage = map[string]Usage{}
	}
	if s.ResponseOwners == nil {
		s.ResponseOwners = map[string]Owner{}
	}
	if s.Session.Status == "" {
		s.Session.Status = SessionStatusNew
	}
	for i := range s.Messages {
		if s.Messages[i].Parts == nil {
			s.Messages[i].Parts = []Part{}
		}
	}
}

// Clone returns a copy of s that shares no mutable memory with it. Raw JSON
// values and strings are immutable once folded and are shared.
func (s *AIState) Clone() *AIState { return s.clone() }

// StepCopy is a copy of s for a model step to read while s goes on
// folding: what a step reads besides its prompt, which the session's
// writer makes from s itself when the step starts. It leaves out the
// transcript (Messages is nil) and the maps that grow with the
// conversation. A step reads the active response's ID, the model
// metadata, the calibration and what defers a compaction: Usage,
// ResponseOwners, TerminalRequestIDs and TerminalGenerations are nil, and
// Tools holds only the calls whose A2-owned execution has not settled (what
// CompactionDeferral reads of them; its transcript half is the writer's to
// ask). A step of a long session so copies a few maps of a few entries,
// not the transcript nor one entry for every tool call, generation and
// request the session ever had.
func (s *AIState) StepCopy() *AIState {
	t := *s
	t.Messages, t.idx = nil, nil
	t.Usage, t.ResponseOwners, t.TerminalRequestIDs, t.TerminalGenerations, t.Tools = nil, nil, nil, nil, nil
	c := t.clone()
	c.Messages = nil
	c.Tools = map[string]ToolActivity{}
	if x := s.index(); x != nil {
		for id := range x.unsettled {
			c.Tools[id] = s.Tools[id]
		}
		return c
	}
	for id, a := range s.Tools {
		if toolWorkUnsettled(a) {
			c.Tools[id] = a
		}
	}
	return c
}

// clone copies s, every message's parts included.
func (s *AIState) clone() *AIState {
	c := *s
	c.Messages = make([]TranscriptMessage, len(s.Messages))
	copy(c.Messages, s.Messages)
	for i := range c.Messages {
		m := &c.Messages[i]
		m.Parts = append([]Part{}, m.Parts...)
	}
	c.Inbox.Items = cloneInbox(s.Inbox.Items)
	if s.Active != nil {
		a := *s.Active
		a.Settling = append([]string(nil), a.Settling...)
		c.Active = &a
	}
	if s.Receipt != nil {
		r := *s.Receipt
		c.Receipt = &r
	}
	c.PendingQueueCommands = append([]PendingCommand{}, s.PendingQueueCommands...)
	c.PendingApprovals = cloneMap(s.PendingApprovals)
	c.PendingInputs = cloneMap(s.PendingInputs)
	c.Tools = cloneMap(s.Tools)
	if s.Compaction != nil {
		x := *s.Compaction
		c.Compaction = &x
	}
	c.ModelMetadata = cloneMap(s.ModelMetadata)
	c.PendingHandlers = cloneMap(s.PendingHandlers)
	c.Usage = cloneMap(s.Usage)
	if s.Error != nil {
		e := *s.Error
		c.Error = &e
	}
	if s.Calibration != nil {
		x := *s.Calibration
		c.Calibration = &x
	}
	if s.ActiveGeneration != nil {
		g := *s.ActiveGeneration
		c.ActiveGeneration = &g
	}
	if s.ActiveProjection != nil {
		p := *s.ActiveProjection
		// Cap the entries so that an append on either copy reallocates.
		p.Entries = p.Entries[:len(p.Entries):len(p.Entries)]
		p.Open = cloneMap(p.Open)
		p.ToolInput = cloneMap(p.ToolInput)
		p.text = nil
		c.ActiveProjection = &p
	}
	c.ResponseOwners = cloneMap(s.ResponseOwners)
	c.TerminalRequestIDs = cloneMap(s.TerminalRequestIDs)
	c.TerminalGenerations = cloneMap(s.TerminalGenerations)
	c.idx = nil
	if x := s.index(); x != nil {
		c.idx = x.cloneFor(&c)
	}
	return &c
}

// Idle says whether nothing runs or waits in the session: no turn, no
// generation request, no queued input (unless the inbox is paused), no
// command awaiting its decision.
func (s *AIState) Idle() bool {
	return s.Active == nil && s.ActiveRequestID == "" && len(s.PendingQueueCommands) == 0 &&
		(len(s.Inbox.Items) == 0 || s.Inbox.Paused)
}

// IsActiveResponse says whether message id is the response a generation
// writes or may write again: the one message later folds change. Every
// other message is settled and never changes again (the random sessions'
// check, protocol's fuzz tests), which is what a cache of a transcript's
// messages may rely on.
func (s *AIState) IsActiveResponse(id string) bool { return s.isActiveResponse(id) }

// activeResponses are the responses the active request, turn and
// projection write ("" where there is none).
func (s *AIState) activeResponses() [3]string {
	out := [3]string{s.ActiveResponseMessageID}
	if s.Active != nil {
		out[1] = s.Active.ResponseMessageID
	}
	if s.ActiveProjection != nil {
		out[2] = s.ActiveProjection.ResponseMessageID
	}
	return out
}

// isActiveResponse reports whether id is one of activeResponses.
func (s *AIState) isActiveResponse(id string) bool {
	if id == "" {
		return false
	}
	r := s.activeResponses()
	return slices.Contains(r[:], id)
}

func cloneInbox(items []InboxItem) []InboxItem {
	out := make([]InboxItem, len(items))
	copy(out, items)
	return out
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return nil
	}
	// maps.Clone copies the map's tables as they are, without hashing and
	// inserting each entry again.
	return maps.Clone(m)
}

// MarshalState encodes the state as JSON (the snapshot encoding).
func MarshalState(s *AIState) ([]byte, error) { return json.Marshal(s) }

// UnmarshalState decodes a state encoded by MarshalState.
func UnmarshalState(b []byte) (*AIState, error) {
	s := &AIState{}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, err
	}
	s.normalize()
	return s, nil
}

// message returns a pointer to the message with the given ID, or nil.
// MessageByID returns the message with id, or nil.
func (s *AIState) MessageByID(id string) *UIMessage { return s.message(id) }

func (s *AIState) message(id string) *TranscriptMessage {
	if i := s.messagePos(id); i >= 0 {
		return &s.Messages[i]
	}
	return nil
}

// messagePos is the position of the last message with id, -1 for none.
func (s *AIState) messagePos(id string) int {
	if n := len(s.Messages); n > 0 && s.Messages[n-1].ID == id {
		return n - 1 // the active response, mostly
	}
	if x := s.index(); x != nil {
		if i, ok := x.messages[id]; ok && s.Messages[i].ID == id {
			return i
		} else if !ok {
			return -1
		}
	}
	for i := len(s.Messages) - 1; i >= 0; i-- {
		if s.Messages[i].ID == id {
			return i
		}
	}
	return -1
}

// inboxIndex returns the queue position of a pending input, or -1.
func (s *AIState) inboxIndex(id string) int {
	for i := range s.Inbox.Items {
		if s.Inbox.Items[i].ID == id {
			return i
		}
	}
	return -1
}

// StepMessages is a copy of messages, messages of s's transcript (a model
// context of it), for a model step to read while s goes on folding: the
// active response's parts are copied, the one message folds change in
// place; the other messages' parts are shared, as no fold changes them
// (the random-session simulation checks every fold for it). They must not
// be changed.
func StepMessages(s *AIState, messages []TranscriptMessage) []TranscriptMessage {
	out := make([]TranscriptMessage, len(messages))
	copy(out, messages)
	for i := range out {
		if m := &out[i]; s.isActiveResponse(m.ID) || m.Parts == nil {
			m.Parts = append(make([]Part, 0, len(m.Parts)), m.Parts...)
		}
	}
	return out
}
