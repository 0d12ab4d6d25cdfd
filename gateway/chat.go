package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/a2-runtime/a2/protocol"
)

// The chat route speaks the AI SDK's chat transport (ai package, version
// 7): DefaultChatTransport posts {id, messages, trigger, messageId} to
// POST /v1/agents/{agent}/chat and reads the UI message stream protocol
// from the answer; reconnectToStream gets
// GET /v1/agents/{agent}/chat/{session}/stream. The session is the chat's
// id. docs/http.md §Chat documents it.

// chatBody is what DefaultChatTransport sends. Other fields (a user's own
// body) are ignored.
type chatBody struct {
	ID        string            `json:"id"`
	Messages  []json.RawMessage `json:"messages"`
	Trigger   string            `json:"trigger"`
	MessageID string            `json:"messageId"`
}

// Chat triggers of DefaultChatTransport.
const (
	triggerSubmit     = "submit-message"
	triggerRegenerate = "regenerate-message"
)

func (g *Gateway) chat(w http.ResponseWriter, r *http.Request) {
	done, ok := g.limitStream(w, r)
	if !ok {
		return
	}
	defer done()
	agent := r.PathValue("agent")
	raw, err := g.readJSONBody(w, r)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	var body chatBody
	if err := json.Unmarshal(raw, &body); err != nil {
		g.fail(w, r, invalid("body", "must be the chat transport's {id, messages, trigger}: %v", err))
		return
	}
	if err := protocol.ValidateCallerID("id", body.ID); err != nil {
		g.fail(w, r, err)
		return
	}
	session := body.ID
	if body.Trigger == "" {
		body.Trigger = triggerSubmit
	}
	if body.Trigger != triggerSubmit && body.Trigger != triggerRegenerate {
		g.fail(w, r, invalid("trigger", "must be %q or %q, not %q", triggerSubmit, triggerRegenerate, body.Trigger))
		return
	}
	if len(body.Messages) == 0 {
		g.fail(w, r, invalid("messages", "must hold at least the message to send"))
		return
	}
	if err := g.authorize(r, Operation{Type: OpRead, Agent: agent, Session: session}); err != nil {
		g.fail(w, r, err)
		return
	}
	st, _, err := g.router.State(r.Context(), agent, session)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	var (
		events []protocol.Event
		target chatTarget
	)
	last := len(body.Messages) - 1
	switch body.Trigger {
	case triggerSubmit:
		var head struct {
			ID   string `json:"id"`
			Role string `json:"role"`
		}
		_ = json.Unmarshal(body.Messages[last], &head)
		if head.Role == protocol.RoleAssistant {
			// The client answered approvals on the response (useChat's
			// addToolApprovalResponse, then sendAutomaticallyWhen).
			events, err = approvalAnswers(st.AI, body.Messages[last], last)
			// useChat continues its own copy of the response: the stream
			// goes on from the message it sent, not from the start.
			target = chatTarget{response: head.ID}
			var from protocol.UIMessage
			if json.Unmarshal(body.Messages[last], &from) == nil {
				target.from = &from
			}
		} else {
			events, err = sendEvent(body.Messages[last], last)
			target = chatTarget{input: head.ID}
		}
	case triggerRegenerate:
		a := st.AI.Active
		if a == nil || !a.Failed || a.ResponseMessageID == "" {
			g.fail(w, r, errorf(http.StatusConflict, CodeConflict, "trigger",
				"regenerate retries a failed response, and the session has none: send a new message instead"))
			return
		}
		retryID := a.LastStep
		if st.AI.Error != nil && st.AI.Error.GenerationID != "" {
			retryID = st.AI.Error.GenerationID
		}
		if retryID == "" {
			retryID = a.TurnID
		}
		events = []protocol.Event{protocol.Inputs.Retry(protocol.RetryOptions{
			MessageID: a.Input.ID, ResponseMessageID: a.ResponseMessageID, RetryID: retryID})}
		target = chatTarget{response: a.ResponseMessageID}
	}
	if err != nil {
		g.fail(w, r, err)
		return
	}
	if len(events) > 0 {
		if err := g.authorize(r, Operation{Type: OpPush, Agent: agent, Session: session, Events: events}); err != nil {
			g.fail(w, r, err)
			return
		}
		if err := g.limit.pushEvents(r, agent, session, len(events), eventBytes(events)); err != nil {
			g.fail(w, r, err)
			return
		}
		if _, err := g.router.Push(r.Context(), agent, session, events, false); err != nil {
			g.fail(w, r, err)
			return
		}
	}
	g.chatStream(w, r, agent, session, target, false)
}

