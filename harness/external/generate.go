package external

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools/sandbox"
)

// HarnessOptions are the agent's harness options for this loop: Generate,
// and Loop (its tools run without approval, R-HARNESS-05).
func (l *Loop) HarnessOptions(models actors.ModelProvider) actors.HarnessOptions {
	return actors.HarnessOptions{Generate: l.Generate(models), Loop: true, Sandbox: l.opts.Sandboxes}
}

// Generate returns the agent's custom generate (actors.HarnessOptions.
// Generate) that runs each model step through the loop. models serves the
// live model call: the agent's own models, so that every provider A2 has,
// and the script model, serve the loop. Give the agent the tools the loop
// calls (A2 runs them), and the loop the same tools (the run message
// carries the agent's).
func (l *Loop) Generate(models actors.ModelProvider) func(context.Context, actors.GenerateContext) (harness.Stream, error) {
	return func(ctx context.Context, gc actors.GenerateContext) (harness.Stream, error) {
		if models == nil {
			return nil, errors.New("external: Generate needs the agent's models")
		}
		history, steps, results := split(gc.ModelMessages)
		s := &step{l: l, ctx: ctx, gc: gc, models: models, history: history, steps: steps, results: results}
		if err := s.open(); err != nil {
			return nil, err
		}
		return s, nil
	}
}

// maxRunAttempts bounds the runs of one step whose loop process ended
// before the live call: a replay has no effect outside the loop, so it is
// run again with a new process.
const maxRunAttempts = 3

// open starts the step's run.
func (s *step) open() error {
	s.attempts++
	model, settings := s.gc.Model, s.gc.Generation
	var cwd string
	if sandboxes := s.l.opts.Sandboxes; sandboxes != nil {
		// A sandbox that cannot be had fails the step (as a provider's
		// error does; the reference retries the attempt, A2 does not yet).
		sb, err := sandbox.Resolve(s.ctx, sandboxes, s.gc.Event.Session)
		if err != nil {
			return fmt.Errorf("external: %w", err)
		}
		cwd = sb.WorkDir()
	}
	r, err := s.l.open(s.ctx, Message{Type: TypeRun, Run: s.l.newRunID(s.gc.GenerationID), Session: s.gc.Event.Session, Generation: s.gc.GenerationID,
		Model: &model, Instructions: s.gc.Instructions, Settings: &settings, Messages: s.history, Tools: s.gc.Tools, Cwd: cwd}, s.cold)
	if err != nil {
		return err
	}
	s.r = r
	return nil
}

// split cuts a step's prompt into the history (up to the last user
// message: the session as of the end of the last response, with the
// message that asked for this one) and the response so far: its earlier
// steps (each an assistant message, in order) and their tool results by
// call ID.
func split(messages []harness.ModelMessage) (history []harness.ModelMessage, steps [][]harness.ContentPart, results map[string]*harness.ToolOutput) {
	last := -1
	for i, m := range messages {
		if m.Role == harness.ModelRoleUser {
			last = i
		}
	}
	history = messages[:last+1]
	results = map[string]*harness.ToolOutput{}
	for _, m := range messages[last+1:] {
		switch m.Role {
		case harness.ModelRoleAssistant:
			steps = append(steps, m.Content)
		case harness.ModelRoleTool:
			for _, p := range m.Content {
				if p.Type == harness.ContentToolResult && p.Output != nil {
					results[p.ToolCallID] = p.Output
				}
			}
		}
	}
	return history, steps, results
}

// step is one model step's stream: it answers the loop's replayed calls,
// then streams the live call's chunks to the loop and to A2.
type step struct {
	l        *Loop
	ctx      context.Context
	r        *run
	attempts int
	cold     bool // the loop lacked the saved state it was named: whole histories
	gc       actors.GenerateContext
	models   actors.ModelProvider
	history  []harness.ModelMessage
	steps    [][]harness.ContentPart
	results  map[string]*harness.ToolOutput

	live    harness.Stream // the live model call, once asked
	call    int            // its number
	content assembler      // what it has said, for its model-result
	done    bool
	closed  bool
}

