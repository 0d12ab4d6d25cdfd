package actors

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// R-TOOL-09: a model step that outlives HarnessOptions.StepTimeout fails
// its generation with a timeout error; a tool call that runs longer than
// the step timeout is not cut short by it and its result reaches the model.
func TestStepTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	var ran atomic.Int64
	slow := tools.Tool{Name: "slow", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		select {
		case <-time.After(3 * timeout):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		ran.Add(1)
		return json.RawMessage(`"slept"`), nil
	}}
	f := newFixture(t, `{"replies":[
		{"match":"hang","text":"thinking about it","gate":"never"},
		{"match":"nap","toolCalls":[{"name":"slow","input":{}}],"then":{"text":"rested"}}]}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{slow}; a.Harness.StepTimeout = timeout })

	f.push("s1", protocol.Inputs.Text("m1", "hang on"))
	st := f.waitFor("s1", "the step to time out", func(s *protocol.AIState) bool { return s.Status == protocol.StatusFailed })
	if st.Error == nil || !strings.Contains(st.Error.Message, "timed out after 300ms") {
		t.Fatalf("a hung step failed with %+v, want a timeout error", st.Error)
	}

	f.push("s2", protocol.Inputs.Text("m2", "take a nap"))
	st = f.waitFor("s2", "the tool's turn", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "rested" })
	if ran.Load() != 1 {
		t.Fatalf("the slow tool completed %d times, want 1", ran.Load())
	}
	output := string(lastToolPart(st).Output)
	if output != `"slept"` {
		t.Fatalf("the slow tool's part has output %q, want its result", output)
	}
}

// R-APPROVAL-10: the generation's ToolApproval policy asks for approval
// like a tool's own predicate, and a Generation resolver governs it per
// step: here it asks only for production deploys.
func TestGenerationToolApproval(t *testing.T) {
	var deploys atomic.Int64
	var resolved atomic.Int64
	deploy := tools.Tool{Name: "deploy", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		deploys.Add(1)
		return json.RawMessage(`"ok"`), nil
	}}
	f := newFixture(t, `{"replies":[
		{"match":"staging","toolCalls":[{"name":"deploy","input":{"env":"staging"}}],"then":{"text":"staged"}},
		{"match":"prod","toolCalls":[{"name":"deploy","input":{"env":"prod"}}],"then":{"text":"released"}}]}`,
		func(a *AgentOptions) {
			a.Tools = []tools.Tool{deploy}
			a.Harness.GenerationFunc = func(context.Context, harness.ResolverContext) (harness.GenerationSettings, error) {
				resolved.Add(1)
				return harness.GenerationSettings{ToolApproval: func(name string, input json.RawMessage) bool {
					var in struct{ Env string }
					_ = json.Unmarshal(input, &in)
					return name == "deploy" && in.Env == "prod"
				}}, nil
			}
		})
	f.push("s1", protocol.Inputs.Text("m1", "deploy to staging"))
	st := f.waitFor("s1", "staged", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "staged" })
	if deploys.Load() != 1 || len(st.PendingApprovals) != 0 {
		t.Fatalf("staging: %d deploys, %d pending approvals", deploys.Load(), len(st.PendingApprovals))
	}
	f.push("s1", protocol.Inputs.Text("m2", "deploy to prod"))
	st = f.waitFor("s1", "the approval request", func(s *protocol.AIState) bool { return len(s.PendingApprovals) == 1 })
	if deploys.Load() != 1 {
		t.Fatal("the production deploy ran before approval")
	}
	approvalID := onlyApproval(t, st)
	f.push("s1", protocol.Actions{View: st, NewID: func() string { return "a1" }}.Approve(approvalID)...)
	f.waitFor("s1", "released", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "released" })
	if deploys.Load() != 2 {
		t.Fatalf("after approval: %d deploys, want 2", deploys.Load())
	}
	if resolved.Load() < 4 {
		t.Fatalf("the generation resolver ran %d times for four steps", resolved.Load())
	}
}

// toolAwareModel is an application's own model (the Go form of a custom
// generate): it calls the weather tool once, then answers from its result.
type toolAwareModel struct{ requestLog }

// requestLog records the requests a test model receives.
type requestLog struct {
	mu   sync.Mutex
	reqs []harness.Request
}

func (l *requestLog) record(req harness.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, req)
}

func (m *toolAwareModel) Stream(_ context.Context, req harness.Request) (harness.Stream, error) {
	m.record(req)
	var result *harness.ToolOutput
	for _, msg := range req.Messages {
		for _, c := range msg.Content {
			if c.Type == harness.ContentToolResult {
				result = c.Output
			}
		}
	}
	cs := []protocol.UIMessageChunk{{Type: protocol.ChunkStart}, {Type: protocol.ChunkStartStep}}
	finish := "tool-calls"
	if result == nil {
		in := json.RawMessage(`{"city":"Oslo"}`)
		cs = append(cs, protocol.UIMessageChunk{Type: protocol.ChunkToolInputStart, ToolCallID: "w1", ToolName: "weather"},
			protocol.UIMessageChunk{Type: protocol.ChunkToolInputAvailable, ToolCallID: "w1", ToolName: "weather", Input: in})
	} else {
		finish = "stop"
		cs = append(cs, protocol.UIMessageChunk{Type: protocol.ChunkTextStart, ID: "t"},
			protocol.UIMessageChunk{Type: protocol.ChunkTextDelta, ID: "t", Delta: "Oslo: " + result.Text()},
			protocol.UIMessageChunk{Type: protocol.ChunkTextEnd, ID: "t"})
	}
	cs = append(cs, protocol.UIMessageChunk{Type: protocol.ChunkFinishStep}, protocol.UIMessageChunk{Type: protocol.ChunkFinish, FinishReason: finish})
	return &chunkStream{chunks: cs}, nil
}

type chunkStream struct{ chunks []protocol.UIMessageChunk }

func (s *chunkStream) Next() (protocol.UIMessageChunk, error) {
	if len(s.chunks) == 0 {
		return protocol.UIMessageChunk{}, io.EOF
	}
	c := s.chunks[0]
	s.chunks = s.chunks[1:]
	return c, nil
}

func (s *chunkStream) Close() error { return nil }

// R-TOOL-10 R-TOOL-26: a tool-aware custom model receives the tool
// definitions exactly as the tool declares them (description and schema
// untouched, no executable part) and never runs the tool itself: A2 runs
// it once, durably, and the model continues from the result.
func TestCustomModelToolDefinitions(t *testing.T) {
	schema := `{"type":"object","properties":{"city":{"type":"string","description":"a city name"}},"required":["city"]}`
	var runs atomic.Int64
	weather := tools.Tool{Name: "weather", Description: "Current weather for a city.", InputSchema: json.RawMessage(schema),
		Execute: func(_ context.Context, input json.RawMessage) (json.RawMessage, error) {
			runs.Add(1)
			if !strings.Contains(string(input), "Oslo") {
				t.Errorf("the tool ran with input %s", input)
			}
			return json.RawMessage(`"sunny"`), nil
		}}
	m := &toolAwareModel{}
	f := newFixture(t, `{}`, func(a *AgentOptions) {
		a.Tools = []tools.Tool{weather}
		a.Models = func(string) (harness.Model, error) { return m, nil }
	})
	f.push("s1", protocol.Inputs.Text("m1", "weather in Oslo?"))
	f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "Oslo: sunny" })
	if runs.Load() != 1 {
		t.Fatalf("A2 ran the tool %d times, want 1", runs.Load())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.reqs) != 2 {
		t.Fatalf("the model saw %d requests, want 2", len(m.reqs))
	}
	for i, req := range m.reqs {
		if len(req.Tools) != 1 {
			t.Fatalf("request %d carries %d tool definitions", i, len(req.Tools))
		}
		d := req.Tools[0]
		if d.Name != "weather" || d.Description != weather.Description || string(d.InputSchema) != schema {
			t.Fatalf("request %d's tool definition was changed: %+v", i, d)
		}
	}
}

// R-APPROVAL-02 R-APPROVAL-04: trusted server code asks the user for
// application input during a running turn; the turn waits in
// awaiting-input after its step; an answer naming another generation
// changes nothing, and the matching answer (built from the pending request,
// as a client's respond does) releases the turn.
func TestApplicationInput(t *testing.T) {
	f := newFixture(t, `{"replies":[{"match":"plan","text":"which environment?","gate":"g1"}]}`, nil)
	f.push("s1", protocol.Inputs.Text("m1", "plan a deploy"))
	st := f.waitFor("s1", "streaming", func(s *protocol.AIState) bool { return s.Status == protocol.StatusStreaming })
	req, gen := st.ActiveGeneration.RequestID, st.ActiveGeneration.GenerationID
	ask := withID(protocol.Inputs.RequestInput(protocol.InputRequest{InputID: "env", Request: json.RawMessage(`{"question":"which environment?"}`),
		RequestID: req, GenerationID: gen}), "ask1")
	ctx := context.Background()
	if _, err := f.rt.Push(ctx, "assistant", "s1", []protocol.Event{ask}, true); err != nil {
		t.Fatalf("trusted request-input: %v", err)
	}
	f.model.Release("g1")
	st = f.waitFor("s1", "awaiting input", func(s *protocol.AIState) bool { return s.Status == protocol.StatusAwaitingInput })
	pi, ok := st.PendingInputs["env"]
	if !ok || string(pi.Request) != `{"question":"which environment?"}` || pi.RequestID != req || pi.GenerationID != gen {
		t.Fatalf("pending inputs %+v", st.PendingInputs)
	}
	late := withID(protocol.Inputs.Input(protocol.InputResponse{InputID: "env", Value: json.RawMessage(`"staging"`), RequestID: req, GenerationID: "an-older-step"}), "late1")
	_, err := f.rt.Push(ctx, "assistant", "s1", []protocol.Event{late}, true)
	if err != nil {
		t.Fatalf("a late answer is decided, not refused: %v", err)
	}
	st = f.waitFor("s1", "the late answer decided", func(s *protocol.AIState) bool { return s.Receipt != nil && s.Receipt.CommandID == "late1" })
	if st.Receipt.Outcome != "rejected" || st.Receipt.Reason != protocol.ReasonNotPending {
		t.Fatalf("late answer receipt %+v", st.Receipt)
	}
	if _, still := st.PendingInputs["env"]; !still || st.Status != protocol.StatusAwaitingInput {
		t.Fatalf("a late answer (push error %v) satisfied the request: %+v", err, st.PendingInputs)
	}
	answer := protocol.Actions{View: st, NewID: func() string { return "ans1" }}.Respond("env", json.RawMessage(`"prod"`))
	if len(answer) != 1 {
		t.Fatal("respond built no answer for a pending input")
	}
	f.push("s1", answer...)
	st = f.waitFor("s1", "the answered turn", func(s *protocol.AIState) bool { return idle(s) && len(s.PendingInputs) == 0 })
	if st.Status == protocol.StatusAwaitingInput || lastText(st) != "which environment?" {
		t.Fatalf("after the answer: status %s, last text %q", st.Status, lastText(st))
	}
}

// R-APPROVAL-02 R-APPROVAL-03: a tool asks the user for input through its
// handler context and waits: the turn shows awaiting-input with the
// request; the user's answer reaches the tool, whose result the model sees.
func TestToolRequestsInput(t *testing.T) {
	var asked atomic.Int64
	confirm := tools.Tool{Name: "confirm", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		hc, err := tools.FromContext(ctx)
		if err != nil {
			return nil, err
		}
		asked.Add(1)
		v, err := hc.RequestInput(ctx, "env", json.RawMessage(`{"question":"which environment?"}`))
		if err != nil {
			return nil, err
		}
		return json.RawMessage(`{"environment":` + string(v) + `}`), nil
	}}
	f := newFixture(t, `{"replies":[{"match":"deploy","toolCalls":[{"name":"confirm","input":{}}],"then":{"text":"deployed"}}]}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{confirm} })
	f.push("s1", protocol.Inputs.Text("m1", "deploy it"))
	st := f.waitFor("s1", "the tool's question", func(s *protocol.AIState) bool { return s.Status == protocol.StatusAwaitingInput })
	pi, ok := st.PendingInputs["env"]
	if !ok || string(pi.Request) != `{"question":"which environment?"}` || pi.GenerationID == "" || pi.RequestID == "" {
		t.Fatalf("pending inputs %+v", st.PendingInputs)
	}
	// Another command rejected while the tool waits (an answer to an input
	// nobody asked for) is not the tool's rejection: it keeps waiting for
	// its own answer (mutant runtime.go:578 failed the tool here).
	stray := protocol.Inputs.Input(protocol.InputResponse{InputID: "other", Value: json.RawMessage(`"x"`), RequestID: pi.RequestID, GenerationID: pi.GenerationID})
	f.push("s1", withID(stray, "stray"))
	f.waitFor("s1", "the stray answer rejected", func(s *protocol.AIState) bool {
		return s.Status == protocol.StatusAwaitingInput && s.Receipt != nil && s.Receipt.CommandID == "stray" && s.Receipt.Outcome == protocol.OutcomeRejected
	})
	f.push("s1", protocol.Actions{View: st, NewID: func() string { return "ans" }}.Respond("env", json.RawMessage(`"prod"`))...)
	st = f.waitFor("s1", "the answered turn", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "deployed" })
	if asked.Load() != 1 {
		t.Fatalf("the tool ran %d times", asked.Load())
	}
	output := string(lastToolPart(st).Output)
	if output != `{"environment":"prod"}` {
		t.Fatalf("the tool's output %q does not carry the answer", output)
	}
	calls := f.model.Calls()
	if b, _ := json.Marshal(calls[len(calls)-1].Messages); !strings.Contains(string(b), `prod`) {
		t.Fatalf("the model did not see the answer: %s", b)
	}
}

