//go:build js && wasm

// Command wasm is A2's fold for the browser: protocol/ compiled to
// WebAssembly (GOOS=js GOARCH=wasm), so that a JavaScript client folds a
// session's events into the same AIState as the server and the Go client,
// shows the same optimistic state over it and builds the same commands for
// its actions, with no second implementation to keep in step
// (docs/clients.md).
//
// It sets globalThis.A2Fold, with JSON in and out (a handle is a number):
//
//	open()                      a session: its confirmed state and its pending commands
//	apply(h, events)            fold confirmed events (a JSON array), in order; "" or the error
//	restore(h, state)           replace the confirmed state (AIState JSON, GET …/state's); "" or the error
//	push(h, event)              a command being pushed: shown at once; "" or the error
//	fail(h, id)                 its push failed: its display rolls back
//	state(h)                    the confirmed AIState, as JSON
//	view(h)                     the optimistic AIState (confirmed, then pending), as JSON
//	indicator(h)                what to show of activity
//	act(h, action, args, newID) the events of an action on the view (a JSON array; "[]" when
//	                            there is nothing to address), newID a function giving fresh IDs;
//	                            throws on unknown actions or bad arguments
//	close(h)
//	fold(events)                the AIState of events, as JSON; throws on a bad log
//
// "Throws" is: returns an Error, which the client's wrapper throws (a Go
// function cannot throw into JavaScript). An event the fold refuses leaves
// the state as it was before it.
package main

import (
	"encoding/json"
	"fmt"
	"syscall/js"

	"github.com/a2-runtime/a2/protocol"
)

// session is a client's copy of one session.
type session struct {
	confirmed *protocol.AIState
	overlay   protocol.Overlay
}

func main() {
	sessions := map[int]*session{}
	next := 0
	get := func(args []js.Value) (*session, error) {
		if len(args) < 1 || args[0].Type() != js.TypeNumber {
			return nil, fmt.Errorf("A2Fold: the first argument is a session's handle")
		}
		s, ok := sessions[args[0].Int()]
		if !ok {
			return nil, fmt.Errorf("A2Fold: no session %d (closed?)", args[0].Int())
		}
		return s, nil
	}
	errString := func(err error) any {
		if err != nil {
			return err.Error()
		}
		return ""
	}
	api := js.Global().Get("Object").New()
	def := func(name string, f func(args []js.Value) (any, error), throws bool) {
		api.Set(name, js.FuncOf(func(_ js.Value, args []js.Value) any {
			v, err := f(args)
			if err != nil && throws {
				return js.Global().Get("Error").New(err.Error())
			}
			if err != nil {
				return err.Error()
			}
			return v
		}))
	}
	def("open", func([]js.Value) (any, error) {
		next++
		sessions[next] = &session{confirmed: protocol.NewAIState()}
		return next, nil
	}, false)
	def("apply", func(args []js.Value) (any, error) {
		s, err := get(args)
		if err == nil {
			err = fold(s, arg(args, 1))
		}
		return errString(err), nil
	}, false)
	def("restore", func(args []js.Value) (any, error) {
		s, err := get(args)
		if err != nil {
			return errString(err), nil
		}
		st, err := protocol.UnmarshalState([]byte(arg(args, 1)))
		if err != nil {
			return errString(fmt.Errorf("A2Fold.restore: the state: %w", err)), nil
		}
		s.confirmed = st
		return "", nil
	}, false)
	def("push", func(args []js.Value) (any, error) {
		s, err := get(args)
		if err != nil {
			return errString(err), nil
		}
		var ev protocol.Event
		if err := json.Unmarshal([]byte(arg(args, 1)), &ev); err != nil {
			return errString(fmt.Errorf("A2Fold.push: the event: %w", err)), nil
		}
		s.overlay.Push(ev)
		return "", nil
	}, false)
	def("fail", func(args []js.Value) (any, error) {
		s, err := get(args)
		if err == nil {
			s.overlay.Fail(arg(args, 1))
		}
		return errString(err), nil
	}, false)
	def("state", func(args []js.Value) (any, error) {
		s, err := get(args)
		if err != nil {
			return nil, err
		}
		return marshal(s.confirmed), nil
	}, true)
	def("view", func(args []js.Value) (any, error) {
		s, err := get(args)
		if err != nil {
			return nil, err
		}
		return marshal(s.overlay.View(s.confirmed)), nil
	}, true)
	def("indicator", func(args []js.Value) (any, error) {
		s, err := get(args)
		if err != nil {
			return nil, err
		}
		return protocol.Indicator(s.overlay.View(s.confirmed)), nil
	}, true)
	def("act", func(args []js.Value) (any, error) {
		s, err := get(args)
		if err != nil {
			return nil, err
		}
		if len(args) < 4 || args[3].Type() != js.TypeFunction {
			return nil, fmt.Errorf("A2Fold.act(h, action, args, newID): newID is a function giving fresh IDs")
		}
		newID := args[3]
		a := protocol.Actions{View: s.overlay.View(s.confirmed), NewID: func() string { return newID.Invoke().String() }}
		evs, err := act(a, arg(args, 1), arg(args, 2))
		if err != nil {
			return nil, err
		}
		if evs == nil {
			evs = []protocol.Event{}
		}
		return marshal(evs), nil
	}, true)
	def("close", func(args []js.Value) (any, error) {
		if len(args) > 0 && args[0].Type() == js.TypeNumber {
			delete(sessions, args[0].Int())
		}
		return nil, nil
	}, false)
	def("fold", func(args []js.Value) (any, error) {
		s := &session{confirmed: protocol.NewAIState()}
		if err := fold(s, arg(args, 0)); err != nil {
			return nil, err
		}
		return marshal(s.confirmed), nil
	}, true)
	js.Global().Set("A2Fold", api)
	select {}
}

