package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
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
		Model:        "gpt-5-mini",
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

func assertChunks(t *testing.T, got []protocol.UIMessageChunk, want []protocol.UIMessageChunk) {
	t.Helper()
	if g, w := providertest.MustJSON(t, got), providertest.MustJSON(t, want); g != w {
		t.Fatalf("chunks differ\n got: %s\nwant: %s", g, w)
	}
}

func i64(v int64) *int64 { return &v }

func usageMeta(t *testing.T, u protocol.Usage) json.RawMessage {
	return json.RawMessage(providertest.MustJSON(t, map[string]protocol.Usage{"usage": u}))
}

func TestTextStreamWithUsageOnlyFinalChunk(t *testing.T) {
	srv, got := providertest.Replay(t, "text.sse")
	m := New(Options{BaseURL: srv.URL + "/v1/", APIKey: "sk-test", Headers: map[string]string{"X-Org": "acme"}})
	req := simpleRequest()
	req.Headers = map[string]string{"x-trace": "t-1"}
	s := open(t, m, context.Background(), req)
	chunks, err := providertest.Drain(t, s)
	if err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
	usage := protocol.Usage{InputTokens: 120, OutputTokens: 45, TotalTokens: 165, ReasoningTokens: i64(12), CachedInputTokens: i64(64)}
	assertChunks(t, chunks, []protocol.UIMessageChunk{
		{Type: "start"}, {Type: "start-step"},
		{Type: "text-start", ID: "G1-t1"},
		{Type: "text-delta", ID: "G1-t1", Delta: "Hello"},
		{Type: "text-delta", ID: "G1-t1", Delta: ", wor"},
		{Type: "text-delta", ID: "G1-t1", Delta: "ld!"},
		{Type: "text-end", ID: "G1-t1"},
		{Type: "finish-step"},
		{Type: "finish", FinishReason: "stop", MessageMeta: usageMeta(t, usage)},
	})
	u, ok := s.Usage()
	if !ok || !reflect.DeepEqual(u, usage) {
		t.Fatalf("Usage() = %+v, %v", u, ok)
	}
	if s.FinishReason() != "stop" {
		t.Fatalf("FinishReason() = %q", s.FinishReason())
	}
	if _, err := s.Next(); err != io.EOF {
		t.Fatalf("Next after the end: %v", err)
	}
	if got.Path != "/v1/chat/completions" {
		t.Fatalf("path %q", got.Path)
	}
	for k, v := range map[string]string{"Authorization": "Bearer sk-test", "Accept": "text/event-stream",
		"Content-Type": "application/json", "X-Org": "acme", "X-Trace": "t-1"} {
		if got.Header.Get(k) != v {
			t.Fatalf("header %s = %q, want %q", k, got.Header.Get(k), v)
		}
	}
	body := got.BodyJSON(t)
	if body["stream"] != true || !reflect.DeepEqual(body["stream_options"], map[string]any{"include_usage": true}) {
		t.Fatalf("streaming options: %v %v", body["stream"], body["stream_options"])
	}
}

func TestReasoningStreams(t *testing.T) {
	t.Run("reasoning_content", func(t *testing.T) {
		srv, _ := providertest.Replay(t, "reasoning.sse")
		s := open(t, New(Options{BaseURL: srv.URL}), context.Background(), simpleRequest())
		chunks, err := providertest.Drain(t, s)
		if err != io.EOF {
			t.Fatal(err)
		}
		assertChunks(t, chunks, []protocol.UIMessageChunk{
			{Type: "start"}, {Type: "start-step"},
			{Type: "reasoning-start", ID: "G1-r1"},
			{Type: "reasoning-delta", ID: "G1-r1", Delta: "The user greets; "},
			{Type: "reasoning-delta", ID: "G1-r1", Delta: "answer briefly."},
			{Type: "reasoning-end", ID: "G1-r1"},
			{Type: "text-start", ID: "G1-t2"},
			{Type: "text-delta", ID: "G1-t2", Delta: "Hi there."},
			{Type: "text-end", ID: "G1-t2"},
			{Type: "finish-step"},
			{Type: "finish", FinishReason: "stop", MessageMeta: usageMeta(t, protocol.Usage{InputTokens: 10, OutputTokens: 20, TotalTokens: 30, ReasoningTokens: i64(8)})},
		})
	})
	t.Run("reasoning", func(t *testing.T) {
		srv, _ := providertest.Replay(t, "reasoning_field.sse")
		s := open(t, New(Options{BaseURL: srv.URL}), context.Background(), simpleRequest())
		chunks, err := providertest.Drain(t, s)
		if err != io.EOF {
			t.Fatal(err)
		}
		assertChunks(t, chunks, []protocol.UIMessageChunk{
			{Type: "start"}, {Type: "start-step"},
			{Type: "reasoning-start", ID: "G1-r1"},
			{Type: "reasoning-delta", ID: "G1-r1", Delta: "Thinking "},
			{Type: "reasoning-delta", ID: "G1-r1", Delta: "hard."},
			{Type: "reasoning-end", ID: "G1-r1"},
			{Type: "text-start", ID: "G1-t2"},
			{Type: "text-delta", ID: "G1-t2", Delta: "The answer is"},
			{Type: "text-end", ID: "G1-t2"},
			{Type: "finish-step"},
			{Type: "finish", FinishReason: "length", MessageMeta: usageMeta(t, protocol.Usage{InputTokens: 5, OutputTokens: 7, TotalTokens: 12})},
		})
	})
}

