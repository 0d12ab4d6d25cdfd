package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/internal/provider/providertest"
	"github.com/a2-runtime/a2/protocol"
)

func simpleRequest() harness.Request {
	return harness.Request{
		Model:        "claude-sonnet-4-5",
		GenerationID: "G1",
		Messages:     []harness.ModelMessage{{Role: harness.ModelRoleUser, Content: []harness.ContentPart{{Type: harness.ContentText, Text: "Hi"}}}},
	}
}

func open(t *testing.T, m *Model, ctx context.Context, req harness.Request) *Stream {
	t.Helper()
	st, err := m.Stream(ctx, req)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	s, ok := st.(*Stream)
	if !ok {
		t.Fatalf("Stream returned %T, not *Stream", st)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func assertChunks(t *testing.T, got, want []protocol.UIMessageChunk) {
	t.Helper()
	if g, w := providertest.MustJSON(t, got), providertest.MustJSON(t, want); g != w {
		t.Fatalf("chunks differ\n got: %s\nwant: %s", g, w)
	}
}

func i64(v int64) *int64 { return &v }

func usageMeta(t *testing.T, u protocol.Usage) json.RawMessage {
	return json.RawMessage(providertest.MustJSON(t, map[string]protocol.Usage{"usage": u}))
}

func TestTextStream(t *testing.T) {
	srv, got := providertest.Replay(t, "text.sse")
	m := New(Options{BaseURL: srv.URL, APIKey: "sk-ant-test", Headers: map[string]string{"anthropic-beta": "tools-2025"}})
	req := simpleRequest()
	req.Headers = map[string]string{"x-trace": "t-1"}
	s := open(t, m, context.Background(), req)
	chunks, err := providertest.Drain(t, s)
	if err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
	usage := protocol.Usage{InputTokens: 135, OutputTokens: 15, TotalTokens: 150, CachedInputTokens: i64(100)}
	assertChunks(t, chunks, []protocol.UIMessageChunk{
		{Type: "start"}, {Type: "start-step"},
		{Type: "text-start", ID: "G1-t1"},
		{Type: "text-delta", ID: "G1-t1", Delta: "Hello"},
		{Type: "text-delta", ID: "G1-t1", Delta: "! How can"},
		{Type: "text-delta", ID: "G1-t1", Delta: " I help?"},
		{Type: "text-end", ID: "G1-t1"},
		{Type: "finish-step"},
		{Type: "finish", FinishReason: "stop", MessageMeta: usageMeta(t, usage)},
	})
	if u, ok := s.Usage(); !ok || !reflect.DeepEqual(u, usage) {
		t.Fatalf("Usage() = %+v, %v", u, ok)
	}
	if s.FinishReason() != "stop" {
		t.Fatalf("FinishReason() = %q", s.FinishReason())
	}
	if got.Path != "/v1/messages" {
		t.Fatalf("path %q", got.Path)
	}
	for k, v := range map[string]string{"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01", "Content-Type": "application/json",
		"Accept": "text/event-stream", "anthropic-beta": "tools-2025", "x-trace": "t-1"} {
		if got.Header.Get(k) != v {
			t.Fatalf("header %s = %q, want %q", k, got.Header.Get(k), v)
		}
	}
	if got.Header.Get("Authorization") != "" {
		t.Fatal("Anthropic takes x-api-key, not a bearer token")
	}
	body := got.BodyJSON(t)
	if body["stream"] != true || body["max_tokens"] != float64(DefaultMaxTokens) || body["model"] != "claude-sonnet-4-5" {
		t.Fatalf("stream %v, max_tokens %v (required, 4096 by default), model %v", body["stream"], body["max_tokens"], body["model"])
	}
}

func TestThinkingStream(t *testing.T) {
	srv, _ := providertest.Replay(t, "thinking.sse")
	s := open(t, New(Options{BaseURL: srv.URL}), context.Background(), simpleRequest())
	chunks, err := providertest.Drain(t, s)
	if err != io.EOF {
		t.Fatal(err)
	}
	assertChunks(t, chunks, []protocol.UIMessageChunk{
		{Type: "start"}, {Type: "start-step"},
		{Type: "reasoning-start", ID: "G1-r1"},
		{Type: "reasoning-delta", ID: "G1-r1", Delta: "The user says hi. "},
		{Type: "reasoning-delta", ID: "G1-r1", Delta: "Reply briefly."},
		{Type: "reasoning-end", ID: "G1-r1", ProviderMetadata: json.RawMessage(`{"anthropic":{"signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}`)},
		{Type: "reasoning-start", ID: "G1-r2"},
		{Type: "reasoning-end", ID: "G1-r2", ProviderMetadata: json.RawMessage(`{"anthropic":{"redactedData":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}}`)},
		{Type: "text-start", ID: "G1-t3"},
		{Type: "text-delta", ID: "G1-t3", Delta: "Hi!"},
		{Type: "text-end", ID: "G1-t3"},
		{Type: "finish-step"},
		{Type: "finish", FinishReason: "stop", MessageMeta: usageMeta(t, protocol.Usage{InputTokens: 40, OutputTokens: 120, TotalTokens: 160, CachedInputTokens: i64(0)})},
	})
}

// The signature the stream reports comes back as a thinking block on the
// next step, through the transcript and ConvertToModelMessages.
func TestThinkingRoundTrip(t *testing.T) {
	srv, _ := providertest.Replay(t, "thinking.sse")
	s := open(t, New(Options{BaseURL: srv.URL}), context.Background(), simpleRequest())
	chunks, err := providertest.Drain(t, s)
	if err != io.EOF {
		t.Fatal(err)
	}
	var parts []protocol.Part
	for _, c := range chunks {
		if c.Type == "reasoning-end" {
			parts = append(parts, protocol.Part{Type: protocol.PartReasoning, Text: "thought", ProviderMetadata: c.ProviderMetadata})
		}
	}
	msgs, err := harness.ConvertToModelMessages([]protocol.TranscriptMessage{{ID: "a", Role: "assistant", Parts: parts}})
	if err != nil {
		t.Fatal(err)
	}
	_, out, err := convert(harness.Request{Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"role":"assistant","content":[{"signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds","thinking":"thought","type":"thinking"},` +
		`{"data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP","type":"redacted_thinking"}]}]`
	if got := providertest.MustJSON(t, out); got != want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
}

func TestToolUseSplitAtAwkwardBoundaries(t *testing.T) {
	srv, _ := providertest.Replay(t, "tool_use.sse")
	s := open(t, New(Options{BaseURL: srv.URL}), context.Background(), simpleRequest())
	chunks, err := providertest.Drain(t, s)
	if err != io.EOF {
		t.Fatal(err)
	}
	wantArgs := map[string]string{
		"toolu_weather": `{"city":"Zürich","unit":"celsius"}`,
		"toolu_note":    `{"text":"say \"hi\" caf\u00e9 🙂"}`,
	}
	wantInput := map[string]any{
		"toolu_weather": map[string]any{"city": "Zürich", "unit": "celsius"},
		"toolu_note":    map[string]any{"text": `say "hi" café 🙂`},
	}
	deltas := map[string]string{}
	var order []string
	for _, c := range chunks {
		switch c.Type {
		case "text-end":
			order = append(order, "text-end")
		case "tool-input-start":
			order = append(order, "start:"+c.ToolCallID+":"+c.ToolName)
		case "tool-input-delta":
			if !utf8.ValidString(c.InputTextDelta) {
				t.Fatalf("delta %q is not valid UTF-8", c.InputTextDelta)
			}
			deltas[c.ToolCallID] += c.InputTextDelta
		case "tool-input-available":
			order = append(order, "available:"+c.ToolCallID)
			var in any
			if err := json.Unmarshal(c.Input, &in); err != nil || !reflect.DeepEqual(in, wantInput[c.ToolCallID]) {
				t.Fatalf("input of %s = %s (%v)", c.ToolCallID, c.Input, err)
			}
		case "tool-input-error":
			t.Fatalf("unexpected tool-input-error: %+v", c)
		}
	}
	if !reflect.DeepEqual(deltas, wantArgs) {
		t.Fatalf("deltas joined:\n got %q\nwant %q", deltas, wantArgs)
	}
	if want := []string{"text-end", "start:toolu_weather:get_weather", "available:toolu_weather",
		"start:toolu_note:write_note", "available:toolu_note"}; !reflect.DeepEqual(order, want) {
		t.Fatalf("order %v", order)
	}
	if s.FinishReason() != "tool-calls" {
		t.Fatalf("finish %q", s.FinishReason())
	}
	if u, _ := s.Usage(); u.InputTokens != 400 || u.OutputTokens != 89 || u.TotalTokens != 489 {
		t.Fatalf("usage %+v", u)
	}
}

func TestInvalidToolInputAndMaxTokens(t *testing.T) {
	srv, _ := providertest.Replay(t, "tool_invalid.sse")
	s := open(t, New(Options{BaseURL: srv.URL}), context.Background(), simpleRequest())
	chunks, err := providertest.Drain(t, s)
	if err != io.EOF {
		t.Fatal(err)
	}
	var found bool
	for _, c := range chunks {
		if c.Type == "tool-input-available" {
			t.Fatalf("invalid input must not be available: %+v", c)
		}
		if c.Type == "tool-input-error" {
			found = true
			var raw string
			if err := json.Unmarshal(c.Input, &raw); err != nil || raw != `{"city":"Par` || c.ToolCallID != "toolu_bad" || c.ErrorText == "" {
				t.Fatalf("%+v (%v)", c, err)
			}
		}
	}
	if !found || s.FinishReason() != "length" {
		t.Fatalf("tool-input-error %v, finish %q", found, s.FinishReason())
	}
}

