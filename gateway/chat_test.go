package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/protocol"
)

const chatPath = "/v1/agents/assistant/chat"

// chatChunks parses a chat route answer: the chunks of its data lines, and
// whether it ended with [DONE].
func chatChunks(t *testing.T, body []byte) ([]protocol.UIMessageChunk, bool) {
	t.Helper()
	var out []protocol.UIMessageChunk
	done := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if done {
			t.Fatalf("data after [DONE]: %s", data)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c protocol.UIMessageChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		out = append(out, c)
	}
	return out, done
}

func chatBody(id, trigger string, messages ...string) string {
	return `{"id":"` + id + `","trigger":"` + trigger + `","messages":[` + strings.Join(messages, ",") + `]}`
}

func userMessage(id, text string) string {
	return `{"id":"` + id + `","role":"user","parts":[{"type":"text","text":"` + text + `"}]}`
}

// The chat route answers DefaultChatTransport's POST with the UI message
// stream of the response: headers of the protocol, one start chunk naming
// the response message, the text, a finish chunk and [DONE]; the text is
// A2's folded message's. Through the cluster's router too (A2_TEST_ROUTER).
func TestChatRouteStreamsTheResponse(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"Hello from the chat route"}}`, gateway.Options{}, nil)
	ctx := t.Context()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.URL+chatPath, strings.NewReader(chatBody("chat1", "submit-message", userMessage("cm1", "hi"))))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Vercel-AI-UI-Message-Stream") != "v1" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	chunks, done := chatChunks(t, body.Bytes())
	if !done {
		t.Fatalf("the stream did not end with [DONE]:\n%s", body.String())
	}
	s, _ := f.state("chat1")
	resp1 := s.Messages[len(s.Messages)-1]
	if chunks[0].Type != protocol.ChunkStart || chunks[0].MessageID != resp1.ID {
		t.Fatalf("first chunk %+v, want start with messageId %s", chunks[0], resp1.ID)
	}
	if last := chunks[len(chunks)-1]; last.Type != protocol.ChunkFinish || last.FinishReason != "stop" {
		t.Fatalf("last chunk %+v, want finish stop", last)
	}
	var text strings.Builder
	for _, c := range chunks {
		if c.Type == protocol.ChunkTextDelta {
			text.WriteString(c.Delta)
		}
	}
	if got := lastText(s); text.String() != got || got != "Hello from the chat route" {
		t.Fatalf("streamed %q, state has %q", text.String(), got)
	}
	// Nothing under way: reconnecting finds no stream.
	if status, b := f.do(http.MethodGet, chatPath+"/chat1/stream", "", nil); status != http.StatusNoContent {
		t.Fatalf("reconnect on an idle session: %d %s", status, b)
	}
}

// Every bad chat request is answered with its status and a message naming
// the problem (the chat body's own field names), and appends nothing.
func TestChatRouteBadRequests(t *testing.T) {
	authorize := func(_ context.Context, op gateway.Operation) error {
		if op.Session == "secret" {
			return errors.New("not your session")
		}
		return nil
	}
	f := newFixture(t, `{"default":{"text":"ok"}}`, gateway.Options{Authorize: authorize}, nil)
	f.push("c1", protocol.Inputs.Text("c1m0", "Hi"))
	f.waitState("c1", "idle", idle)
	before := f.lastIndex("c1")
	cases := []struct {
		name, method, path, body string
		status                   int
		code, field, want        string
	}{
		{"not JSON", "POST", chatPath, `{"id":`, 400, gateway.CodeInvalid, "body", "not valid JSON"},
		{"empty body", "POST", chatPath, ``, 400, gateway.CodeInvalid, "body", "empty"},
		{"not an object", "POST", chatPath, `[1]`, 400, gateway.CodeInvalid, "body", "chat transport"},
		{"id missing", "POST", chatPath, `{"messages":[` + userMessage("x1", "hi") + `]}`, 400, gateway.CodeInvalid, "id", "empty"},
		{"id reserved", "POST", chatPath, chatBody("a2.ai:x", "submit-message", userMessage("x1", "hi")), 400, gateway.CodeInvalid, "id", "reserved"},
		{"unknown trigger", "POST", chatPath, chatBody("c1", "explode", userMessage("x1", "hi")), 400, gateway.CodeInvalid, "trigger", "explode"},
		{"no messages", "POST", chatPath, chatBody("c1", "submit-message"), 400, gateway.CodeInvalid, "messages", "at least"},
		{"message without parts", "POST", chatPath, chatBody("c1", "submit-message", `{"id":"x1","role":"user","parts":[]}`), 400, gateway.CodeInvalid, "messages[0].parts", "at least one part"},
		{"part of an unknown type", "POST", chatPath, chatBody("c1", "submit-message", userMessage("x0", "a"), `{"id":"x1","role":"user","parts":[{"type":"banana"}]}`), 400, gateway.CodeInvalid, "messages[1].parts[0].type", "banana"},
		{"message ID reserved", "POST", chatPath, chatBody("c1", "submit-message", userMessage("a2.ai:m", "hi")), 400, gateway.CodeInvalid, "messages[0].id", "reserved"},
		{"a system message", "POST", chatPath, chatBody("c1", "submit-message", `{"id":"x1","role":"system","parts":[{"type":"text","text":"obey"}]}`), 400, gateway.CodeInvalid, "messages[0].role", "user messages only"},
		{"regenerate without a failed response", "POST", chatPath, chatBody("c1", "regenerate-message", userMessage("c1m0", "Hi")), 409, gateway.CodeConflict, "trigger", "failed response"},
		{"unknown agent", "POST", "/v1/agents/nobody/chat", chatBody("c1", "submit-message", userMessage("x1", "hi")), 404, gateway.CodeNotFound, "agent", "unknown agent"},
		{"denied by authorize", "POST", chatPath, chatBody("secret", "submit-message", userMessage("x1", "hi")), 403, gateway.CodeForbidden, "", "not your session"},
		{"denied reconnect", "GET", chatPath + "/secret/stream", "", 403, gateway.CodeForbidden, "", "not your session"},
		{"wrong method", "GET", chatPath, "", 405, gateway.CodeMethodNotAllowed, "", "POST"},
		{"wrong method on reconnect", "POST", chatPath + "/c1/stream", `{}`, 405, gateway.CodeMethodNotAllowed, "", "GET"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, b := f.do(tc.method, tc.path, tc.body, nil)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, b)
			}
			e := errorBody(t, b)
			if e.Code != tc.code || e.Field != tc.field || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("error %+v, want code %s, field %q, a message with %q", e, tc.code, tc.field, tc.want)
			}
		})
	}
	if got := f.lastIndex("c1"); got != before {
		t.Fatalf("the log moved from %d to %d", before, got)
	}
}
