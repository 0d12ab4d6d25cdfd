package protocol

// Inputs holds the pure builders of ai.control.requested commands (`inputs`
// of A2's TypeScript API), for server appends and client pushes (R-INPUT-01).
//
// IDs (R-LOG-02..04): message, seed and steer commands use the message ID as
// their event ID; approval, input-response and retry commands use stable
// interaction IDs derived from what they answer, so a resubmission is an
// identical event; every other builder leaves Event.ID empty for the pusher
// to assign and keep across transport retries.
var Inputs inputs

type inputs struct {
	// Queue holds the inbox builders.
	Queue queueInputs
}

type queueInputs struct{}

func command(id string, c Command) Event {
	return Event{ID: id, Type: TypeControlRequested, Payload: mustJSON(c)}
}

// MessageOptions are the options of Inputs.Message.
type MessageOptions struct {
	// Generate false records the input as passive context at admission
	// (R-INPUT-02). Nil means true.
	Generate *bool
}

// Message queues an input (R-INPUT-02).
func (inputs) Message(m UIMessage, o MessageOptions) Event {
	return command(m.ID, Command{Action: ActionSend, Message: &m, Generate: o.Generate})
}

// Text queues a user message of one text part.
func (i inputs) Text(id, text string) Event {
	return i.Message(UIMessage{ID: id, Role: RoleUser, Parts: []Part{{Type: PartText, Text: text}}}, MessageOptions{})
}

// Seed queues passive context (R-INPUT-03); a non-user role requires a
// trusted append.
func (inputs) Seed(m UIMessage) Event {
	f := false
	return command(m.ID, Command{Action: ActionSend, Message: &m, Generate: &f})
}

// ApprovalResponse answers a pending tool approval; RequestID and
// GenerationID are copied from the pending approval (R-APPROVAL-04).
type ApprovalResponse struct {
	ApprovalID   string
	ToolCallID   string
	Approved     bool
	Reason       string
	RequestID    string
	GenerationID string
}

// Approval answers a pending tool approval (R-INPUT-04), with a stable
// interaction ID (R-LOG-03).
func (inputs) Approval(r ApprovalResponse) Event {
	approved := r.Approved
	verdict := "deny"
	if approved {
		verdict = "approve"
	}
	return command(IdempotentID("a2.approval", r.GenerationID, r.ApprovalID, verdict), Command{
		Action: ActionApproval, ApprovalID: r.ApprovalID, ToolCallID: r.ToolCallID, Approved: &approved,
		Reason: r.Reason, RequestID: r.RequestID, GenerationID: r.GenerationID,
	})
}

// InputResponse answers a pending application input.
type InputResponse struct {
	InputID      string
	Value        []byte // JSON
	RequestID    string
	GenerationID string
}

// Input answers a pending application input (R-INPUT-05), with a stable
// interaction ID (R-LOG-03).
func (inputs) Input(r InputResponse) Event {
	return command(IdempotentID("a2.input", r.GenerationID, r.InputID), Command{
		Action: ActionInput, InputID: r.InputID, Value: r.Value, RequestID: r.RequestID, GenerationID: r.GenerationID,
	})
}

// InputRequest is an application input request from trusted code.
type InputRequest struct {
	InputID      string
	Request      []byte // JSON shown to the user
	RequestID    string
	GenerationID string
}

// RequestInput requests application input; trusted server code only
// (R-INPUT-06).
func (inputs) RequestInput(r InputRequest) Event {
	return command("", Command{Action: ActionRequestInput, InputID: r.InputID, Request: r.Request, RequestID: r.RequestID, GenerationID: r.GenerationID})
}

// RetryOptions name the failed response to retry; RetryID is fresh per user
// action (R-RETRY-01).
type RetryOptions struct {
	MessageID         string
	ResponseMessageID string
	RetryID           string
}