func TestErrorEventMidStream(t *testing.T) {
	srv, _ := providertest.Replay(t, "error_midstream.sse")
	s := open(t, New(Options{BaseURL: srv.URL}), context.Background(), simpleRequest())
	chunks, err := providertest.Drain(t, s)
	assertChunks(t, chunks, []protocol.UIMessageChunk{
		{Type: "start"}, {Type: "start-step"},
		{Type: "text-start", ID: "G1-t1"},
		{Type: "text-delta", ID: "G1-t1", Delta: "Partial"},
		{Type: "text-delta", ID: "G1-t1", Delta: " answ"},
	})
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("want *APIError, got %T %v", err, err)
	}
	if apiErr.StatusCode != 0 || apiErr.Code != "overloaded_error" || apiErr.Message != "Overloaded" || !apiErr.Retryable {
		t.Fatalf("%+v", apiErr)
	}
	if _, again := s.Next(); again != err {
		t.Fatalf("the error must stick: %v", again)
	}
}

func TestHTTPErrorStatuses(t *testing.T) {
	cases := []struct {
		name      string
		status    int
		body      []byte
		header    map[string]string
		code      string
		message   string
		requestID string
		retryable bool
		after     time.Duration
	}{
		{name: "429", status: 429, body: providertest.Fixture(t, "error_429.json"), header: map[string]string{"Retry-After": "7"},
			code: "rate_limit_error", message: "This request would exceed", requestID: "req_011CSHoEeqs5C35K2UUqR7Fy", retryable: true, after: 7 * time.Second},
		{name: "500", status: 500, body: providertest.Fixture(t, "error_500.json"), header: map[string]string{"request-id": "req_header"},
			code: "api_error", message: "Internal server error", requestID: "req_header", retryable: true},
		{name: "529", status: 529, body: []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`),
			code: "overloaded_error", message: "Overloaded", retryable: true},
		{name: "400", status: 400, body: []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`),
			code: "invalid_request_error", message: "max_tokens: Field required"},
		{name: "502 not JSON", status: 502, body: []byte("upstream connect error"), message: "upstream connect error", retryable: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write(tc.body)
			}))
			defer srv.Close()
			_, err := New(Options{BaseURL: srv.URL}).Stream(context.Background(), simpleRequest())
			var apiErr *APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("want *APIError, got %T %v", err, err)
			}
			if apiErr.StatusCode != tc.status || apiErr.Code != tc.code || !strings.HasPrefix(apiErr.Message, tc.message) ||
				apiErr.Retryable != tc.retryable || apiErr.RetryAfter != tc.after || apiErr.RequestID != tc.requestID {
				t.Fatalf("%+v", apiErr)
			}
			if !strings.HasPrefix(apiErr.Error(), "anthropic: ") || !strings.Contains(apiErr.Error(), tc.message) {
				t.Fatalf("Error() = %q", apiErr.Error())
			}
		})
	}
}