// Next implements harness.Stream.
func (s *step) Next() (protocol.UIMessageChunk, error) {
	if s.done {
		return protocol.UIMessageChunk{}, io.EOF
	}
	for s.live == nil {
		err := s.serve()
		if err == nil {
			continue
		}
		if errors.Is(err, errMissing) && !s.cold {
			// The loop no longer holds the state the run started from: the
			// run again, with the whole history (a longer rebuild, R-HARNESS-10).
			s.r.p.forget(s.gc.Event.Session)
			s.l.stats.missing.Add(1)
			s.cold = true
			s.r.close("missing")
			s.attempts--
			if err = s.open(); err == nil {
				continue
			}
		}
		if errors.Is(err, ErrExited) && s.attempts < maxRunAttempts && s.ctx.Err() == nil {
			// The process ended during the replay: again, with a new one.
			if err = s.open(); err == nil {
				continue
			}
		}
		s.finish(err.Error())
		return protocol.UIMessageChunk{}, err
	}
	// The live call is A2's: the loop only watches it, so a loop that
	// ends now does not end the step (what it would have been told is
	// dropped).
	c, err := s.live.Next()
	if err == io.EOF {
		if parts := s.content.parts(); s.content.finish == "stop" && finishOf(parts) == "stop" {
			// The response ends here: a warm loop saves its state now,
			// which stands for the step's prompt and this call's answer.
			msgs := append(append([]harness.ModelMessage(nil), s.gc.ModelMessages...), harness.ModelMessage{Role: harness.ModelRoleAssistant, Content: parts})
			s.r.p.expect(s.gc.Event.Session, s.r.id, msgs)
		}
		res := Message{Type: TypeModelResult, Run: s.r.id, Call: s.call, Content: s.content.parts(), FinishReason: s.content.finish, Usage: s.content.usage}
		_ = s.r.p.send(res)
		s.finish("")
		return protocol.UIMessageChunk{}, io.EOF
	}
	if err != nil {
		s.finish(err.Error())
		return protocol.UIMessageChunk{}, err
	}
	if c.Type == protocol.ChunkToolInputAvailable && s.r.p.hello.Check && (c.ProviderExec == nil || !*c.ProviderExec) {
		if c, err = s.check(c); err != nil {
			s.finish(err.Error())
			return protocol.UIMessageChunk{}, err
		}
	}
	s.content.add(c)
	chunk := c
	_ = s.r.p.send(Message{Type: TypeModelChunk, Run: s.r.id, Call: s.call, Chunk: &chunk})
	return c, nil
}

// serve takes the loop's next message and answers it; it returns once the
// live call is open, or with why the run failed.
func (s *step) serve() error {
	var m Message
	select {
	case m = <-s.r.in:
	case <-s.r.ended:
		return s.r.err
	case <-s.ctx.Done():
		return context.Cause(s.ctx)
	}
	switch m.Type {
	case TypeModel:
		switch {
		case m.Call >= 1 && m.Call <= len(s.steps):
			// Recorded: the step's content as the log has it.
			content := s.steps[m.Call-1]
			return s.r.p.send(Message{Type: TypeModelResult, Run: s.r.id, Call: m.Call, Replay: true, Content: content, FinishReason: finishOf(content)})
		case m.Call == len(s.steps)+1:
			return s.openLive(m)
		default:
			return s.refuse(fmt.Sprintf("model call %d: the response has %d recorded model calls, and this step is call %d", m.Call, len(s.steps), len(s.steps)+1))
		}
	case TypeTool:
		out, ok := s.results[m.ToolCallID]
		if !ok {
			return s.refuse(fmt.Sprintf("tool call %q (%s) has no recorded result: a run asks for the tools of its recorded model calls only", m.ToolCallID, m.ToolName))
		}
		return s.r.p.send(Message{Type: TypeToolResult, Run: s.r.id, ToolCallID: m.ToolCallID, ToolName: m.ToolName, Output: out})
	case TypeMissing:
		return errMissing
	case TypeDone:
		return errors.New("external: the agent loop ended the response before this step's model call")
	case TypeError:
		return fmt.Errorf("external: the agent loop failed: %s", m.Message)
	default:
		return s.refuse(fmt.Sprintf("unknown message type %q", m.Type))
	}
}

// openLive starts the live model call with the loop's prompt.
func (s *step) openLive(m Message) error {
	model, err := s.models(s.gc.Model.Model)
	if err != nil {
		return err
	}
	// The Gateway defaults of any A2 step (caching auto, the session's
	// stable affinity), as the reference gives FX's model calls: the
	// loop's own prompt, A2's call.
	settings := harness.WithGatewayDefaults(s.gc.Generation, s.gc.Event.Session)
	if m.Reasoning != "" {
		// The loop's level for this call (Pi's thinking level, which it
		// took from the step's model settings, R-HARNESS-21).
		if !slices.Contains(harness.ReasoningLevels, m.Reasoning) {
			return s.refuse(fmt.Sprintf("model call %d: reasoning %q is not one of %s", m.Call, m.Reasoning, strings.Join(harness.ReasoningLevels, ", ")))
		}
		settings = harness.WithModelSettings(settings, harness.ModelSettings{Reasoning: m.Reasoning})
	}
	req := harness.Request{Model: s.gc.Model.Model, System: m.System, Messages: m.Messages, Tools: m.Tools, Settings: settings,
		Headers: harness.RequestHeaders(nil, settings), SessionID: s.gc.Event.Session, GenerationID: s.gc.GenerationID}
	live, err := model.Stream(s.ctx, req)
	if err != nil {
		return err
	}
	s.live, s.call = live, m.Call
	return nil
}

