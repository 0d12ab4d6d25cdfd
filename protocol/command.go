package protocol

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Control actions of ai.control.requested (OQ-01).
const (
	ActionSend         = "send"
	ActionEdit         = "edit"
	ActionMove         = "move"
	ActionRemove       = "remove"
	ActionSendNow      = "send-now"
	ActionSteer        = "steer"
	ActionStop         = "stop"
	ActionPause        = "pause"
	ActionResume       = "resume"
	ActionApproval     = "approval"
	ActionInput        = "input"
	ActionRequestInput = "request-input"
	ActionRetry        = "retry"
	ActionToolResult   = "tool-result"
	ActionInterrupt    = "interrupt"
)

// ActionsFor lists the actions a pusher of that trust may send, in a fixed
// order: browser ingress (Untrusted) all but request-input and
// tool-result, which are trusted server appends.
func ActionsFor(trust Trust) []string {
	actions := []string{ActionSend, ActionSteer, ActionEdit, ActionMove, ActionRemove, ActionSendNow,
		ActionStop, ActionPause, ActionResume, ActionRetry, ActionApproval, ActionInput, ActionInterrupt}
	if trust == Trusted {
		actions = append(actions, ActionRequestInput, ActionToolResult)
	}
	return actions
}

// Receipt outcomes and rejection reasons (R-INPUT-28, R-INPUT-29, OQ-05).
const (
	OutcomeApplied  = "applied"
	OutcomeRejected = "rejected"

	ReasonNotPending   = "not-pending"
	ReasonRoleMismatch = "role-mismatch"
	ReasonStaleTurn    = "stale-turn"
	ReasonNotFound     = "not-found"
	ReasonNotUserInput = "not-user-input"
	ReasonClosed       = "closed"
)

// ReasonSteeredAfterStep is the interruption reason A2 writes when steering
// ends a response. Callers may not use it (R-INPUT-25, R-STEER-10).
const ReasonSteeredAfterStep = "steered after step"

// Pause modes.
const (
	PauseNow       = "now"
	PauseAfterTurn = "after-turn"
)

// Command is the payload of ai.control.requested: an action and its
// arguments (OQ-01). Which fields an action takes is listed in
// docs/protocol.md; ValidateCommand enforces it.
type Command struct {
	Action string `json:"action"`

	Message  *UIMessage `json:"message,omitempty"`
	Generate *bool      `json:"generate,omitempty"`

	InputID  string  `json:"inputId,omitempty"`
	BeforeID *string `json:"beforeId,omitempty"`

	// TurnID is the observed turn; nil means the client saw no active turn.
	TurnID        *string `json:"turnId,omitempty"`
	LastSeenIndex *int64  `json:"lastSeenIndex,omitempty"`

	When string `json:"when,omitempty"`

	ApprovalID string `json:"approvalId,omitempty"`
	ToolCallID string `json:"toolCallId,omitempty"`
	Approved   *bool  `json:"approved,omitempty"`
	Reason     string `json:"reason,omitempty"`

	RequestID    string `json:"requestId,omitempty"`
	GenerationID string `json:"generationId,omitempty"`

	Value   json.RawMessage `json:"value,omitempty"`
	Request json.RawMessage `json:"request,omitempty"`

	MessageID         string `json:"messageId,omitempty"`
	ResponseMessageID string `json:"responseMessageId,omitempty"`
	RetryID           string `json:"retryId,omitempty"`

	Output    json.RawMessage `json:"output,omitempty"`
	ErrorText string          `json:"errorText,omitempty"`
}

// generate returns the command's generate flag, true when absent.
func (c *Command) generate() bool { return c.Generate == nil || *c.Generate }

// ParseCommand decodes an ai.control.requested payload strictly: unknown
// fields and trailing data are errors that name the field.
//
// The message is the exception: like the AI SDK, which strips the fields of a
// UIMessage it does not know, it is decoded leniently (the log keeps the
// payload as sent). ValidateCommand checks its shape.
func ParseCommand(payload json.RawMessage) (Command, error) {
	c, _, err := parseCommand(payload)
	return c, err
}