// arg is argument i as a string ("" when missing).
func arg(args []js.Value, i int) string {
	if i >= len(args) || args[i].Type() != js.TypeString {
		return ""
	}
	return args[i].String()
}

func marshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// fold folds a JSON array of confirmed events into s, in order, stopping
// at the first the fold refuses (s keeps what came before it); each
// retires the pending commands it decides.
func fold(s *session, events string) error {
	var evs []protocol.Event
	if err := json.Unmarshal([]byte(events), &evs); err != nil {
		return fmt.Errorf("A2Fold: the events: %w", err)
	}
	for _, ev := range evs {
		if err := protocol.Fold(s.confirmed, ev); err != nil {
			return err
		}
		s.overlay.Observe(ev)
	}
	return nil
}

// act builds the events of one action (protocol.Actions) from its JSON
// arguments.
func act(a protocol.Actions, action, args string) ([]protocol.Event, error) {
	var in struct {
		Text       string              `json:"text"`
		Message    *protocol.UIMessage `json:"message"`
		Generate   *bool               `json:"generate"`
		ApprovalID string              `json:"approvalId"`
		Reason     string              `json:"reason"`
		InputID    string              `json:"inputId"`
		BeforeID   *string             `json:"beforeId"`
		Value      json.RawMessage     `json:"value"`
		When       string              `json:"when"`
	}
	if args != "" {
		if err := json.Unmarshal([]byte(args), &in); err != nil {
			return nil, fmt.Errorf("A2Fold.act %s: the arguments: %w", action, err)
		}
	}
	// What each action needs, checked before it is built.
	required := map[string]struct {
		ok   bool
		what string
	}{
		"sendMessage":  {in.Text != "", "text"},
		"send":         {in.Message != nil, "message"},
		"steer":        {in.Text != "", "text"},
		"approve":      {in.ApprovalID != "", "approvalId"},
		"deny":         {in.ApprovalID != "", "approvalId"},
		"respond":      {in.InputID != "" && len(in.Value) > 0, "inputId and value"},
		"pause":        {in.When == "now" || in.When == "after-turn", `when ("now" or "after-turn")`},
		"queueEdit":    {in.Message != nil && in.Message.ID != "", "message with its id"},
		"queueMove":    {in.InputID != "", "inputId"},
		"queueRemove":  {in.InputID != "", "inputId"},
		"queueSendNow": {in.InputID != "", "inputId"},
	}
	if r, ok := required[action]; ok && !r.ok {
		return nil, fmt.Errorf("A2Fold.act %s: %s is required", action, r.what)
	}
	switch action {
	case "sendMessage":
		return a.SendMessage(in.Text, in.Generate), nil
	case "send":
		return a.Send(*in.Message, in.Generate), nil
	case "steer":
		return a.Steer(in.Text), nil
	case "stop":
		return a.Stop(), nil
	case "approve":
		return a.Approve(in.ApprovalID), nil
	case "deny":
		return a.Deny(in.ApprovalID, in.Reason), nil
	case "respond":
		return a.Respond(in.InputID, in.Value), nil
	case "retry":
		return a.Retry(), nil
	case "pause":
		return a.Pause(in.When), nil
	case "resume":
		return a.Resume(), nil
	case "queueEdit":
		return a.QueueEdit(*in.Message), nil
	case "queueMove":
		return a.QueueMove(in.InputID, in.BeforeID), nil
	case "queueRemove":
		return a.QueueRemove(in.InputID), nil
	case "queueSendNow":
		return a.QueueSendNow(in.InputID), nil
	}
	return nil, fmt.Errorf("A2Fold.act: no action %q", action)
}
