package actors

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// staleModel streams a tool call and a first word, reports that it waits,
// then, once next is closed, a second word; then it holds until its
// context ends and sends the context's cause on causes.
type staleModel struct {
	waiting chan struct{}
	next    chan struct{}
	causes  chan error
}

type staleStream struct {
	m    *staleModel
	ctx  context.Context
	sent int
}

func (m *staleModel) Stream(ctx context.Context, _ harness.Request) (harness.Stream, error) {
	return &staleStream{m: m, ctx: ctx}, nil
}

func (s *staleStream) Next() (protocol.UIMessageChunk, error) {
	head := []protocol.UIMessageChunk{
		{Type: protocol.ChunkStart}, {Type: protocol.ChunkStartStep},
		{Type: protocol.ChunkToolInputAvailable, ToolCallID: "c1", ToolName: "wait", Input: json.RawMessage(`{}`)},
		{Type: protocol.ChunkTextStart, ID: "t"}, {Type: protocol.ChunkTextDelta, ID: "t", Delta: "first "},
	}
	switch {
	case s.sent < len(head):
		s.sent++
		return head[s.sent-1], nil
	case s.sent == len(head):
		s.m.waiting <- struct{}{}
		select {
		case <-s.m.next:
		case <-s.ctx.Done():
			s.m.causes <- context.Cause(s.ctx)
			return protocol.UIMessageChunk{}, context.Cause(s.ctx)
		}
		s.sent++
		return protocol.UIMessageChunk{Type: protocol.ChunkTextDelta, ID: "t", Delta: "second"}, nil
	}
	<-s.ctx.Done()
	s.m.causes <- context.Cause(s.ctx)
	return protocol.UIMessageChunk{}, context.Cause(s.ctx)
}

func (s *staleStream) Close() error { return nil }

// R-DELIVERY-05: a generation attempt whose session another runtime on the
// same store wrote learns that it is stale: its next write is refused, and
// the refusal cancels its model call and its running tool at once, each
// with a context whose cause is the superseded reason.
func TestStaleWorkerLearnsItIsStale(t *testing.T) {
	st, err := pebblestore.Open("data", pebblestore.Options{FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := &staleModel{waiting: make(chan struct{}, 4), next: make(chan struct{}), causes: make(chan error, 4)}
	toolStarted, toolCause := make(chan struct{}, 4), make(chan error, 4)
	waitTool := tools.Tool{Name: "wait", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		toolStarted <- struct{}{}
		<-ctx.Done()
		toolCause <- context.Cause(ctx)
		return nil, context.Cause(ctx)
	}}
	agentA, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("stale"), Tools: []tools.Tool{waitTool},
		Models: func(string) (harness.Model, error) { return m, nil }})
	if err != nil {
		t.Fatal(err)
	}
	rtA, err := New(st, []*Agent{agentA}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rtA.Close()
	sc, _ := script.Parse([]byte(`{"default":{"text":"from B"}}`))
	quick := tools.Tool{Name: "wait", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{}`), nil }}
	agentB, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script"), Tools: []tools.Tool{quick},
		Models: func(string) (harness.Model, error) { return script.New(sc), nil }})
	if err != nil {
		t.Fatal(err)
	}
	rtB, err := New(st, []*Agent{agentB}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rtB.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Each runtime's start-up scan activates the sessions with work it
	// finds: were B's to run after A's first write, B would take s1 over
	// before A's attempt reaches its model and tool (CI saw it on a loaded
	// machine). The scans end before the session is written.
	for _, rt := range []*Runtime{rtA, rtB} {
		select {
		case <-rt.Recovered():
		case <-ctx.Done():
			t.Fatal("a runtime's start-up scan did not end")
		}
	}
	if _, err := rtA.Push(ctx, "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m1", "start")}, false); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []chan struct{}{m.waiting, toolStarted} {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatal("the first runtime's attempt did not reach its model's wait and its tool")
		}
	}
	// Another runtime on the same store writes the session.
	if _, err := rtB.Push(ctx, "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m2", "from the other runtime")}, false); err != nil {
		t.Fatal(err)
	}
	// The first runtime's next write is refused.
	close(m.next)
	for name, ch := range map[string]chan error{"model call": m.causes, "tool execution": toolCause} {
		select {
		case cause := <-ch:
			if !errors.Is(cause, ErrSuperseded) || !errors.Is(cause, errWrittenElsewhere) {
				t.Fatalf("the stale %s was cancelled with %v, want the superseded reason", name, cause)
			}
		case <-ctx.Done():
			t.Fatalf("the stale %s was not cancelled", name)
		}
	}
}
