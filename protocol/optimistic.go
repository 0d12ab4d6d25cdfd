package protocol

import (
	"encoding/json"
	"slices"
)

// Overlay is a client's list of pushed commands that have no decision yet,
// and the optimistic state it shows over the confirmed state (R-OPT-01):
// pending send, edit, move, remove, Send now, steer, pause, resume and Stop
// commands appear in messages, inbox, active and starting with no extra
// I/O. A command retires when its ai.control.decided receipt is observed or
// the session closes (R-OPT-09); a push that failed is dropped with Fail,
// which rolls its display back. The zero Overlay is ready to use; it is not
// safe for concurrent use.
type Overlay struct {
	pending []Event
}

// Push records a command or application event pushed (or being pushed) to
// the session.
func (o *Overlay) Push(ev Event) {
	if ev.Type == TypeControlRequested || !IsBuiltinType(ev.Type) {
		o.pending = append(o.pending, ev)
	}
}

// Fail drops a command whose push failed: its display rolls back.
func (o *Overlay) Fail(id string) {
	o.pending = slices.DeleteFunc(o.pending, func(ev Event) bool { return ev.ID == id })
}

// Observe retires pending commands as confirmed events arrive: a command on
// its receipt, all of them when the session closes.
func (o *Overlay) Observe(ev Event) {
	if !IsBuiltinType(ev.Type) {
		o.Fail(ev.ID) // an application event is confirmed by its own arrival
		return
	}
	switch ev.Type {
	case TypeControlDecided:
		var d Decided
		if json.Unmarshal(ev.Payload, &d) == nil {
			o.Fail(d.CommandID)
		}
	case TypeSessionClosed:
		o.pending = nil
	}
}

// Pending returns the commands that have no decision yet, in push order.
func (o *Overlay) Pending() []Event { return slices.Clone(o.pending) }

// View returns the state to show: Optimistic(confirmed, o.Pending()).
func (o *Overlay) View(confirmed *AIState) *AIState { return Optimistic(confirmed, o.pending) }

// Optimistic returns the state a client shows before its pending commands
// are decided (R-OPT-01..R-OPT-07), computed from the confirmed state and
// the pending commands alone. confirmed is not modified.
//
//   - An idle, unpaused generating send joins messages at once with
//     starting true: a speculative turn, not a running model (R-OPT-02). An
//     idle, unpaused passive send joins messages without starting (OQ-45).
//     Every other send waits in the inbox (R-OPT-03), after the confirmed
//     items, so a confirmed turn always wins over a speculative one
//     (R-OPT-04).
//   - Steering and Send now aimed at the active turn show in messages after
//     the current response, in the order sent, until admission; confirmed
//     steering items in the inbox show there too, so the display survives
//     the receipt and hydration (R-OPT-05).
//   - Edits, moves and removes apply to the displayed queue in push order,
//     so later local edits stay visible through earlier receipts (R-OPT-08).
//   - A pending Stop clears active, the generation and pending approvals and
//     inputs, previews idle (paused when the inbox is), freezes the response
//     at lastSeenIndex, and previews a running compaction part as
//     interrupted (R-OPT-06, R-OPT-07).
func Optimistic(confirmed *AIState, pending []Event) *AIState {
	v := confirmed.Clone()
	v.Starting = false
	for _, ev := range pending {
		if ev.Type != TypeControlRequested {
			continue
		}
		c, err := ParseCommand(ev.Payload)
		if err != nil {
			continue
		}
		v.preview(ev.ID, &c)
	}
	v.showSteering()
	v.deriveStatusView()
	return v
}

// preview applies one pending command to the displayed state.
func (v *AIState) preview(id string, c *Command) {
	if v.Session.Status == SessionStatusClosed {
		return
	}
	switch c.Action {
	case ActionSend:
		if c.Message == nil || v.message(c.Message.ID) != nil || v.inboxIndex(c.Message.ID) >= 0 {
			return
		}
		it := InboxItem{ID: c.Message.ID, Role: c.Message.Role, Message: *c.Message, Generate: c.generate(), CommandID: id}
		idle := v.Active == nil && !v.Starting && !v.Inbox.Paused && len(v.Inbox.Items) == 0
		if idle && it.Role == RoleUser {
			v.Messages = append(v.Messages, it.Message)
			v.Starting = it.Generate
			return
		}
		v.Inbox.Items = append(v.Inbox.Items, it)
	case ActionSteer:
		if c.Message == nil || v.message(c.Message.ID) != nil || v.inboxIndex(c.Message.ID) >= 0 {
			return
		}
		if v.Active == nil && !v.Starting && !v.Inbox.Paused && len(v.Inbox.Items) == 0 {
			// An idle steer is displayed exactly like a send (OQ-45).
			v.Messages = append(v.Messages, *c.Message)
			v.Starting = true
			return
		}
		it := InboxItem{ID: c.Message.ID, Role: c.Message.Role, Message: *c.Message, Generate: true, CommandID: id}
		if c.TurnID != nil {
			it.AfterStepOf = *c.TurnID
		}
		v.Inbox.Items = slices.Insert(v.Inbox.Items, v.steeringPosition(it.AfterStepOf), it)
	default:
		if v.judge(id, c) != "" {
			return // it would be rejected: show nothing of it
		}
		if c.Action == ActionStop {
			v.previewStop(c)
			return
		}
		if c.Action == ActionEdit || c.Action == ActionMove || c.Action == ActionRemove ||
			c.Action == ActionSendNow || c.Action == ActionPause || c.Action == ActionResume {
			v.applyCommand(id, c)
		}
	}
}