// chatResume serves reconnectToStream: the active response's stream, or
// 204 when no response is under way.
func (g *Gateway) chatResume(w http.ResponseWriter, r *http.Request) {
	done, ok := g.limitStream(w, r)
	if !ok {
		return
	}
	defer done()
	agent, session := r.PathValue("agent"), r.PathValue("session")
	if err := g.authorize(r, Operation{Type: OpRead, Agent: agent, Session: session}); err != nil {
		g.fail(w, r, err)
		return
	}
	g.chatStream(w, r, agent, session, chatTarget{active: true}, true)
}

// chatTarget says which response a chat stream follows: a known response,
// the response to the input message input (once admitted), or the active
// turn's.
type chatTarget struct {
	response string
	input    string
	active   bool
	// from is the response as the client has it, when it continues it.
	from *protocol.UIMessage
}

// sendEvent builds the send command of a user message, with the errors of
// its validation named after the chat body's messages[i].
func sendEvent(raw json.RawMessage, i int) ([]protocol.Event, error) {
	var head struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(raw, &head)
	payload, err := json.Marshal(struct {
		Action  string          `json:"action"`
		Message json.RawMessage `json:"message"`
	}{protocol.ActionSend, raw})
	if err != nil {
		return nil, invalid(fmt.Sprintf("messages[%d]", i), "is not valid JSON")
	}
	ev := protocol.Event{ID: head.ID, Type: protocol.TypeControlRequested, Payload: payload}
	if _, err := protocol.ValidateCommand(ev, protocol.Untrusted); err != nil {
		return nil, renameField(err, "payload.message", fmt.Sprintf("messages[%d]", i), "id", fmt.Sprintf("messages[%d].id", i))
	}
	return []protocol.Event{ev}, nil
}

// approvalAnswers turns the approval answers of the response message the
// client sends back into approval commands, for the approvals the session
// still waits for.
func approvalAnswers(s *protocol.AIState, raw json.RawMessage, i int) ([]protocol.Event, error) {
	var msg protocol.UIMessage
	if err := json.Unmarshal(raw, &msg); err != nil {
		return nil, invalid(fmt.Sprintf("messages[%d]", i), "is not a UI message: %v", err)
	}
	var out []protocol.Event
	for _, p := range msg.Parts {
		if !p.IsToolPart() || p.Approval == nil || p.Approval.Approved == nil {
			continue
		}
		pa, ok := s.PendingApprovals[p.Approval.ID]
		if !ok {
			continue
		}
		out = append(out, protocol.Inputs.Approval(protocol.ApprovalResponse{
			ApprovalID: p.Approval.ID, ToolCallID: pa.ToolCallID, Approved: *p.Approval.Approved,
			Reason: p.Approval.Reason, RequestID: pa.RequestID, GenerationID: pa.GenerationID}))
	}
	return out, nil
}

// renameField renames the field of a validation error from the events
// route's names to the chat route's: each pair is (from, to), and from
// matches the field or its prefix before a "." or "[".
func renameField(err error, pairs ...string) error {
	e := classify(err)
	for k := 0; k+1 < len(pairs); k += 2 {
		from, to := pairs[k], pairs[k+1]
		if rest, ok := strings.CutPrefix(e.Field, from); ok && (rest == "" || rest[0] == '.' || rest[0] == '[') {
			e.Field = to + rest
			break
		}
	}
	return e
}

