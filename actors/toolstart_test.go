package actors

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// heldAfterToolModel streams a tool call, then holds until release is
// closed, then streams more text and finishes (or fails with failWith). A
// continuation step (the prompt ends with a tool result) answers "done".
type heldAfterToolModel struct {
	release  chan struct{}
	failWith string
}

type heldStream struct {
	chunks []protocol.UIMessageChunk
	hold   int // index before which Next waits for release
	wait   <-chan struct{}
	ctx    context.Context
	fail   string
}

func (s *heldStream) Next() (protocol.UIMessageChunk, error) {
	if s.hold == 0 && s.wait != nil {
		select {
		case <-s.wait:
		case <-s.ctx.Done():
			return protocol.UIMessageChunk{}, context.Cause(s.ctx)
		}
		s.wait = nil
	}
	s.hold--
	if len(s.chunks) == 0 {
		if s.fail != "" {
			return protocol.UIMessageChunk{}, errors.New(s.fail)
		}
		return protocol.UIMessageChunk{}, io.EOF
	}
	c := s.chunks[0]
	s.chunks = s.chunks[1:]
	return c, nil
}

func (s *heldStream) Close() error { return nil }

func (m *heldAfterToolModel) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == harness.ModelRoleTool {
		return &heldStream{ctx: ctx, hold: -1, chunks: []protocol.UIMessageChunk{
			{Type: protocol.ChunkStart}, {Type: protocol.ChunkStartStep},
			{Type: protocol.ChunkTextStart, ID: "t"}, {Type: protocol.ChunkTextDelta, ID: "t", Delta: "done"}, {Type: protocol.ChunkTextEnd, ID: "t"},
			{Type: protocol.ChunkFinishStep}, {Type: protocol.ChunkFinish, FinishReason: "stop"}}}, nil
	}
	head := []protocol.UIMessageChunk{
		{Type: protocol.ChunkStart}, {Type: protocol.ChunkStartStep},
		{Type: protocol.ChunkToolInputStart, ToolCallID: "c1", ToolName: "fast"},
		{Type: protocol.ChunkToolInputAvailable, ToolCallID: "c1", ToolName: "fast", Input: json.RawMessage(`{}`)},
	}
	tail := []protocol.UIMessageChunk{{Type: protocol.ChunkTextStart, ID: "t"}, {Type: protocol.ChunkTextDelta, ID: "t", Delta: "and more words"}, {Type: protocol.ChunkTextEnd, ID: "t"}}
	if m.failWith == "" {
		tail = append(tail, protocol.UIMessageChunk{Type: protocol.ChunkFinishStep}, protocol.UIMessageChunk{Type: protocol.ChunkFinish, FinishReason: "tool-calls"})
	}
	return &heldStream{ctx: ctx, chunks: append(head, tail...), hold: len(head), wait: m.release, fail: m.failWith}, nil
}

