package client_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/gateway/gatewaytest"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// inboxTexts is the text of each queued input, in order.
func inboxTexts(st *protocol.AIState) []string {
	var out []string
	for _, it := range st.Inbox.Items {
		var b strings.Builder
		for _, p := range it.Message.Parts {
			b.WriteString(p.Text)
		}
		out = append(out, b.String())
	}
	return out
}

// inboxID is the ID of the queued input whose text is text.
func inboxID(t *testing.T, s *client.Session, text string) string {
	t.Helper()
	st := s.State()
	for i, got := range inboxTexts(st) {
		if got == text {
			return st.Inbox.Items[i].ID
		}
	}
	t.Fatalf("no queued input %q in %v", text, inboxTexts(st))
	return ""
}

// R-CLIENT-16 R-INPUT-02: the client's queue actions, each built from the
// state shown and confirmed by the server: a full message, an edit, a move,
// a removal and a send-now handoff after the running step.
func TestSessionQueueActions(t *testing.T) {
	n := gatewaytest.Start(t, gatewaytest.Options{Script: `{"replies":[{"match":"first","text":"one","gate":"g"}],"default":{"text":"ok"}}`})
	c := newClient(t, n.URL, client.Options{})
	s := open(t, c, "q1")
	ctx := testContext(t)
	if _, err := s.Send(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	waitConfirmed(t, s, "the first turn streaming", func(st *protocol.AIState) bool { return st.Status == protocol.StatusStreaming })
	turn := s.State().Active.TurnID
	if _, err := s.SendMessage(ctx, protocol.UIMessage{Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: "b"}}}, nil); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"c", "d"} {
		if _, err := s.Send(ctx, text); err != nil {
			t.Fatal(err)
		}
	}
	waitConfirmed(t, s, "three queued inputs", func(st *protocol.AIState) bool { return len(st.Inbox.Items) == 3 })
	b, cID, d := inboxID(t, s, "b"), inboxID(t, s, "c"), inboxID(t, s, "d")
	steps := []struct {
		name string
		act  func() (*client.PushResult, error)
		want string
	}{
		{"edit", func() (*client.PushResult, error) {
			return s.QueueEdit(ctx, protocol.UIMessage{ID: b, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: "B"}}})
		}, "B,c,d"},
		{"move", func() (*client.PushResult, error) { return s.QueueMove(ctx, d, &b) }, "d,B,c"},
		{"remove", func() (*client.PushResult, error) { return s.QueueRemove(ctx, cID) }, "d,B"},
	}
	for _, step := range steps {
		res, err := step.act()
		if err != nil || len(res.Events) != 1 {
			t.Fatalf("%s: %+v, %v", step.name, res, err)
		}
		waitConfirmed(t, s, step.name, func(st *protocol.AIState) bool { return strings.Join(inboxTexts(st), ",") == step.want })
	}
	if res, err := s.QueueSendNow(ctx, d); err != nil || len(res.Events) != 1 {
		t.Fatalf("send now: %+v, %v", res, err)
	}
	waitConfirmed(t, s, "d promoted after the running step", func(st *protocol.AIState) bool {
		return len(st.Inbox.Items) == 2 && st.Inbox.Items[0].AfterStepOf == turn
	})
	n.Model.Release("g")
	waitConfirmed(t, s, "every input answered", func(st *protocol.AIState) bool { return idle(st) && len(st.Messages) == 6 })
	st, _ := s.Confirmed()
	var users []string
	for _, m := range st.Messages {
		if m.Role == protocol.RoleUser {
			users = append(users, textOf(m))
		}
	}
	if strings.Join(users, ",") != "first,d,B" {
		t.Fatalf("user messages in order %v, want first, d, B", users)
	}
}

// R-CLIENT-14 R-APPROVAL-02: Approve and Deny answer a pending tool
// approval, and Respond answers an input a tool asked for; each is built
// from the state shown.
func TestSessionApprovalAndInputActions(t *testing.T) {
	var deploys atomic.Int64
	deploy := tools.Tool{Name: "deploy", NeedsApproval: func(json.RawMessage) bool { return true },
		Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			deploys.Add(1)
			return json.RawMessage(`{"deployed":true}`), nil
		}}
	ask := tools.Tool{Name: "ask", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		hc, err := tools.FromContext(ctx)
		if err != nil {
			return nil, err
		}
		v, err := hc.RequestInput(ctx, "color", json.RawMessage(`{"question":"which color?"}`))
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]json.RawMessage{"color": v})
	}}
	n := gatewaytest.Start(t, gatewaytest.Options{
		Script: `{"replies":[
			{"match":"deploy","toolCalls":[{"name":"deploy","input":{}}],"then":{"text":"done"}},
			{"match":"color","toolCalls":[{"name":"ask","input":{}}],"then":{"text":"noted"}}]}`,
		Agent: func(o *actors.AgentOptions) { o.Tools = []tools.Tool{deploy, ask} }})
	c := newClient(t, n.URL, client.Options{})
	ctx := testContext(t)
	toolState := func(st *protocol.AIState) string {
		for _, m := range st.Messages {
			for _, p := range m.Parts {
				if p.IsToolPart() {
					return p.State + " " + string(p.Output)
				}
			}
		}
		return ""
	}
	for _, tc := range []struct {
		session string
		approve bool
		want    string
		runs    int64
	}{
		{"approve", true, protocol.ToolOutputAvailable + ` {"deployed":true}`, 1},
		{"deny", false, protocol.ToolOutputDenied + " ", 1},
	} {
		s := open(t, c, tc.session)
		if _, err := s.Send(ctx, "deploy it"); err != nil {
			t.Fatal(err)
		}
		waitConfirmed(t, s, "the approval request", func(st *protocol.AIState) bool { return len(st.PendingApprovals) == 1 })
		var id string
		for k := range s.State().PendingApprovals {
			id = k
		}
		var res *client.PushResult
		var err error
		if tc.approve {
			res, err = s.Approve(ctx, id)
		} else {
			res, err = s.Deny(ctx, id, "not today")
		}
		if err != nil || len(res.Events) != 1 {
			t.Fatalf("%s: %+v, %v", tc.session, res, err)
		}
		waitConfirmed(t, s, "the answer", func(st *protocol.AIState) bool { return idle(st) && len(st.Messages) == 2 })
		st, _ := s.Confirmed()
		if got := toolState(st); got != tc.want || deploys.Load() != tc.runs {
			t.Fatalf("%s: tool part %q, %d deploys; want %q, %d", tc.session, got, deploys.Load(), tc.want, tc.runs)
		}
	}
	s := open(t, c, "respond")
	if _, err := s.Send(ctx, "pick a color"); err != nil {
		t.Fatal(err)
	}
	waitConfirmed(t, s, "the input request", func(st *protocol.AIState) bool { _, ok := st.PendingInputs["color"]; return ok })
	if res, err := s.Respond(ctx, "color", json.RawMessage(`"blue"`)); err != nil || len(res.Events) != 1 {
		t.Fatalf("respond: %+v, %v", res, err)
	}
	waitConfirmed(t, s, "the tool's answer", func(st *protocol.AIState) bool { return idle(st) && len(st.Messages) == 2 })
	st, _ := s.Confirmed()
	if got := toolState(st); got != protocol.ToolOutputAvailable+` {"color":"blue"}` {
		t.Fatalf("the asking tool's part: %q", got)
	}
}