// providerApprovalModel calls a provider-executed tool that asks for
// approval; once the prompt carries the approval response it answers.
type providerApprovalModel struct{ requestLog }

func (m *providerApprovalModel) Stream(_ context.Context, req harness.Request) (harness.Stream, error) {
	m.record(req)
	var approved *bool
	for _, msg := range req.Messages {
		for _, c := range msg.Content {
			if c.Type == harness.ContentApprovalResponse {
				approved = c.Approved
			}
		}
	}
	yes := true
	cs := []protocol.UIMessageChunk{{Type: protocol.ChunkStart}, {Type: protocol.ChunkStartStep}}
	finish := "tool-calls"
	if approved == nil {
		cs = append(cs,
			protocol.UIMessageChunk{Type: protocol.ChunkToolInputStart, ToolCallID: "ws1", ToolName: "web_search", ProviderExec: &yes},
			protocol.UIMessageChunk{Type: protocol.ChunkToolInputAvailable, ToolCallID: "ws1", ToolName: "web_search", Input: json.RawMessage(`{"q":"a2"}`), ProviderExec: &yes},
			protocol.UIMessageChunk{Type: protocol.ChunkToolApproval, ToolCallID: "ws1", ApprovalID: "ap-ws1"})
	} else {
		finish = "stop"
		answer := "searched"
		if !*approved {
			answer = "not searched"
		}
		cs = append(cs, protocol.UIMessageChunk{Type: protocol.ChunkTextStart, ID: "t"},
			protocol.UIMessageChunk{Type: protocol.ChunkTextDelta, ID: "t", Delta: answer},
			protocol.UIMessageChunk{Type: protocol.ChunkTextEnd, ID: "t"})
	}
	cs = append(cs, protocol.UIMessageChunk{Type: protocol.ChunkFinishStep}, protocol.UIMessageChunk{Type: protocol.ChunkFinish, FinishReason: finish})
	return &chunkStream{chunks: cs}, nil
}