// R-TOOL-03 R-STOP-12 R-STOP-13: a local call whose input is complete (and
// needs no approval) starts while its model step is still streaming, so the
// rest of the stream adds nothing to the tool's latency; results and the
// step's end arrive in either order. When the step then completes, the
// continuation follows; when it fails, the part keeps the output the tool
// produced, the generation stays failed and no continuation is requested.
func TestToolsStartWhenTheirInputIsComplete(t *testing.T) {
	for _, tc := range []struct{ name, fail string }{{"step completes", ""}, {"step fails", "provider overloaded"}} {
		t.Run(tc.name, func(t *testing.T) {
			m := &heldAfterToolModel{release: make(chan struct{}), failWith: tc.fail}
			released := false
			defer func() {
				if !released {
					close(m.release)
				}
			}()
			ran := make(chan struct{}, 1)
			fast := tools.Tool{Name: "fast", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
				ran <- struct{}{}
				return json.RawMessage(`{"ok":true}`), nil
			}}
			f := newFixture(t, `{"replies":[]}`, func(a *AgentOptions) {
				a.Models = func(string) (harness.Model, error) { return m, nil }
				a.Tools = []tools.Tool{fast}
			})
			f.push("s1", protocol.Inputs.Text("m1", "go"))
			select {
			case <-ran:
			case <-time.After(10 * time.Second):
				t.Fatal("the tool did not start while its step was streaming")
			}
			st := f.waitFor("s1", "the tool's output while the step streams", func(s *protocol.AIState) bool {
				return s.Tools["c1"].Status == protocol.ToolStatusCompleted
			})
			if st.ActiveGeneration == nil || st.ActiveGeneration.State != "streaming" {
				t.Fatalf("the step is not streaming any more: %+v", st.ActiveGeneration)
			}
			close(m.release)
			released = true
			if tc.fail == "" {
				st = f.waitFor("s1", "the continuation's end", idle)
				if got := lastText(st); got != "and more wordsdone" {
					t.Fatalf("response text %q, want the step's words then the continuation's", got)
				}
				return
			}
			st = f.waitFor("s1", "the failure", func(s *protocol.AIState) bool { return s.Status == protocol.StatusFailed })
			msg := st.Messages[len(st.Messages)-1]
			var part *protocol.Part
			for i := range msg.Parts {
				if msg.Parts[i].ToolCallID == "c1" {
					part = &msg.Parts[i]
				}
			}
			if part == nil || part.State != protocol.ToolOutputAvailable || string(part.Output) != `{"ok":true}` {
				t.Fatalf("the tool part after the failure: %+v", part)
			}
			if st.ActiveRequestID != "" || st.Active.Steps != 0 {
				t.Fatalf("a continuation was requested after the failed step: request %q, steps %d", st.ActiveRequestID, st.Active.Steps)
			}
		})
	}
}

// delayedToolsModel streams three tool calls, then 2 s more text (a slow
// model finishing its step), then ends the step; the continuation answers
// at once.
type delayedToolsModel struct{ delay time.Duration }

func (m *delayedToolsModel) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	if last := req.Messages[len(req.Messages)-1]; last.Role == harness.ModelRoleTool {
		return (&heldAfterToolModel{}).Stream(ctx, req)
	}
	chunks := []protocol.UIMessageChunk{{Type: protocol.ChunkStart}, {Type: protocol.ChunkStartStep}}
	for _, id := range []string{"c1", "c2", "c3"} {
		chunks = append(chunks, protocol.UIMessageChunk{Type: protocol.ChunkToolInputAvailable, ToolCallID: id, ToolName: "slow", Input: json.RawMessage(`{}`)})
	}
	head := len(chunks)
	chunks = append(chunks, protocol.UIMessageChunk{Type: protocol.ChunkTextStart, ID: "t"}, protocol.UIMessageChunk{Type: protocol.ChunkTextDelta, ID: "t", Delta: "more"},
		protocol.UIMessageChunk{Type: protocol.ChunkTextEnd, ID: "t"}, protocol.UIMessageChunk{Type: protocol.ChunkFinishStep},
		protocol.UIMessageChunk{Type: protocol.ChunkFinish, FinishReason: "tool-calls"})
	wait := make(chan struct{})
	go func() {
		select {
		case <-time.After(m.delay):
		case <-ctx.Done():
		}
		close(wait)
	}()
	return &heldStream{ctx: ctx, chunks: chunks, hold: head, wait: wait}, nil
}