func TestParallelToolCallsSplitAtAwkwardBoundaries(t *testing.T) {
	srv, _ := providertest.Replay(t, "tool_calls.sse")
	s := open(t, New(Options{BaseURL: srv.URL}), context.Background(), simpleRequest())
	chunks, err := providertest.Drain(t, s)
	if err != io.EOF {
		t.Fatal(err)
	}
	wantArgs := map[string]string{
		"call_weather": `{"city":"Zürich","unit":"celsius"}`,
		"call_note":    `{"text":"say \"hi\" caf\u00e9 🙂"}`,
	}
	wantInput := map[string]any{
		"call_weather": map[string]any{"city": "Zürich", "unit": "celsius"},
		"call_note":    map[string]any{"text": `say "hi" café 🙂`},
	}
	deltas := map[string]string{}
	var order []string
	textEnded := false
	for _, c := range chunks {
		switch c.Type {
		case "text-end":
			textEnded = true
		case "tool-input-start":
			if !textEnded {
				t.Fatal("the text part must end before the first tool call starts")
			}
			order = append(order, "start:"+c.ToolCallID+":"+c.ToolName)
		case "tool-input-delta":
			if !utf8.ValidString(c.InputTextDelta) {
				t.Fatalf("delta %q is not valid UTF-8", c.InputTextDelta)
			}
			deltas[c.ToolCallID] += c.InputTextDelta
		case "tool-input-available":
			order = append(order, "available:"+c.ToolCallID+":"+c.ToolName)
			var in any
			if err := json.Unmarshal(c.Input, &in); err != nil {
				t.Fatalf("input of %s: %v", c.ToolCallID, err)
			}
			if !reflect.DeepEqual(in, wantInput[c.ToolCallID]) {
				t.Fatalf("input of %s = %#v", c.ToolCallID, in)
			}
		case "tool-input-error":
			t.Fatalf("unexpected tool-input-error: %+v", c)
		}
	}
	if !reflect.DeepEqual(deltas, wantArgs) {
		t.Fatalf("deltas joined:\n got %q\nwant %q", deltas, wantArgs)
	}
	wantOrder := []string{"start:call_weather:get_weather", "start:call_note:write_note",
		"available:call_weather:get_weather", "available:call_note:write_note"}
	if !reflect.DeepEqual(order, wantOrder) {
		t.Fatalf("order %v", order)
	}
	last := chunks[len(chunks)-1]
	if last.Type != "finish" || last.FinishReason != "tool-calls" || chunks[len(chunks)-2].Type != "finish-step" {
		t.Fatalf("end: %+v", chunks[len(chunks)-2:])
	}
	if chunks[2].Type != "text-start" || chunks[3].Delta != "Let me check." {
		t.Fatalf("text first: %+v", chunks[2:4])
	}
}