// R-APPROVAL-08: an approved provider-executed call satisfies the
// continuation join from its approval response alone: no result is
// submitted, the continuation runs and the provider sees the approval.
func TestProviderExecutedApproval(t *testing.T) {
	m := &providerApprovalModel{}
	f := newFixture(t, `{}`, func(a *AgentOptions) {
		a.Models = func(string) (harness.Model, error) { return m, nil }
	})
	f.push("s1", protocol.Inputs.Text("m1", "search for a2"))
	// The approval request arrives with the step's progress; the status is
	// awaiting-approval once the step has ended (until then it streams).
	st := f.waitFor("s1", "the approval request, awaiting approval", func(s *protocol.AIState) bool {
		return len(s.PendingApprovals) == 1 && s.Status == protocol.StatusAwaitingApproval
	})
	f.push("s1", protocol.Actions{View: st, NewID: func() string { return "ok" }}.Approve("ap-ws1")...)
	st = f.waitFor("s1", "the continuation", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "searched" })
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.reqs) != 2 {
		t.Fatalf("%d model requests, want the step and its continuation", len(m.reqs))
	}
	if st.Error != nil {
		t.Fatalf("error %+v", st.Error)
	}
}

// lastToolPart is the last tool part of the transcript's last message.
func lastToolPart(st *protocol.AIState) protocol.Part {
	var out protocol.Part
	for _, p := range st.Messages[len(st.Messages)-1].Parts {
		if p.ToolCallID != "" {
			out = p
		}
	}
	return out
}