// BenchmarkToolsDuringStream: a step streams three tool calls (each takes
// 1 s), then 2 s more text; the turn ends after the continuation. With
// tools that start when their input is complete, a turn takes about the
// 2 s of the stream; when they waited for the step to close, 2 s + 1 s.
func BenchmarkToolsDuringStream(b *testing.B) {
	slow := tools.Tool{Name: "slow", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return json.RawMessage(`{"ok":true}`), nil
	}}
	st, err := pebblestore.Open("data", pebblestore.Options{FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		b.Fatal(err)
	}
	a, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("delayed"), Tools: []tools.Tool{slow},
		Models: func(string) (harness.Model, error) { return &delayedToolsModel{delay: 2 * time.Second}, nil }})
	if err != nil {
		b.Fatal(err)
	}
	rt, err := New(st, []*Agent{a}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { rt.Close(); _ = st.Close() }()
	b.ResetTimer()
	var total time.Duration
	for i := range b.N {
		session := "bench-" + string(rune('a'+i%26)) + time.Now().Format("150405.000000")
		start := time.Now()
		if _, err := rt.Push(context.Background(), "assistant", session, []protocol.Event{protocol.Inputs.Text(session+"-m", "go")}, false); err != nil {
			b.Fatal(err)
		}
		for {
			st, _, err := rt.State(context.Background(), "assistant", session)
			if err != nil {
				b.Fatal(err)
			}
			if idle(st.AI) && len(st.AI.Messages) == 2 {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/turn")
}

// R-TOOL-13: a tool with toolRecovery "report" (at most once per call)
// still starts only when its step has ended: the write that makes its
// input complete requests no execution while the step streams, since a
// superseded attempt's new model call would run it again.
func TestReportToolsWaitForTheirStep(t *testing.T) {
	m := &heldAfterToolModel{release: make(chan struct{})}
	released := false
	defer func() {
		if !released {
			close(m.release)
		}
	}()
	fast := tools.Tool{Name: "fast", Recovery: "report", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"ok":true}`), nil
	}}
	f := newFixture(t, `{"replies":[]}`, func(a *AgentOptions) {
		a.Models = func(string) (harness.Model, error) { return m, nil }
		a.Tools = []tools.Tool{fast}
	})
	f.push("s1", protocol.Inputs.Text("m1", "go"))
	// The call's input and whatever the control lane decided with it are
	// one write: once the state shows the input, a request would show too.
	st := f.waitFor("s1", "the call's input", func(s *protocol.AIState) bool { _, ok := s.Tools["c1"]; return ok })
	if got := st.Tools["c1"].Status; got != protocol.ToolStatusPending || st.ActiveGeneration == nil || st.ActiveGeneration.State != "streaming" {
		t.Fatalf("the report tool is %q while its step streams (%+v), want pending", got, st.ActiveGeneration)
	}
	close(m.release)
	released = true
	st = f.waitFor("s1", "the turn's end", idle)
	if st.Tools["c1"].Status != protocol.ToolStatusCompleted || lastText(st) != "and more wordsdone" {
		t.Fatalf("after the step: tool %+v, text %q", st.Tools["c1"], lastText(st))
	}
}

// A call's first claim rides with the write that requests it: the call is
// claimed (durable before it runs, as any claim) without a write of its
// own, so a 3-step turn writes the push, the step with its request and
// claim, the result with the continuation's request, and the continuation.
func TestAClaimRidesWithItsRequest(t *testing.T) {
	lookup := tools.Tool{Name: "lookup", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"found":true}`), nil
	}}
	f := newFixture(t, `{"default":{"text":"let me look","toolCalls":[{"name":"lookup","input":{"q":"x"}}],"then":{"text":"found it"}}}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{lookup} })
	f.push("s1", protocol.Inputs.Text("m1", "look it up"))
	f.waitFor("s1", "the turn's end", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 && len(s.Tools) == 1 })
	claim := f.store.batchOf(func(ev protocol.Event) bool { return ev.Type == protocol.TypeToolExecClaimed })
	var types []string
	for _, ev := range claim {
		types = append(types, ev.Type)
	}
	if !slices.Contains(types, protocol.TypeToolExecRequested) {
		t.Fatalf("the claim was written in %v, without its request", types)
	}
	if i, j := slices.Index(types, protocol.TypeToolExecRequested), slices.Index(types, protocol.TypeToolExecClaimed); i > j {
		t.Fatalf("the claim precedes its request in %v", types)
	}
}