// A 200 with a JSON body is not a stream: a clear error, not an early end.
func TestJSONInsteadOfAStream(t *testing.T) {
	for body, want := range map[string]string{
		`{"id":"msg_1","type":"message","content":[]}`:                                "not an event stream",
		`{"type":"error","error":{"type":"not_found_error","message":"model: nope"}}`: "model: nope",
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(body))
		}))
		_, err := New(Options{BaseURL: srv.URL}).Stream(context.Background(), simpleRequest())
		srv.Close()
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 200 || apiErr.Retryable || !strings.Contains(apiErr.Message, want) {
			t.Fatalf("%s: %v", body, err)
		}
	}
}

func TestConnectionCutMidStream(t *testing.T) {
	evs := providertest.Events(providertest.Fixture(t, "text.sse"))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, e := range evs[:4] {
			_, _ = w.Write(e)
		}
		w.(http.Flusher).Flush()
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_ = buf.Flush()
		_ = conn.Close()
	}))
	defer srv.Close()
	s := open(t, New(Options{BaseURL: srv.URL}), context.Background(), simpleRequest())
	chunks, err := providertest.Drain(t, s)
	if err == nil || err == io.EOF || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("want an error wrapping io.ErrUnexpectedEOF, got %v", err)
	}
	if len(chunks) < 3 || chunks[len(chunks)-1].Type == "finish" {
		t.Fatalf("chunks before the cut: %+v", chunks)
	}
}