// check has the loop check a tool call of the live call before A2 takes
// it (Pi's own check, R-HARNESS-20): the call goes on with the input as the
// loop coerced it (then A2's check against the tool's schema), or becomes
// an input error the model sees, and the tool does not run. A loop that
// ended meanwhile leaves the input as it is (A2's check still applies).
func (s *step) check(c protocol.UIMessageChunk) (protocol.UIMessageChunk, error) {
	if err := s.r.p.send(Message{Type: TypeCheck, Run: s.r.id, ToolCallID: c.ToolCallID, ToolName: c.ToolName, Input: c.Input}); err != nil {
		return c, nil
	}
	for {
		var m Message
		select {
		case m = <-s.r.in:
		case <-s.r.ended:
			return c, nil
		case <-s.ctx.Done():
			return c, context.Cause(s.ctx)
		}
		switch {
		case m.Type == TypeChecked && m.ToolCallID == c.ToolCallID && m.Message != "":
			return protocol.UIMessageChunk{Type: protocol.ChunkToolInputError, ToolCallID: c.ToolCallID, ToolName: c.ToolName,
				Input: c.Input, ErrorText: m.Message}, nil
		case m.Type == TypeChecked && m.ToolCallID == c.ToolCallID:
			if len(m.Input) > 0 {
				c.Input = m.Input
			}
			return c, nil
		case m.Type == TypeError:
			return c, fmt.Errorf("external: the agent loop failed: %s", m.Message)
		}
	}
}

// refuse tells the loop a call cannot be answered, and fails the run.
func (s *step) refuse(why string) error {
	_ = s.r.p.send(Message{Type: TypeRefused, Run: s.r.id, Message: why})
	return errors.New("external: " + why)
}

// finish ends the run (once).
func (s *step) finish(reason string) {
	if s.done {
		return
	}
	s.done = true
	if s.live != nil {
		_ = s.live.Close()
	}
	s.r.close(reason)
}

// Close implements harness.Stream.
func (s *step) Close() error {
	s.finish("closed")
	return nil
}

// errMissing: the loop does not hold the state the run started from.
var errMissing = errors.New("external: the agent loop does not hold the saved state the run started from")

// finishOf is a recorded step's finish reason: tool calls, or a stop.
func finishOf(content []harness.ContentPart) string {
	for _, p := range content {
		if p.Type == harness.ContentToolCall && !p.ProviderExecuted {
			return "tool-calls"
		}
	}
	return "stop"
}

// assembler builds a model call's content from its chunks, for the
// loop's model-result.
type assembler struct {
	out    []harness.ContentPart
	open   map[string]int // text and reasoning parts by chunk ID
	finish string
	usage  *protocol.Usage
}

func (a *assembler) add(c protocol.UIMessageChunk) {
	if a.open == nil {
		a.open = map[string]int{}
	}
	switch c.Type {
	case protocol.ChunkTextStart, protocol.ChunkReasoningStart:
		typ := harness.ContentText
		if c.Type == protocol.ChunkReasoningStart {
			typ = harness.ContentReasoning
		}
		a.open[c.Type[:4]+c.ID] = len(a.out)
		a.out = append(a.out, harness.ContentPart{Type: typ})
	case protocol.ChunkTextDelta, protocol.ChunkReasoningDelta:
		key := c.Type[:4] + c.ID
		i, ok := a.open[key]
		if !ok {
			typ := harness.ContentText
			if c.Type == protocol.ChunkReasoningDelta {
				typ = harness.ContentReasoning
			}
			i = len(a.out)
			a.open[key] = i
			a.out = append(a.out, harness.ContentPart{Type: typ})
		}
		a.out[i].Text += c.Delta
	case protocol.ChunkToolInputAvailable:
		input := c.Input
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		a.out = append(a.out, harness.ContentPart{Type: harness.ContentToolCall, ToolCallID: c.ToolCallID, ToolName: c.ToolName, Input: input})
	case protocol.ChunkFinish:
		a.finish = c.FinishReason
		a.usage = harness.TakeUsage(&c)
	}
}

// parts returns the content, without empty text.
func (a *assembler) parts() []harness.ContentPart {
	out := make([]harness.ContentPart, 0, len(a.out))
	for _, p := range a.out {
		if (p.Type == harness.ContentText || p.Type == harness.ContentReasoning) && strings.TrimSpace(p.Text) == "" {
			continue
		}
		out = append(out, p)
	}
	return out
}
