package script

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/internal/provider/providertest"
	"github.com/a2-runtime/a2/protocol"
)

func userReq(session, text string) harness.Request {
	return harness.Request{SessionID: session, GenerationID: "g", Messages: []harness.ModelMessage{{Role: harness.ModelRoleUser,
		Content: []harness.ContentPart{{Type: harness.ContentText, Text: text}}}}}
}

func texts(cs []protocol.UIMessageChunk) string {
	var b strings.Builder
	for _, c := range cs {
		if c.Type == protocol.ChunkTextDelta {
			b.WriteString(c.Delta + "|")
		}
	}
	return b.String()
}

func TestParseRejectsUnknownFields(t *testing.T) {
	if _, err := Parse([]byte(`{"replies":[{"txt":"typo"}]}`)); err == nil {
		t.Fatal("a typo must fail")
	}
}

// Replies match the latest user text, else go in order; chunk sizes split
// text; tool calls stream their input; errors fail the stream.
func TestRepliesAndChunks(t *testing.T) {
	s, err := Parse([]byte(`{"replies":[
		{"match":"weather","text":"sunny day","chunkSize":3},
		{"text":"in order"},
		{"match":"tool","toolCalls":[{"id":"c1","name":"x","input":{"a":1}}]},
		{"match":"boom","text":"half","error":"overloaded"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := New(s)
	ctx := context.Background()
	st, _ := m.Stream(ctx, userReq("s", "what about the WEATHER?"))
	cs, err := providertest.Drain(t, st)
	if err != io.EOF || texts(cs) != "sun|ny |day|" {
		t.Fatalf("%q %v", texts(cs), err)
	}
	if cs[len(cs)-1].Type != protocol.ChunkFinish || cs[len(cs)-1].FinishReason != "stop" || UsageOf(cs[len(cs)-1]) == nil {
		t.Fatalf("finish %+v", cs[len(cs)-1])
	}
	st, _ = m.Stream(ctx, userReq("s", "anything"))
	if cs, _ := providertest.Drain(t, st); texts(cs) != "in |order|" {
		t.Fatalf("order: %q", texts(cs))
	}
	st, _ = m.Stream(ctx, userReq("s", "use a tool"))
	cs, _ = providertest.Drain(t, st)
	found := false
	for _, c := range cs {
		if c.Type == protocol.ChunkToolInputAvailable && c.ToolCallID == "c1" && string(c.Input) == `{"a":1}` {
			found = true
		}
		if c.Type == protocol.ChunkFinish && c.FinishReason != "tool-calls" {
			t.Fatalf("finish reason %q", c.FinishReason)
		}
	}
	if !found {
		t.Fatal("no tool call")
	}
	st, _ = m.Stream(ctx, userReq("s", "boom"))
	if _, err := providertest.Drain(t, st); !errors.As(err, new(*ProviderError)) {
		t.Fatalf("error %v", err)
	}
	if _, err := m.Stream(ctx, userReq("s", "nothing left")); err == nil {
		t.Fatal("no reply left must fail")
	}
	if len(m.Calls()) != 5 {
		t.Fatalf("%d calls", len(m.Calls()))
	}
}

// A gate holds the stream until released; cancellation ends it with the
// context's cause.
func TestGatesAndCancellation(t *testing.T) {
	s, _ := Parse([]byte(`{"default":{"text":"a b c","gate":"g"}}`))
	m := New(s)
	st, _ := m.Stream(context.Background(), userReq("s", "x"))
	got := make(chan string, 1)
	go func() {
		cs, _ := providertest.Drain(t, st)
		got <- texts(cs)
	}()
	select {
	case <-got:
		t.Fatal("the stream passed a closed gate")
	case <-time.After(30 * time.Millisecond):
	}
	m.Release("g")
	select {
	case s := <-got:
		if s != "a |b |c|" {
			t.Fatalf("%q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a released gate still holds")
	}
	s2, _ := Parse([]byte(`{"default":{"text":"x","gate":"h"}}`))
	m2 := New(s2)
	cause := errors.New("stopped")
	ctx, cancel := context.WithCancelCause(context.Background())
	st2, _ := m2.Stream(ctx, userReq("s", "x"))
	go func() { time.Sleep(10 * time.Millisecond); cancel(cause) }()
	if _, err := providertest.Drain(t, st2); !errors.Is(err, cause) {
		t.Fatalf("cancel: %v", err)
	}
}

// Ready (harness.ReadyStream) says whether Next returns without waiting:
// true through a reply without delay, false at a gate still closed (true
// once it is released), false when every chunk waits delayMs, and false at
// the end.
func TestReady(t *testing.T) {
	s, _ := Parse([]byte(`{"replies":[{"text":"a b c","gate":"g"},{"text":"x","delayMs":5}]}`))
	m := New(s)
	st, _ := m.Stream(context.Background(), userReq("s", "x"))
	rs, ok := st.(harness.ReadyStream)
	if !ok {
		t.Fatal("the script stream is not a harness.ReadyStream")
	}
	var before []string // chunk types returned while Ready said true
	for rs.Ready() {
		c, err := rs.Next()
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, c.Type+":"+c.Delta)
	}
	if got := strings.Join(before, ","); got != "start:,start-step:,text-start:,text-delta:a " {
		t.Fatalf("chunks ready before the closed gate: %s", got)
	}
	m.Release("g")
	if !rs.Ready() {
		t.Fatal("not ready after the gate was released")
	}
	rest, err := providertest.Drain(t, rs)
	if err != io.EOF || texts(rest) != "b |c|" {
		t.Fatalf("after the gate: %q, %v", texts(rest), err)
	}
	if rs.Ready() {
		t.Fatal("ready at the end of the stream")
	}
	st2, _ := m.Stream(context.Background(), userReq("s", "y"))
	if st2.(harness.ReadyStream).Ready() {
		t.Fatal("a reply whose chunks wait delayMs says ready")
	}
}

// The default usage's prompt size is the size of the marshaled prompt,
// whether its messages were seen before (the size cache) or not.
func TestPromptSizeIsTheMarshaledPrompt(t *testing.T) {
	m := New(&Script{})
	first := []harness.ModelMessage{{Role: harness.ModelRoleUser, Content: []harness.ContentPart{{Type: harness.ContentText, Text: "héllo \"there\""}}}}
	second := append(first[:1:1], harness.ModelMessage{Role: harness.ModelRoleAssistant, Content: []harness.ContentPart{{Type: harness.ContentText, Text: "hi"},
		{Type: harness.ContentToolCall, ToolCallID: "c1", ToolName: "lookup", Input: json.RawMessage(`{"q":"<x>"}`)}}})
	for _, prompt := range [][]harness.ModelMessage{nil, {}, first, second, second, {{Role: harness.ModelRoleUser}}} {
		want, _ := json.Marshal(prompt)
		if got := m.promptSize("s1", prompt); got != len(want) {
			t.Fatalf("prompt %s: size %d, want %d", want, got, len(want))
		}
	}
}

// BenchmarkStream: one step of the cluster row's script (text, then a tool
// call), planned and read to its end; a fresh goroutine per step, as a
// lane runs it.
func BenchmarkStream(b *testing.B) {
	s, err := Parse([]byte(`{"default":{"text":"let me check","toolCalls":[{"name":"calculator","input":{"expression":"6*7"}}]}}`))
	if err != nil {
		b.Fatal(err)
	}
	m := New(s)
	req := userReq("s", "what is six times seven?")
	b.ReportAllocs()
	for b.Loop() {
		done := make(chan int)
		go func() {
			st, _ := m.Stream(context.Background(), req)
			n := 0
			for {
				if _, err := st.Next(); err != nil {
					break
				}
				n++
			}
			done <- n
		}()
		if <-done == 0 {
			b.Fatal("no chunk")
		}
	}
}

// The model's record of a request keeps its own copy of the prompt, which
// is lent to the model only while the stream is open (harness.Request);
// after StopRecording it keeps none.
func TestCallsKeepACopyOfThePrompt(t *testing.T) {
	s, err := Parse([]byte(`{"default":{"text":"ok"}}`))
	if err != nil {
		t.Fatal(err)
	}
	m := New(s)
	req := userReq("s", "first")
	st, _ := m.Stream(context.Background(), req)
	providertest.Drain(t, st)
	st.Close()
	req.Messages[0] = harness.ModelMessage{Role: harness.ModelRoleUser, Content: []harness.ContentPart{{Type: harness.ContentText, Text: "reused"}}}
	calls := m.Calls()
	if len(calls) != 1 || calls[0].Messages[0].Content[0].Text != "first" {
		t.Fatalf("the record reads the prompt's memory after the stream closed: %+v", calls)
	}
	m.StopRecording()
	st, _ = m.Stream(context.Background(), userReq("s", "second"))
	providertest.Drain(t, st)
	if calls := m.Calls(); len(calls) != 0 {
		t.Fatalf("%d calls recorded after StopRecording", len(calls))
	}
}