func TestInvalidToolArgumentsAreAToolInputError(t *testing.T) {
	srv, _ := providertest.Replay(t, "tool_invalid.sse")
	s := open(t, New(Options{BaseURL: srv.URL}), context.Background(), simpleRequest())
	chunks, err := providertest.Drain(t, s)
	if err != io.EOF {
		t.Fatal(err)
	}
	var found bool
	for _, c := range chunks {
		if c.Type == "tool-input-available" {
			t.Fatalf("invalid arguments must not be available: %+v", c)
		}
		if c.Type == "tool-input-error" {
			found = true
			var raw string
			if err := json.Unmarshal(c.Input, &raw); err != nil || raw != `{"city":"Par` {
				t.Fatalf("input %s (%v)", c.Input, err)
			}
			if c.ToolCallID != "call_bad" || c.ToolName != "get_weather" || c.ErrorText == "" {
				t.Fatalf("%+v", c)
			}
		}
	}
	if !found || s.FinishReason() != "tool-calls" {
		t.Fatalf("no tool-input-error, finish %q", s.FinishReason())
	}
}

func TestErrorMidStream(t *testing.T) {
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
	if apiErr.StatusCode != 0 || apiErr.Code != "server_error" || !apiErr.Retryable || !strings.Contains(apiErr.Message, "server had an error") {
		t.Fatalf("%+v", apiErr)
	}
	if _, again := s.Next(); again != err {
		t.Fatalf("the error must stick: %v", again)
	}
}

func TestHTTPErrorStatuses(t *testing.T) {
	cases := []struct {
		name       string
		status     int
		body       []byte
		header     map[string]string
		code, typ  string
		message    string
		retryable  bool
		retryAfter time.Duration
	}{
		{name: "429", status: 429, body: providertest.Fixture(t, "error_429.json"), header: map[string]string{"Retry-After": "2", "X-Request-Id": "req_1"},
			code: "rate_limit_exceeded", typ: "tokens", message: "Rate limit reached", retryable: true, retryAfter: 2 * time.Second},
		{name: "500", status: 500, body: providertest.Fixture(t, "error_500.json"), code: "server_error", typ: "server_error", message: "The server had an error", retryable: true},
		{name: "400", status: 400, body: []byte(`{"error":{"message":"Invalid 'messages'","type":"invalid_request_error","param":"messages","code":"invalid_value"}}`),
			code: "invalid_value", typ: "invalid_request_error", message: "Invalid 'messages'"},
		{name: "502 not JSON", status: 502, body: []byte("<html>Bad Gateway</html>"), message: "<html>Bad Gateway</html>", retryable: true},
		{name: "llama.cpp numeric code", status: 503, body: []byte(`{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`),
			code: "503", typ: "unavailable_error", message: "Loading model", retryable: true},
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
			if apiErr.StatusCode != tc.status || apiErr.Code != tc.code || apiErr.Type != tc.typ ||
				!strings.HasPrefix(apiErr.Message, tc.message) || apiErr.Retryable != tc.retryable || apiErr.RetryAfter != tc.retryAfter {
				t.Fatalf("%+v", apiErr)
			}
			if tc.header["X-Request-Id"] != "" && apiErr.RequestID != tc.header["X-Request-Id"] {
				t.Fatalf("request ID %q", apiErr.RequestID)
			}
			if !strings.HasPrefix(apiErr.Error(), "openai: ") || !strings.Contains(apiErr.Error(), tc.message) {
				t.Fatalf("Error() = %q", apiErr.Error())
			}
		})
	}
}

