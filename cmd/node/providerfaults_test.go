package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/protocol"
)

// faultyProvider is an OpenAI-compatible server whose first answer to a
// prompt naming a fault misbehaves that way, and whose later answers (a
// retry's) are a short text. stalled counts the stalled requests whose
// connection the node closed.
func faultyProvider(t *testing.T) (*httptest.Server, *sync.WaitGroup) {
	var mu sync.Mutex
	seen := map[string]int{}
	var stalls sync.WaitGroup
	chunk := func(delta string) string {
		return `data: {"id":"c1","object":"chat.completion.chunk","created":1767225600,"model":"gpt-test","choices":[{"index":0,"delta":{"content":` +
			fmt.Sprintf("%q", delta) + `},"finish_reason":null}]}` + "\n\n"
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fault := ""
		for _, f := range []string{"stall", "cut", "garbage", "unavailable"} {
			if strings.Contains(string(body), "please "+f) {
				fault = f
			}
		}
		mu.Lock()
		seen[fault]++
		first := seen[fault] == 1
		mu.Unlock()
		if fault == "unavailable" && first {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"the provider is overloaded","type":"server_error","code":"overloaded"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		if fault != "" && first {
			_, _ = io.WriteString(w, chunk("Partial "))
			fl.Flush()
			switch fault {
			case "stall":
				stalls.Add(1)
				defer stalls.Done()
				<-r.Context().Done() // until the node gives up and closes the request
				return
			case "cut":
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					_ = conn.Close()
				}
				return
			case "garbage":
				_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\n\n")
				fl.Flush()
				return
			}
		}
		_, _ = io.WriteString(w, chunk("Answered."))
		_, _ = io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1767225600,"model":"gpt-test","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv, &stalls
}

// A provider that misbehaves fails the turn with a clear error and
// changes nothing else: it stalls (the step timeout ends the step and
// closes its request), cuts the connection mid-stream, sends bytes that
// are not its format, or answers 503. The text streamed before the fault
// stays in the response; a retry answers; the node serves on.
func TestNodeProviderFaults(t *testing.T) {
	srv, stalls := faultyProvider(t)
	env := map[string]string{"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": srv.URL + "/v1"}
	n := startNode(t, config{getenv: func(k string) string { return env[k] }, stepTimeout: time.Second})
	c, err := client.New(n.url, "assistant", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wait := func(session, what string, done func(*protocol.AIState) bool) *protocol.AIState {
		t.Helper()
		for {
			s, _, err := c.State(ctx, session)
			if err != nil {
				t.Fatal(err)
			}
			if done(s.AI) {
				return s.AI
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: %s: status %s, error %+v", session, what, s.AI.Status, s.AI.Error)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	text := func(st *protocol.AIState) string {
		var b strings.Builder
		for _, m := range st.Messages {
			if m.Role == protocol.RoleAssistant {
				for _, p := range m.Parts {
					if p.Type == protocol.PartText {
						b.WriteString(p.Text)
					}
				}
			}
		}
		return b.String()
	}
	for _, tc := range []struct {
		fault, err, partial string
	}{
		{"stall", "the model step timed out after 1s", "Partial "},
		{"cut", "unexpected EOF", "Partial "},
		{"garbage", "", "Partial "},
		{"unavailable", "the provider is overloaded", ""},
	} {
		session := "fault-" + tc.fault
		if _, err := c.Push(ctx, session, protocol.Inputs.Text("m-"+tc.fault, "please "+tc.fault)); err != nil {
			t.Fatal(err)
		}
		st := wait(session, "the failure", func(s *protocol.AIState) bool { return s.Status == protocol.StatusFailed })
		if st.Error == nil || st.Error.Message == "" || !strings.Contains(st.Error.Message, tc.err) {
			t.Fatalf("%s: error %+v, want one saying %q", tc.fault, st.Error, tc.err)
		}
		if got := text(st); got != tc.partial {
			t.Fatalf("%s: the response's text is %q, want what streamed before the fault, %q", tc.fault, got, tc.partial)
		}
		retry := protocol.Actions{View: st, NewID: func() string { return "retry-" + tc.fault }}.Retry()
		if _, err := c.Push(ctx, session, retry...); err != nil {
			t.Fatal(err)
		}
		wait(session, "the retry", func(s *protocol.AIState) bool {
			return s.Status == protocol.StatusIdle && s.Active == nil && strings.Contains(text(s), "Answered.")
		})
	}
	// The stalled request was closed by the node, not left open.
	stalled := make(chan struct{})
	go func() { stalls.Wait(); close(stalled) }()
	select {
	case <-stalled:
	case <-ctx.Done():
		t.Fatal("the stalled provider request is still open")
	}
}