// chatStream answers with the UI message stream of the target's response:
// Server-Sent Events of UIMessageChunk JSON, ending with [DONE] when the
// response's turn ends, fails, or waits for an approval.
func (g *Gateway) chatStream(w http.ResponseWriter, r *http.Request, agent, session string, target chatTarget, resume bool) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ss, index, err := g.router.State(ctx, agent, session)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	s := ss.AI.Clone()
	c := &chatFollower{target: target, response: target.response}
	if c.response != "" {
		c.stream = protocol.NewUIStreamFrom(c.response, target.from)
	}
	if resume {
		// Nothing to resume unless a response is under way.
		if a := s.Active; a == nil || a.Failed || (s.Status == protocol.StatusAwaitingApproval) {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	events, errc, err := g.router.Subscribe(ctx, agent, session, index)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	w.Header().Set("X-Vercel-AI-UI-Message-Stream", "v1")
	bw, flush := g.startSSE(w)
	defer endSSE(bw)
	write := func(chunks []protocol.UIMessageChunk) {
		for _, ch := range chunks {
			b, err := json.Marshal(ch)
			if err != nil {
				continue
			}
			bw.WriteString("data: ")
			bw.Write(b)
			bw.WriteString("\n\n")
		}
	}
	done := c.step(s, nil, write)
	if flush() != nil {
		return
	}
	if !done {
		done = g.pump(ctx, events, errc, bw, flush, func(ev protocol.Event) bool {
			if err := protocol.Fold(s, ev); err != nil {
				g.opts.Logger.WarnContext(ctx, "gateway: a chat stream cannot fold an event", "session", session, "index", ev.Index, "err", err)
			}
			return c.step(s, &ev, write)
		}, func(err error) {
			write([]protocol.UIMessageChunk{{Type: protocol.ChunkError, ErrorText: classify(err).Message}})
		})
	}
	if !done {
		return
	}
	bw.WriteString("data: [DONE]\n\n")
	_ = flush()
}

// chatFollower follows one response through the session's states.
type chatFollower struct {
	target      chatTarget
	response    string
	stream      *protocol.UIStream
	interrupted bool
}

// step looks at the state after ev (nil: the state the stream starts
// from), writes the chunks it calls for, and reports whether the stream
// is done.
func (c *chatFollower) step(s *protocol.AIState, ev *protocol.Event, write func([]protocol.UIMessageChunk)) bool {
	if c.response == "" {
		if rejected, reason := c.rejected(s, ev); rejected {
			write([]protocol.UIMessageChunk{{Type: protocol.ChunkStart}, {Type: protocol.ChunkError, ErrorText: "the message was not accepted: " + reason}, {Type: protocol.ChunkFinish, FinishReason: "error"}})
			return true
		}
		c.response = c.resolve(s)
		if c.response == "" {
			if s.Session.Status == protocol.SessionStatusClosed {
				write([]protocol.UIMessageChunk{{Type: protocol.ChunkStart}, {Type: protocol.ChunkFinish, FinishReason: "other"}})
				return true
			}
			return false
		}
		c.stream = protocol.NewUIStream(c.response)
	}
	if ev != nil && ev.Type == protocol.TypeMessageInterrupted {
		var p protocol.MessageInterrupted
		if json.Unmarshal(ev.Payload, &p) == nil && p.MessageID == c.response {
			c.interrupted = true
		}
	}
	write(c.stream.Update(s.MessageByID(c.response)))
	a := s.Active
	switch {
	case c.stream.Broken():
		write(c.stream.Finish("error", "the response changed in a way this stream cannot show: read the session's state"))
	case a == nil || a.ResponseMessageID != c.response:
		reason := "stop"
		if c.interrupted || s.TerminalGenerations[s.ResponseOwners[c.response].GenerationID] == protocol.GenInterrupted {
			reason = "interrupted"
		}
		write(c.stream.Finish(reason, ""))
	case a.Failed:
		msg := "the response failed"
		if s.Error != nil && s.Error.Message != "" {
			msg = s.Error.Message
		}
		write(c.stream.Finish("error", msg))
	case s.Status == protocol.StatusAwaitingApproval:
		write(c.stream.Finish("tool-calls", ""))
	default:
		return false
	}
	return true
}

// resolve finds the response the stream follows, once it exists.
func (c *chatFollower) resolve(s *protocol.AIState) string {
	a := s.Active
	if c.target.active {
		if a != nil {
			if a.ResponseMessageID != "" {
				return a.ResponseMessageID
			}
			return s.ActiveResponseMessageID
		}
		return ""
	}
	if a != nil && a.Input.ID == c.target.input {
		if a.ResponseMessageID != "" {
			return a.ResponseMessageID
		}
		return s.ActiveResponseMessageID
	}
	// The turn may have ended already: its response follows its input.
	for i, m := range s.Messages {
		if m.ID == c.target.input && i+1 < len(s.Messages) && s.Messages[i+1].Role == protocol.RoleAssistant {
			return s.Messages[i+1].ID
		}
	}
	return ""
}

// rejected reports whether the input the stream waits for was refused.
func (c *chatFollower) rejected(s *protocol.AIState, ev *protocol.Event) (bool, string) {
	if c.target.input == "" {
		return false, ""
	}
	if ev == nil {
		if r := s.Receipt; r != nil && r.CommandID == c.target.input && r.Outcome == protocol.OutcomeRejected {
			return true, r.Reason
		}
		return false, ""
	}
	if ev.Type != protocol.TypeControlDecided {
		return false, ""
	}
	var d struct {
		CommandID string `json:"commandId"`
		Outcome   string `json:"outcome"`
		Reason    string `json:"reason"`
	}
	if json.Unmarshal(ev.Payload, &d) == nil && d.CommandID == c.target.input && d.Outcome == protocol.OutcomeRejected {
		return true, d.Reason
	}
	return false, ""
}