// onlyApproval is the ID of the one pending approval.
func onlyApproval(t *testing.T, st *protocol.AIState) string {
	t.Helper()
	if len(st.PendingApprovals) != 1 {
		t.Fatalf("%d pending approvals, want 1", len(st.PendingApprovals))
	}
	for id := range st.PendingApprovals {
		return id
	}
	return ""
}

// Two tool calls of one step ask for the same input at once: the second
// request is rejected (the input is already pending), and its tool is
// told so at once instead of waiting for an answer that cannot come
// (mutant runtime.go:558 read past the request's own decision); the
// first gets the answer.
func TestASecondRequestForAPendingInputIsRejected(t *testing.T) {
	errs := make(chan error, 2)
	ask := tools.Tool{Name: "ask", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		hc, err := tools.FromContext(ctx)
		if err != nil {
			return nil, err
		}
		v, err := hc.RequestInput(ctx, "env", json.RawMessage(`{"question":"which environment?"}`))
		errs <- err
		if err != nil {
			return nil, err
		}
		return json.RawMessage(`{"environment":` + string(v) + `}`), nil
	}}
	f := newFixture(t, `{"replies":[{"match":"deploy","toolCalls":[{"id":"c1","name":"ask","input":{}},{"id":"c2","name":"ask","input":{}}],"then":{"text":"deployed"}}]}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{ask} })
	f.push("s1", protocol.Inputs.Text("m1", "deploy it"))
	select {
	case err := <-errs:
		if err == nil || !strings.Contains(err.Error(), "rejected") {
			t.Fatalf("the second request for a pending input: %v, want it rejected", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("neither request was answered within 10 s: the second one was not told it was rejected")
	}
	st := f.waitFor("s1", "the tool's question", func(s *protocol.AIState) bool { return s.Status == protocol.StatusAwaitingInput })
	f.push("s1", protocol.Actions{View: st, NewID: func() string { return "ans" }}.Respond("env", json.RawMessage(`"prod"`))...)
	select {
	case err := <-errs:
		if err != nil {
			t.Fatalf("the first request: %v, want the answer", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the answered request did not return within 10 s")
	}
	f.waitFor("s1", "the turn done", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "deployed" })
}

// A tool rerun after Pause now and Resume asks for its input again and
// waits for the new answer: the first execution's answer (same call, same
// generation, same inputId) is not its own (mutant runtime.go:557 read the
// log from its start and handed the rerun the old answer at once).
func TestARerunToolAsksForItsInputAgain(t *testing.T) {
	var runs atomic.Int64
	confirm := tools.Tool{Name: "confirm", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		hc, err := tools.FromContext(ctx)
		if err != nil {
			return nil, err
		}
		n := runs.Add(1)
		v, err := hc.RequestInput(ctx, "env", json.RawMessage(`{"question":"which environment?"}`))
		if err != nil {
			return nil, err
		}
		if n == 1 {
			<-ctx.Done() // the first execution is cut short by Pause now
			return nil, ctx.Err()
		}
		return json.RawMessage(`{"environment":` + string(v) + `}`), nil
	}}
	f := newFixture(t, `{"replies":[{"match":"deploy","toolCalls":[{"id":"c1","name":"confirm","input":{}}],"then":{"text":"deployed"}}]}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{confirm} })
	f.push("s1", protocol.Inputs.Text("m1", "deploy it"))
	st := f.waitFor("s1", "the first question", func(s *protocol.AIState) bool { return s.Status == protocol.StatusAwaitingInput })
	f.push("s1", protocol.Actions{View: st, NewID: func() string { return "ans1" }}.Respond("env", json.RawMessage(`"prod"`))...)
	f.waitFor("s1", "the first answer taken", func(s *protocol.AIState) bool { return len(s.PendingInputs) == 0 && s.Active != nil })
	f.push("s1", withID(protocol.Inputs.Pause(protocol.PauseNow), "p1"))
	f.waitFor("s1", "paused", func(s *protocol.AIState) bool { return s.Active != nil && s.Active.Phase == protocol.PhasePaused })
	f.push("s1", withID(protocol.Inputs.Resume(), "r1"))
	st = f.waitFor("s1", "the rerun's question", func(s *protocol.AIState) bool {
		_, asked := s.PendingInputs["env"]
		return (asked && s.Status == protocol.StatusAwaitingInput) || idle(s)
	})
	if _, asked := st.PendingInputs["env"]; !asked {
		t.Fatalf("the rerun did not ask for its input again (runs %d, output %s)", runs.Load(), lastToolPart(st).Output)
	}
	answer := protocol.Actions{View: st}.Respond("env", json.RawMessage(`"staging"`))
	if len(answer) != 1 {
		t.Fatalf("no answer to make for %+v", st.PendingInputs)
	}
	f.push("s1", withID(answer[0], "ans2")) // the same input of the same request: an ID of its own

	st = f.waitFor("s1", "the answered turn", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "deployed" })
	if out := string(lastToolPart(st).Output); out != `{"environment":"staging"}` {
		t.Fatalf("the rerun's output %s, want the second answer", out)
	}
}