// previewStop shows a pending Stop: the turn ends at the frontier the user
// saw.
func (v *AIState) previewStop(c *Command) {
	if pr := v.ActiveProjection; pr != nil && c.LastSeenIndex != nil {
		v.cutProjection(int(*c.LastSeenIndex))
	}
	if a := v.Active; a != nil && a.ResponseMessageID != "" {
		v.closeResponse(a.ResponseMessageID, false)
	}
	v.endTurn()
}

// showSteering moves the queue's steering for the active turn out of the
// inbox and into messages, after the current response (R-OPT-05).
func (v *AIState) showSteering() {
	a := v.Active
	if a == nil {
		return
	}
	var keep []InboxItem
	for _, it := range v.Inbox.Items {
		if it.AfterStepOf == a.TurnID && it.Role == RoleUser {
			v.Messages = append(v.Messages, it.Message)
			continue
		}
		keep = append(keep, it)
	}
	if keep == nil {
		keep = []InboxItem{}
	}
	v.Inbox.Items = keep
}

// deriveStatusView derives the status of a displayed state: a speculative
// turn is awaiting acceptance.
func (v *AIState) deriveStatusView() {
	v.deriveStatus()
	if v.Starting && v.Active == nil {
		v.Status = StatusSubmitted
	}
}

// Indicator values (R-CLIENT-10, OQ-44).
const (
	IndicatorStarting   = "starting"
	IndicatorCompacting = "compacting"
	IndicatorThinking   = "thinking"
)

// Indicator returns what a client shows about activity, in this precedence
// (OQ-44): "starting" for an optimistic turn awaiting acceptance,
// "compacting" while a summary runs, "thinking" while the current step has
// no visible part yet (reasoning and step boundaries do not count), else "".
func Indicator(v *AIState) string {
	switch {
	case v.Starting:
		return IndicatorStarting
	case v.Compaction != nil && v.Compaction.Status == CompactionStatusRunning:
		return IndicatorCompacting
	}
	a := v.Active
	if a == nil || a.Phase != PhaseRunning || a.Failed {
		return ""
	}
	g := v.ActiveGeneration
	if g == nil || g.State != "streaming" {
		if v.ActiveRequestID != "" {
			return IndicatorThinking
		}
		return ""
	}
	pr := v.ActiveProjection
	msg := v.message(g.ResponseMessageID)
	if pr == nil || msg == nil {
		return IndicatorThinking
	}
	for i := len(msg.Parts) - 1; i >= pr.Base && i >= 0; i-- {
		p := msg.Parts[i]
		switch {
		case p.Type == PartStepStart:
			return IndicatorThinking
		case p.Type == PartReasoning, p.IsDataPart():
			continue
		case p.Type == PartText && p.Text == "":
			continue
		default:
			return ""
		}
	}
	return IndicatorThinking
}

// View is the optimistic session state of a contract client: the AI state
// shown by Optimistic, and the application state with the pending events
// folded on top of the confirmed one, after the AI fold as on the server
// (R-OPT-12, R-CONTRACT-07). Only the standard AI reducer gets the
// optimistic AI display; a reducer that nests the AI fold sees confirmed
// events only (R-OPT-11).
func (c *Contract) View(confirmed *SessionState, o *Overlay) (*SessionState, error) {
	v := &SessionState{AI: o.View(confirmed.AI), App: confirmed.App}
	if c == nil || c.opts.Reducer == nil {
		return v, nil
	}
	for _, ev := range o.pending {
		next, err := c.opts.Reducer.fold(v.App, ev)
		if err != nil {
			return nil, err
		}
		v.App = next
	}
	return v, nil
}
