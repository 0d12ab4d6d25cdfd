package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/protocol"
)

// fixtureProvider replays a provider's streaming wire format from
// testdata: the tool-calling step for a prompt without tool results, the
// text step for the continuation that carries them.
func fixtureProvider(t *testing.T, path, tools, text, toolResultMarker string) (*httptest.Server, *[]string) {
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			http.Error(w, "unexpected path "+r.URL.Path, http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		file := tools
		if strings.Contains(string(b), toolResultMarker) {
			file = text
		}
		data, err := os.ReadFile("testdata/" + file)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(data)
	}))
	t.Cleanup(srv.Close)
	return srv, &bodies
}

// A full turn with two tool calls and a text answer runs end to end
// through the node against each provider's fixture server: the provider
// streams two tool calls, A2 runs the demo tools durably, and the
// continuation's text answer completes the turn.
func TestNodeTurnThroughEachProvider(t *testing.T) {
	for _, tc := range []struct {
		name, path, tools, text, marker string
		env                             func(url string) map[string]string
	}{
		{"openai-compatible", "/v1/chat/completions", "openai_tools.sse", "openai_text.sse", `"role":"tool"`,
			func(url string) map[string]string {
				return map[string]string{"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": url + "/v1"}
			}},
		{"anthropic", "/v1/messages", "anthropic_tools.sse", "anthropic_text.sse", `"tool_result"`,
			func(url string) map[string]string {
				return map[string]string{"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": url}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, bodies := fixtureProvider(t, tc.path, tc.tools, tc.text, tc.marker)
			env := tc.env(srv.URL)
			n := startNode(t, config{getenv: func(k string) string { return env[k] }})
			c, err := client.New(n.url, "assistant", client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := c.Push(ctx, "e2e", protocol.Inputs.Text("m1", "What time is it, and what is (2+3)*4?")); err != nil {
				t.Fatal(err)
			}
			var st *protocol.AIState
			for {
				s, _, err := c.State(ctx, "e2e")
				if err != nil {
					t.Fatal(err)
				}
				st = s.AI
				if st.Active == nil && len(st.Messages) == 2 {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("the turn did not complete: status %s", st.Status)
				}
				time.Sleep(10 * time.Millisecond)
			}
			var tools, text []string
			for _, p := range st.Messages[1].Parts {
				switch {
				case p.IsToolPart():
					tools = append(tools, p.ToolNameOf()+":"+p.State)
				case p.Type == protocol.PartText:
					text = append(text, p.Text)
				}
			}
			if strings.Join(tools, ",") != "current_time:output-available,calculator:output-available" {
				t.Fatalf("tool parts %v", tools)
			}
			if got := strings.Join(text, "|"); !strings.Contains(got, "(2+3)*4 is 20") {
				t.Fatalf("text %q", got)
			}
			if len(*bodies) != 2 || !strings.Contains((*bodies)[1], "20") {
				t.Fatalf("%d provider calls; the continuation must carry the calculator's result", len(*bodies))
			}
		})
	}
}