// parseCommand is ParseCommand, also returning the message as sent.
func parseCommand(payload json.RawMessage) (Command, json.RawMessage, error) {
	var w struct {
		Command
		// Message shadows Command.Message, so that the strict decoder
		// leaves it alone.
		Message json.RawMessage `json:"message,omitempty"`
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Command{}, nil, jsonError("payload", err)
	}
	if dec.More() {
		return Command{}, nil, invalid("payload", "has data after the JSON value")
	}
	c := w.Command
	if len(w.Message) > 0 && !isNull(w.Message) {
		c.Message = new(UIMessage)
		if err := json.Unmarshal(w.Message, c.Message); err != nil {
			// The validator names the offending value with its index.
			if verr := validateMessageJSON("payload.message", w.Message); verr != nil {
				return Command{}, nil, verr
			}
			return Command{}, nil, jsonError("payload.message", err)
		}
	}
	return c, w.Message, nil
}

func jsonError(field string, err error) error {
	switch e := err.(type) {
	case *json.UnmarshalTypeError:
		f := field
		if e.Field != "" {
			// The fields of an embedded Command (parseCommand) are the
			// payload's own.
			f = field + "." + strings.TrimPrefix(e.Field, "Command.")
		}
		return invalid(f, "has the wrong type: expected %s, got JSON %s", e.Type, e.Value)
	case *json.SyntaxError:
		return invalid(field, "is not valid JSON: %v", err)
	}
	return invalid(field, "%v", err)
}

// Trust says who is appending an event: browser ingress (untrusted) or
// server code (trusted append). A2's own handlers append internally and skip
// ingress validation.
type Trust int

const (
	// Untrusted is browser or HTTP client ingress.
	Untrusted Trust = iota
	// Trusted is server code: session(id).append in Go, or the node's admin
	// route.
	Trusted
)