// A 200 with a JSON body is not a stream: a clear error, not an early end.
func TestJSONInsteadOfAStream(t *testing.T) {
	for body, want := range map[string]string{
		`{"id":"chatcmpl-1","object":"chat.completion","choices":[]}`:            "not an event stream",
		`{"error":{"message":"model not found","type":"invalid_request_error"}}`: "model not found",
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

// A connection cut mid-stream is an error, never a silent end.
func TestConnectionCutMidStream(t *testing.T) {
	evs := providertest.Events(providertest.Fixture(t, "text.sse"))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range evs[:3] {
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

// A body that ends cleanly before the finish reason is also an error; one
// that ends after it without [DONE] (some servers) completes.
func TestCleanEndOfBody(t *testing.T) {
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
	s := open(t, New(Options{BaseURL: serve(3).URL}), context.Background(), simpleRequest())
	if _, err := providertest.Drain(t, s); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("before finish: %v", err)
	}
	s = open(t, New(Options{BaseURL: serve(len(evs) - 1).URL}), context.Background(), simpleRequest())
	chunks, err := providertest.Drain(t, s)
	if err != io.EOF || chunks[len(chunks)-1].FinishReason != "stop" {
		t.Fatalf("after finish: %v %+v", err, chunks)
	}
	if u, ok := s.Usage(); !ok || u.TotalTokens != 165 {
		t.Fatalf("usage %+v", u)
	}
}

// Cancellation and Close end the stream (the shared checks).
func TestCancellationAndClose(t *testing.T) {
	providertest.CheckCancellation(t, providertest.Provider{
		Model:   func(baseURL string) harness.Model { return New(Options{BaseURL: baseURL}) },
		Request: simpleRequest(), Fixture: providertest.Fixture(t, "text.sse"), HeldAfter: 3, Closed: ErrStreamClosed})
}

func goldenRequest() harness.Request {
	temp, topP, maxTokens, seed := 0.2, 0.9, int64(512), int64(7)
	return harness.Request{
		Model:  "gpt-5-mini",
		System: "You are a weather assistant.",
		Messages: []harness.ModelMessage{
			{Role: harness.ModelRoleUser, Content: []harness.ContentPart{{Type: harness.ContentText, Text: "What's the weather in Zürich?"}}},
			{Role: harness.ModelRoleAssistant, Content: []harness.ContentPart{
				{Type: harness.ContentReasoning, Text: "The user wants the weather."},
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
			Temperature: &temp, TopP: &topP, MaxOutputTokens: &maxTokens, Seed: &seed,
			StopSequences: []string{"END"}, Reasoning: "low",
			ProviderOptions: map[string]map[string]json.RawMessage{
				"openai":  {"parallelToolCalls": json.RawMessage(`false`), "user": json.RawMessage(`"u-42"`)},
				"gateway": {"caching": json.RawMessage(`"auto"`)},
			},
			Extra: map[string]json.RawMessage{"toolChoice": json.RawMessage(`"auto"`), "toolsContext": json.RawMessage(`{"tenant":"t1"}`)},
		},
	}
}

func TestRequestBodyGolden(t *testing.T) {
	srv, got := providertest.Replay(t, "text.sse")
	s := open(t, New(Options{BaseURL: srv.URL}), context.Background(), goldenRequest())
	if _, err := providertest.Drain(t, s); err != io.EOF {
		t.Fatal(err)
	}
	var want map[string]any
	if err := json.Unmarshal(providertest.Fixture(t, "request_golden.json"), &want); err != nil {
		t.Fatal(err)
	}
	if body := got.BodyJSON(t); !reflect.DeepEqual(body, want) {
		t.Fatalf("request body differs from testdata/request_golden.json\n got: %s\nwant: %s", providertest.MustJSON(t, body), providertest.MustJSON(t, want))
	}
}

// rewrite sends every request to a test server, keeping the Host the
// provider addressed.
type rewrite struct{ target *url.URL }

func (rw rewrite) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Host = r.URL.Host
	r.URL.Scheme, r.URL.Host = rw.target.Scheme, rw.target.Host
	return http.DefaultTransport.RoundTrip(r)
}

func clientTo(t *testing.T, srv *httptest.Server) *http.Client {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: rewrite{u}}
}

// R-GEN-24 R-GEN-26: for the Gateway base URL, the Gateway defaults reach
// the wire: providerOptions.gateway.caching "auto" in the body and the
// session's x-session-affinity header.
func TestGatewayDefaultsReachTheWire(t *testing.T) {
	srv, got := providertest.Replay(t, "text.sse")
	m := New(Options{BaseURL: GatewayBaseURL, APIKey: "gw-key", HTTPClient: clientTo(t, srv)})
	req := simpleRequest()
	req.Model = "anthropic/claude-sonnet-4.5"
	req.SessionID = "S1"
	req.Settings = harness.WithGatewayDefaults(harness.GenerationSettings{
		ProviderOptions: map[string]map[string]json.RawMessage{"gateway": {"order": json.RawMessage(`["anthropic","bedrock"]`)}},
	}, req.SessionID)
	req.Headers = harness.RequestHeaders(nil, req.Settings)
	s := open(t, m, context.Background(), req)
	if _, err := providertest.Drain(t, s); err != io.EOF {
		t.Fatal(err)
	}
	if got.Host != gatewayHost || got.Path != "/v1/chat/completions" {
		t.Fatalf("sent to %s%s", got.Host, got.Path)
	}
	if got.Header.Get(harness.SessionAffinityHeader) != harness.SessionAffinity("S1") {
		t.Fatalf("x-session-affinity = %q", got.Header.Get(harness.SessionAffinityHeader))
	}
	if got.Header.Get("Authorization") != "Bearer gw-key" {
		t.Fatalf("authorization %q", got.Header.Get("Authorization"))
	}
	body := got.BodyJSON(t)
	want := map[string]any{"gateway": map[string]any{"caching": "auto", "order": []any{"anthropic", "bedrock"}}}
	if !reflect.DeepEqual(body["providerOptions"], want) {
		t.Fatalf("providerOptions = %v", body["providerOptions"])
	}
	if body["model"] != "anthropic/claude-sonnet-4.5" {
		t.Fatalf("a Gateway model keeps its provider prefix: %v", body["model"])
	}
}

// R-GEN-26: the application suppresses the affinity header with a nil
// value, even one the provider's own headers carry.
func TestSessionAffinitySuppressed(t *testing.T) {
	srv, got := providertest.Replay(t, "text.sse")
	m := New(Options{BaseURL: GatewayBaseURL, HTTPClient: clientTo(t, srv), Headers: map[string]string{"X-Session-Affinity": "from-model"}})
	req := simpleRequest()
	req.Settings = harness.WithGatewayDefaults(harness.GenerationSettings{Headers: map[string]*string{"X-Session-Affinity": nil}}, "S1")
	req.Headers = harness.RequestHeaders(nil, req.Settings)
	s := open(t, m, context.Background(), req)
	if _, err := providertest.Drain(t, s); err != io.EOF {
		t.Fatal(err)
	}
	if v, ok := got.Header[http.CanonicalHeaderKey(harness.SessionAffinityHeader)]; ok {
		t.Fatalf("x-session-affinity sent: %v", v)
	}
}

// Gateway options stay off the wire for other servers, which would reject
// or ignore an unknown field.
func TestGatewayOptionsOnlyForTheGateway(t *testing.T) {
	srv, got := providertest.Replay(t, "text.sse")
	req := simpleRequest()
	req.Settings = harness.WithGatewayDefaults(harness.GenerationSettings{}, "S1")
	s := open(t, New(Options{BaseURL: srv.URL}), context.Background(), req)
	if _, err := providertest.Drain(t, s); err != io.EOF {
		t.Fatal(err)
	}
	if _, ok := got.BodyJSON(t)["providerOptions"]; ok {
		t.Fatal("providerOptions sent to a server that is not the Gateway")
	}
	if !IsGatewayURL("https://AI-Gateway.vercel.sh/v1") || IsGatewayURL("http://localhost:11434/v1") {
		t.Fatal("IsGatewayURL")
	}
}

func TestOpenAIHostSpecifics(t *testing.T) {
	srv, got := providertest.Replay(t, "text.sse")
	m := New(Options{BaseURL: DefaultBaseURL, HTTPClient: clientTo(t, srv)})
	req := simpleRequest()
	req.Model = "openai/gpt-5-mini"
	n := int64(300)
	req.Settings.MaxOutputTokens = &n
	req.Settings.Reasoning = "provider-default"
	s := open(t, m, context.Background(), req)
	if _, err := providertest.Drain(t, s); err != io.EOF {
		t.Fatal(err)
	}
	body := got.BodyJSON(t)
	if body["model"] != "gpt-5-mini" || body["max_completion_tokens"] != float64(300) {
		t.Fatalf("model %v, max_completion_tokens %v", body["model"], body["max_completion_tokens"])
	}
	for _, k := range []string{"max_tokens", "reasoning_effort"} {
		if _, ok := body[k]; ok {
			t.Fatalf("%s sent", k)
		}
	}
}

func TestToolChoiceAndOptionOverrides(t *testing.T) {
	m := New(Options{BaseURL: "http://localhost:11434/v1", ProviderOptionsKey: "ollama"})
	req := simpleRequest()
	n := int64(64)
	req.Settings.MaxOutputTokens = &n
	req.Settings.Reasoning = "none"
	req.Settings.Extra = map[string]json.RawMessage{"toolChoice": json.RawMessage(`{"type":"tool","toolName":"get_weather"}`), "presencePenalty": json.RawMessage(`0.5`)}
	req.Settings.ProviderOptions = map[string]map[string]json.RawMessage{
		"ollama": {"maxCompletionTokens": json.RawMessage(`99`), "top_k": json.RawMessage(`40`)},
		"openai": {"user": json.RawMessage(`"not-this-provider"`)},
	}
	body, err := m.requestBody(req)
	if err != nil {
		t.Fatal(err)
	}
	raw := providertest.MustJSON(t, body)
	var got map[string]any
	_ = json.Unmarshal([]byte(raw), &got)
	if !reflect.DeepEqual(got["tool_choice"], map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}) {
		t.Fatalf("tool_choice %v", got["tool_choice"])
	}
	if got["max_completion_tokens"] != float64(99) || got["top_k"] != float64(40) || got["presence_penalty"] != 0.5 || got["reasoning_effort"] != "none" {
		t.Fatalf("%s", raw)
	}
	if _, ok := got["max_tokens"]; ok {
		t.Fatal("max_tokens must give way to max_completion_tokens from provider options")
	}
	if _, ok := got["user"]; ok {
		t.Fatal("another provider's options were merged")
	}
	req.Settings.Extra = map[string]json.RawMessage{"toolChoice": json.RawMessage(`"sometimes"`)}
	if _, err := m.requestBody(req); !errors.Is(err, ErrUnsupportedContent) {
		t.Fatalf("bad toolChoice: %v", err)
	}
}

func TestUnsupportedFileIsAnError(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer srv.Close()
	req := simpleRequest()
	req.Messages[0].Content = append(req.Messages[0].Content, harness.ContentPart{Type: harness.ContentFile, MediaType: "audio/wav", Data: "data:audio/wav;base64,AAAA"})
	_, err := New(Options{BaseURL: srv.URL}).Stream(context.Background(), req)
	if !errors.Is(err, ErrUnsupportedContent) || calls.Load() != 0 {
		t.Fatalf("err %v, calls %d", err, calls.Load())
	}
	req.Messages = []harness.ModelMessage{{Role: "narrator"}}
	if _, err := New(Options{BaseURL: srv.URL}).Stream(context.Background(), req); !errors.Is(err, harness.ErrUnsupportedRole) {
		t.Fatalf("unknown role: %v", err)
	}
}

func TestToolCallArguments(t *testing.T) {
	for in, want := range map[string]string{``: `{}`, `null`: `{}`, ` {"a":1} `: `{"a":1}`, `"{\"city\":"`: `{"city":`} {
		if got := arguments(json.RawMessage(in)); got != want {
			t.Errorf("arguments(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestMapFinishReason(t *testing.T) {
	for in, want := range map[string]string{"stop": "stop", "length": "length", "tool_calls": "tool-calls",
		"function_call": "tool-calls", "content_filter": "content-filter", "error": "error", "": "other", "eos": "other"} {
		if got := mapFinishReason(in); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
}

func TestEnvOptions(t *testing.T) {
	env := map[string]string{"OPENAI_API_KEY": "sk-1", "OPENAI_BASE_URL": "http://localhost:11434/v1", "AI_GATEWAY_API_KEY": "gw-1"}
	o := EnvOptions(func(k string) string { return env[k] })
	if o.APIKey != "sk-1" || o.BaseURL != "http://localhost:11434/v1" {
		t.Fatalf("%+v", o)
	}
	g := GatewayEnvOptions(func(k string) string { return env[k] })
	if g.APIKey != "gw-1" || !New(g).gateway {
		t.Fatalf("%+v", g)
	}
	if New(Options{}).endpoint != DefaultBaseURL+"/chat/completions" {
		t.Fatal("default base URL")
	}
}

// FuzzStream feeds arbitrary bytes to the stream decoder: it must end with
// an error or io.EOF, never panic or loop.
func FuzzStream(f *testing.F) {
	for _, name := range []string{"text.sse", "reasoning.sse", "reasoning_field.sse", "tool_calls.sse", "tool_invalid.sse", "error_midstream.sse"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":{\"a\":1}}}]}}]}\n\n"))
	f.Add([]byte("event: error\ndata: not json\n\n"))
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
	providertest.CheckReady(t, open, providertest.Fixture(t, "text.sse"), 3, "Hello")
}
