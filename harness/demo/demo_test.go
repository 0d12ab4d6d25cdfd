package demo_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/demo"
	"github.com/a2-runtime/a2/protocol"
)

func request(text string, tools ...string) harness.Request {
	req := harness.Request{Model: demo.ModelID, GenerationID: "g1",
		Messages: []harness.ModelMessage{{Role: harness.ModelRoleUser, Content: []harness.ContentPart{{Type: harness.ContentText, Text: text}}}}}
	for _, n := range tools {
		req.Tools = append(req.Tools, harness.ToolDefinition{Name: n})
	}
	return req
}

func drain(t *testing.T, m harness.Model, req harness.Request) []protocol.UIMessageChunk {
	t.Helper()
	s, err := m.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []protocol.UIMessageChunk
	for {
		c, err := s.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

// The demo model streams its answer a word per delta, asks for a tool only
// when the agent offers it, and is deterministic.
func TestDemoModelChunks(t *testing.T) {
	m := demo.New(0)
	chunks := drain(t, m, request("Hello there"))
	var text strings.Builder
	deltas := 0
	for _, c := range chunks {
		if c.Type == protocol.ChunkTextDelta {
			deltas++
			text.WriteString(c.Delta)
			if strings.Count(strings.TrimSpace(c.Delta), " ") != 0 {
				t.Fatalf("a delta of more than one word: %q", c.Delta)
			}
		}
		if c.Type == protocol.ChunkToolInputAvailable {
			t.Fatal("a tool call for a greeting")
		}
	}
	if deltas != len(strings.Fields(text.String())) || !strings.HasPrefix(text.String(), "Hello!") {
		t.Fatalf("%d deltas for %q", deltas, text.String())
	}
	if last := chunks[len(chunks)-1]; last.Type != protocol.ChunkFinish || last.FinishReason != "stop" || harness.TakeUsage(&last) == nil {
		t.Fatalf("last chunk %+v", last)
	}
	again, _ := json.Marshal(drain(t, m, request("Hello there")))
	first, _ := json.Marshal(chunks)
	if string(again) != string(first) {
		t.Fatal("the same prompt streamed differently")
	}

	cases := []struct {
		text, tool, input string
	}{
		{"calculate 2+3", demo.ToolCalculator, `{"expression":"2+3"}`},
		{"What is (2 + 3) * 4?", demo.ToolCalculator, `{"expression":"(2 + 3) * 4"}`},
		{"what time is it?", demo.ToolCurrentTime, `{}`},
	}
	for _, tc := range cases {
		var call *protocol.UIMessageChunk
		for _, c := range drain(t, m, request(tc.text, demo.ToolCurrentTime, demo.ToolCalculator)) {
			if c.Type == protocol.ChunkToolInputAvailable {
				call = &c
			}
		}
		if call == nil || call.ToolName != tc.tool || string(call.Input) != tc.input || call.ToolCallID != "call-g1-0" {
			t.Errorf("%q: call %+v", tc.text, call)
		}
		for _, c := range drain(t, m, request(tc.text)) {
			if c.Type == protocol.ChunkToolInputAvailable {
				t.Errorf("%q: a call of a tool the agent does not offer", tc.text)
			}
		}
	}
}

// The word delay holds each word; cancelling ends the stream at once with
// the context's cause.
func TestDemoModelDelayAndCancel(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	s, err := demo.New(time.Hour).Stream(ctx, request("Hello"))
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("stopped")
	time.AfterFunc(20*time.Millisecond, func() { cancel(cause) })
	for {
		_, err := s.Next()
		if err == nil {
			continue
		}
		if !errors.Is(err, cause) {
			t.Fatalf("the stream ended with %v", err)
		}
		return
	}
}