func TestCleanEndBeforeMessageStop(t *testing.T) {
	evs := providertest.Events(providertest.Fixture(t, "text.sse"))
	serve := func(n int) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for _, e := range evs[:n] {
				_, _ = w.Write(e)
			}
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	s := open(t, New(Options{BaseURL: serve(6).URL}), context.Background(), simpleRequest())
	if _, err := providertest.Drain(t, s); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("before the stop reason: %v", err)
	}
	s = open(t, New(Options{BaseURL: serve(len(evs) - 1).URL}), context.Background(), simpleRequest())
	if chunks, err := providertest.Drain(t, s); err != io.EOF || chunks[len(chunks)-1].FinishReason != "stop" {
		t.Fatalf("after message_delta: %v %+v", err, chunks)
	}
}

// Cancellation and Close end the stream (the shared checks).
func TestCancellationAndClose(t *testing.T) {
	providertest.CheckCancellation(t, providertest.Provider{
		Model:   func(baseURL string) harness.Model { return New(Options{BaseURL: baseURL}) },
		Request: simpleRequest(), Fixture: providertest.Fixture(t, "text.sse"), HeldAfter: 4, Closed: ErrStreamClosed})
}

func goldenRequest() harness.Request {
	temp, topP, topK, maxTokens := 0.2, 0.9, int64(40), int64(512)
	return harness.Request{
		Model:  "anthropic/claude-sonnet-4-5",
		System: "You are a weather assistant.",
		Messages: []harness.ModelMessage{
			{Role: harness.ModelRoleUser, Content: []harness.ContentPart{{Type: harness.ContentText, Text: "What's the weather in Zürich?"}}},
			{Role: harness.ModelRoleAssistant, Content: []harness.ContentPart{
				{Type: harness.ContentReasoning, Text: "The user wants the weather.", ProviderOptions: json.RawMessage(`{"anthropic":{"signature":"sig-1"}}`)},
				{Type: harness.ContentReasoning, Text: "Reasoning of another provider, unsigned."},
				{Type: harness.ContentText, Text: "Let me check."},
				{Type: harness.ContentToolCall, ToolCallID: "call_1", ToolName: "get_weather", Input: json.RawMessage(`{"city":"Zürich"}`)},
			}},
			{Role: harness.ModelRoleTool, Content: []harness.ContentPart{
				{Type: harness.ContentToolResult, ToolCallID: "call_1", ToolName: "get_weather",
					Output: &harness.ToolOutput{Type: "json", Value: json.RawMessage(`{"tempC":21,"sky":"clear"}`)}},
			}},
			{Role: harness.ModelRoleUser, Content: []harness.ContentPart{
				{Type: harness.ContentText, Text: "Thanks. And this photo?"},
				{Type: harness.ContentFile, MediaType: "image/png", Data: "data:image/png;base64,iVBORw0KGgo="},
			}},
		},
		Tools: []harness.ToolDefinition{{Name: "get_weather", Description: "Current weather for a city",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}},
		Settings: harness.GenerationSettings{
			Temperature: &temp, TopP: &topP, TopK: &topK, MaxOutputTokens: &maxTokens, StopSequences: []string{"END"},
			ProviderOptions: map[string]map[string]json.RawMessage{
				"anthropic": {"disableParallelToolUse": json.RawMessage(`true`), "metadata": json.RawMessage(`{"user_id":"u-42"}`)},
				"gateway":   {"caching": json.RawMessage(`"auto"`)},
			},
			Extra: map[string]json.RawMessage{"toolChoice": json.RawMessage(`"auto"`)},
		},
	}
}