// ValidateCommand checks an ai.control.requested event at ingress: the ID
// rules, the payload shape of its action, and the trust rules (R-LOG-02,
// R-LOG-05, R-LOG-06, R-INPUT-19..25, R-FETCH-02, R-FETCH-03). It looks at
// the event alone, never at session state; state-dependent outcomes are
// receipts from Decide. An error is a *ValidationError naming the field.
func ValidateCommand(ev Event, trust Trust) (Command, error) {
	if err := ValidateCallerID("id", ev.ID); err != nil {
		return Command{}, err
	}
	if ev.Type != TypeControlRequested {
		return Command{}, invalid("type", "is %q, want %q", ev.Type, TypeControlRequested)
	}
	c, rawMessage, err := parseCommand(ev.Payload)
	if err != nil {
		return Command{}, err
	}
	need := func(field string, ok bool) error {
		if !ok {
			return invalid("payload."+field, "is required for action %q", c.Action)
		}
		return nil
	}
	checkMessage := func() error {
		if c.Message == nil {
			return invalid("payload.message", "is required for action %q", c.Action)
		}
		return validateMessageJSON("payload.message", rawMessage)
	}
	switch c.Action {
	case ActionSend, ActionSteer:
		if err := checkMessage(); err != nil {
			return c, err
		}
		if c.Message.ID != ev.ID {
			return c, invalid("id", "must equal payload.message.id (%q) for action %q", c.Message.ID, c.Action)
		}
		if c.Action == ActionSteer && c.Message.Role != RoleUser {
			return c, invalid("payload.message.role", "must be %q for steer", RoleUser)
		}
		if trust == Untrusted && c.Message.Role != RoleUser {
			return c, invalid("payload.message.role", "is %q: browser ingress sends user messages only; non-user seeds are trusted appends", c.Message.Role)
		}
		if c.Action == ActionSteer && c.Generate != nil && !*c.Generate {
			return c, invalid("payload.generate", "must not be false for steer")
		}
	case ActionEdit:
		if err := checkMessage(); err != nil {
			return c, err
		}
		if trust == Untrusted && c.Message.Role != RoleUser {
			return c, invalid("payload.message.role", "is %q: browser ingress edits user messages only", c.Message.Role)
		}
	case ActionMove:
		if err := need("inputId", c.InputID != ""); err != nil {
			return c, err
		}
	case ActionRemove:
		if err := need("inputId", c.InputID != ""); err != nil {
			return c, err
		}
	case ActionSendNow:
		if err := need("inputId", c.InputID != ""); err != nil {
			return c, err
		}
		if !hasKey(ev.Payload, "turnId") {
			return c, invalid("payload.turnId", "is required for send-now (null when the session was idle)")
		}
	case ActionStop:
		if err := need("turnId", c.TurnID != nil && *c.TurnID != ""); err != nil {
			return c, err
		}
	case ActionPause:
		if c.When != PauseNow && c.When != PauseAfterTurn {
			return c, invalid("payload.when", "must be %q or %q", PauseNow, PauseAfterTurn)
		}
	case ActionResume:
	case ActionApproval:
		for _, f := range [][2]string{{"approvalId", c.ApprovalID}, {"requestId", c.RequestID}, {"generationId", c.GenerationID}} {
			if err := need(f[0], f[1] != ""); err != nil {
				return c, err
			}
		}
		if err := need("approved", c.Approved != nil); err != nil {
			return c, err
		}
	case ActionInput:
		for _, f := range [][2]string{{"inputId", c.InputID}, {"requestId", c.RequestID}, {"generationId", c.GenerationID}} {
			if err := need(f[0], f[1] != ""); err != nil {
				return c, err
			}
		}
	case ActionRequestInput:
		if trust == Untrusted {
			return c, invalid("payload.action", "%q is a trusted server append; browser ingress refuses it", c.Action)
		}
		for _, f := range [][2]string{{"inputId", c.InputID}, {"requestId", c.RequestID}, {"generationId", c.GenerationID}} {
			if err := need(f[0], f[1] != ""); err != nil {
				return c, err
			}
		}
	case ActionRetry:
		for _, f := range [][2]string{{"messageId", c.MessageID}, {"responseMessageId", c.ResponseMessageID}, {"retryId", c.RetryID}} {
			if err := need(f[0], f[1] != ""); err != nil {
				return c, err
			}
		}
	case ActionToolResult:
		if trust == Untrusted {
			return c, invalid("payload.action", "%q is a trusted server append; browser ingress refuses it", c.Action)
		}
		if err := need("toolCallId", c.ToolCallID != ""); err != nil {
			return c, err
		}
		if err := need("generationId", c.GenerationID != ""); err != nil {
			return c, err
		}
		if (len(c.Output) == 0) == (c.ErrorText == "") {
			return c, invalid("payload.output", "exactly one of output and errorText is required")
		}
	case ActionInterrupt:
		if err := need("messageId", c.MessageID != ""); err != nil {
			return c, err
		}
		if (c.RequestID == "") == (c.GenerationID == "") {
			return c, invalid("payload.requestId", "exactly one of requestId and generationId is required")
		}
		if c.Reason == ReasonSteeredAfterStep {
			return c, invalid("payload.reason", "%q is reserved for A2", ReasonSteeredAfterStep)
		}
	case "":
		return c, invalid("payload.action", "is required: one of %s", quotedList(ActionsFor(trust)))
	default:
		return c, invalid("payload.action", "is unknown: %q%s; the actions are %s", c.Action, didYouMean(c.Action, ActionsFor(trust)), quotedList(ActionsFor(trust)))
	}
	if c.LastSeenIndex != nil && *c.LastSeenIndex < -1 {
		return c, invalid("payload.lastSeenIndex", "must be -1 or more")
	}
	return c, nil
}

func hasKey(payload json.RawMessage, key string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(payload, &m) != nil {
		return false
	}
	_, ok := m[key]
	return ok
}