// Retry retries a failed response (R-INPUT-07), with a stable interaction
// ID derived from RetryID (R-LOG-03).
func (inputs) Retry(o RetryOptions) Event {
	return command(IdempotentID("a2.retry", o.ResponseMessageID, o.RetryID), Command{
		Action: ActionRetry, MessageID: o.MessageID, ResponseMessageID: o.ResponseMessageID, RetryID: o.RetryID,
	})
}

// Stop ends the observed turn (R-INPUT-08). lastSeenIndex, when set, is the
// projection entry the user saw last.
func (inputs) Stop(turnID string, lastSeenIndex *int64) Event {
	return command("", Command{Action: ActionStop, TurnID: &turnID, LastSeenIndex: lastSeenIndex})
}

// Steer queues m after the observed turn's earlier steering, or first, for
// a handoff after the turn's current step (R-INPUT-09). turnID nil means no
// turn was observed.
func (inputs) Steer(turnID *string, m UIMessage, lastSeenIndex *int64) Event {
	return command(m.ID, Command{Action: ActionSteer, TurnID: turnID, Message: &m, LastSeenIndex: lastSeenIndex})
}

// Pause pauses execution now or inbox admission after the turn
// (R-INPUT-14).
func (inputs) Pause(when string) Event { return command("", Command{Action: ActionPause, When: when}) }

// Resume resumes retained work, then inbox admission (R-INPUT-15).
func (inputs) Resume() Event { return command("", Command{Action: ActionResume}) }

// ToolResult is a deferred provider-executed tool result.
type ToolResult struct {
	ToolCallID   string
	GenerationID string
	Output       []byte // JSON; or ErrorText
	ErrorText    string
}

// ToolResult records a deferred provider-executed tool result; trusted
// server code only (R-INPUT-16).
func (inputs) ToolResult(r ToolResult) Event {
	return command("", Command{Action: ActionToolResult, ToolCallID: r.ToolCallID, GenerationID: r.GenerationID, Output: r.Output, ErrorText: r.ErrorText})
}

// InterruptOptions name the owner to interrupt: RequestID before its
// generation starts, GenerationID after (R-STOP-06).
type InterruptOptions struct {
	MessageID     string
	RequestID     string
	GenerationID  string
	Reason        string
	LastSeenIndex *int64
}

// Interrupt interrupts a specific generation or request owner (R-INPUT-17).
func (inputs) Interrupt(o InterruptOptions) Event {
	return command("", Command{Action: ActionInterrupt, MessageID: o.MessageID, RequestID: o.RequestID,
		GenerationID: o.GenerationID, Reason: o.Reason, LastSeenIndex: o.LastSeenIndex})
}

// Edit changes a pending input; its ID is m.ID and stays fixed
// (R-INPUT-10).
func (queueInputs) Edit(m UIMessage) Event {
	return command("", Command{Action: ActionEdit, Message: &m})
}

// Move moves a pending input before beforeID; nil means the end
// (R-INPUT-11).
func (queueInputs) Move(inputID string, beforeID *string) Event {
	return command("", Command{Action: ActionMove, InputID: inputID, BeforeID: beforeID})
}

// Remove removes a pending input; its submission stays in the log
// (R-INPUT-12).
func (queueInputs) Remove(inputID string) Event {
	return command("", Command{Action: ActionRemove, InputID: inputID})
}

// SendNow promotes a queued input for a handoff after the observed turn's
// current step; turnID nil means the session was observed idle
// (R-INPUT-13). The payload always carries turnId, null when idle.
func (queueInputs) SendNow(inputID string, turnID *string, lastSeenIndex *int64) Event {
	c := Command{Action: ActionSendNow, InputID: inputID, TurnID: turnID, LastSeenIndex: lastSeenIndex}
	ev := command("", c)
	if turnID == nil {
		ev.Payload = append(ev.Payload[:len(ev.Payload)-1], []byte(`,"turnId":null}`)...)
	}
	return ev
}