func TestRequestBodyGolden(t *testing.T) {
	srv, got := providertest.Replay(t, "text.sse")
	s := open(t, New(Options{BaseURL: srv.URL + "/v1"}), context.Background(), goldenRequest())
	if _, err := providertest.Drain(t, s); err != io.EOF {
		t.Fatal(err)
	}
	if got.Path != "/v1/messages" {
		t.Fatalf("a base ending in /v1 must not double it: %s", got.Path)
	}
	var want map[string]any
	if err := json.Unmarshal(providertest.Fixture(t, "request_golden.json"), &want); err != nil {
		t.Fatal(err)
	}
	if body := got.BodyJSON(t); !reflect.DeepEqual(body, want) {
		t.Fatalf("request body differs from testdata/request_golden.json\n got: %s\nwant: %s", providertest.MustJSON(t, body), providertest.MustJSON(t, want))
	}
}

func TestThinkingBudgets(t *testing.T) {
	temp, topP, topK := 0.7, 0.9, int64(5)
	m := New(Options{})
	for level, budget := range map[string]int64{"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32768} {
		req := simpleRequest()
		req.Settings = harness.GenerationSettings{Reasoning: level, Temperature: &temp, TopP: &topP, TopK: &topK}
		body, err := m.requestBody(req)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(body["thinking"], map[string]any{"type": "enabled", "budget_tokens": budget}) || body["max_tokens"] != DefaultMaxTokens+budget {
			t.Fatalf("%s: thinking %v, max_tokens %v", level, body["thinking"], body["max_tokens"])
		}
		for _, k := range []string{"temperature", "top_p", "top_k"} {
			if _, ok := body[k]; ok {
				t.Fatalf("%s: %s sent with extended thinking", level, k)
			}
		}
	}
	for _, level := range []string{"", "provider-default", "none"} {
		req := simpleRequest()
		req.Settings.Reasoning = level
		body, _ := m.requestBody(req)
		if _, ok := body["thinking"]; ok || body["max_tokens"] != int64(DefaultMaxTokens) {
			t.Fatalf("%q: %v", level, body)
		}
	}
	// The AI SDK's provider option spelling is accepted and wins.
	req := simpleRequest()
	n := int64(1000)
	req.Settings = harness.GenerationSettings{Reasoning: "high", MaxOutputTokens: &n, ProviderOptions: map[string]map[string]json.RawMessage{
		"anthropic": {"thinking": json.RawMessage(`{"type":"enabled","budgetTokens":3000}`)}}}
	body, err := m.requestBody(req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(body["thinking"], map[string]any{"type": "enabled", "budget_tokens": float64(3000)}) || body["max_tokens"] != int64(4000) {
		t.Fatalf("thinking %v, max_tokens %v", body["thinking"], body["max_tokens"])
	}
}

func TestFilesAndToolResults(t *testing.T) {
	req := simpleRequest()
	req.Messages = []harness.ModelMessage{
		{Role: harness.ModelRoleSystem, Content: []harness.ContentPart{{Type: harness.ContentText, Text: "Be brief.", ProviderOptions: json.RawMessage(`{"anthropic":{"cacheControl":{"type":"ephemeral"}}}`)}}},
		{Role: harness.ModelRoleUser, Content: []harness.ContentPart{
			{Type: harness.ContentFile, MediaType: "application/pdf", Filename: "a.pdf", Data: "https://example.com/a.pdf"},
			{Type: harness.ContentFile, MediaType: "text/plain", Data: "data:text/plain,hello%20world"},
			{Type: harness.ContentFile, MediaType: "image/jpeg", Data: "https://example.com/cat.jpg"},
		}},
		{Role: harness.ModelRoleAssistant, Content: []harness.ContentPart{
			{Type: harness.ContentToolCall, ToolCallID: "c1", ToolName: "t", Input: json.RawMessage(`"{\"broken"`)},
		}},
		{Role: harness.ModelRoleTool, Content: []harness.ContentPart{
			{Type: harness.ContentToolResult, ToolCallID: "c1", ToolName: "t", Output: &harness.ToolOutput{Type: "error-text", Value: json.RawMessage(`"bad input"`)}},
		}},
	}
	system, msgs, err := convert(req)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"cache_control":{"type":"ephemeral"},"text":"Be brief.","type":"text"}]`
	if got := providertest.MustJSON(t, system); got != want {
		t.Fatalf("system %s", got)
	}
	want = `[{"role":"user","content":[{"source":{"type":"url","url":"https://example.com/a.pdf"},"title":"a.pdf","type":"document"},` +
		`{"source":{"data":"hello world","media_type":"text/plain","type":"text"},"type":"document"},` +
		`{"source":{"type":"url","url":"https://example.com/cat.jpg"},"type":"image"}]},` +
		`{"role":"assistant","content":[{"id":"c1","input":{},"name":"t","type":"tool_use"}]},` +
		`{"role":"user","content":[{"content":"bad input","is_error":true,"tool_use_id":"c1","type":"tool_result"}]}]`
	if got := providertest.MustJSON(t, msgs); got != want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
	req.Messages = []harness.ModelMessage{{Role: harness.ModelRoleUser, Content: []harness.ContentPart{{Type: harness.ContentFile, MediaType: "audio/wav", Data: "data:audio/wav;base64,AAAA"}}}}
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer srv.Close()
	if _, err := New(Options{BaseURL: srv.URL}).Stream(context.Background(), req); !errors.Is(err, ErrUnsupportedContent) || calls.Load() != 0 {
		t.Fatalf("audio: %v, calls %d", err, calls.Load())
	}
}

func TestToolChoices(t *testing.T) {
	for in, want := range map[string]string{`"auto"`: `{"type":"auto"}`, `"required"`: `{"type":"any"}`, `"none"`: `{"type":"none"}`,
		`{"type":"tool","toolName":"get_weather"}`: `{"name":"get_weather","type":"tool"}`} {
		body := map[string]any{}
		if err := toolChoice(body, json.RawMessage(in)); err != nil || providertest.MustJSON(t, body["tool_choice"]) != want {
			t.Fatalf("%s -> %v (%v)", in, body["tool_choice"], err)
		}
	}
	if err := toolChoice(map[string]any{}, json.RawMessage(`"maybe"`)); !errors.Is(err, ErrUnsupportedContent) {
		t.Fatal(err)
	}
}

func TestMapStopReason(t *testing.T) {
	for in, want := range map[string]string{"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
		"tool_use": "tool-calls", "refusal": "content-filter", "pause_turn": "other", "": "other",
		"model_context_window_exceeded": "length"} {
		if got := mapStopReason(in); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
}

func TestEnvOptions(t *testing.T) {
	env := map[string]string{"ANTHROPIC_API_KEY": "sk-ant", "ANTHROPIC_BASE_URL": "https://proxy.example.com/"}
	o := EnvOptions(func(k string) string { return env[k] })
	if o.APIKey != "sk-ant" || New(o).endpoint != "https://proxy.example.com/v1/messages" {
		t.Fatalf("%+v", o)
	}
	if New(Options{}).endpoint != DefaultBaseURL+"/v1/messages" {
		t.Fatal("default base URL")
	}
	if modelID("anthropic/claude-opus-4-1") != "claude-opus-4-1" || modelID("claude-opus-4-1") != "claude-opus-4-1" {
		t.Fatal("model ID prefix")
	}
}

// FuzzStream feeds arbitrary bytes to the stream decoder: it must end with
// an error or io.EOF, never panic or loop.
func FuzzStream(f *testing.F) {
	for _, name := range []string{"text.sse", "thinking.sse", "tool_use.sse", "tool_invalid.sse", "error_midstream.sse"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("event: error\ndata: {\"type\":\"error\"}\n\n"))
	f.Add([]byte("data: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":5}}\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newStream(context.Background(), io.NopCloser(bytes.NewReader(data)), "G")
		for i := 0; ; i++ {
			if i > 1_000_000 {
				t.Fatal("the stream never ended")
			}
			c, err := s.Next()
			if err != nil {
				break
			}
			if _, err := json.Marshal(c); err != nil {
				t.Fatalf("chunk %+v does not encode: %v", c, err)
			}
		}
	})
}

// Ready is true only while Next returns at once, and holds no chunk back
// (harness.ReadyStream; the runtime sends the chunks a stream has at hand
// to the session together).
func TestReady(t *testing.T) {
	open := func(body io.ReadCloser) harness.ReadyStream { return newStream(context.Background(), body, "G1") }
	providertest.CheckReady(t, open, providertest.Fixture(t, "text.sse"), 4, "")
}
