package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/gateway/gatewaytest"
)

// fuzzRoutes are the routes whose request a client writes: a body, a
// query, or both.
var fuzzRoutes = []struct{ method, path string }{
	{"POST", sessionsPath + "s1/events"},
	{"POST", "/v1/agents/assistant/chat"},
	{"GET", sessionsPath + "s1/events"},
	{"GET", sessionsPath + "s1/state"},
	{"POST", "/v1/admin/agents/assistant/sessions/s1/events"},
}

// FuzzRequests sends any body and query to the routes clients write to, on
// a node over real HTTP: the answer is never a server error (a panic is
// one: the gateway recovers it as 500), and a refused request changes
// neither the session's log nor the store's sessions.
func FuzzRequests(f *testing.F) {
	for _, b := range []string{
		events(send("f1", "user", "hi")),
		`{"events":[`,
		events(cmd("c1", `{"action":"pause","when":"now"}`)),
		`{"id":"chat1","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}]}`,
		`{"id":"chat2","trigger":"submit-message","messages":[{"id":"u2","role":"user","parts":[{"type":"file","url":"x"}]}]}`,
		`{"events":[{"id":"a2.ai:x","type":"ai.generation.started","payload":{}}]}`,
	} {
		for route := range fuzzRoutes {
			f.Add(uint8(route), "", b)
		}
	}
	f.Add(uint8(2), "after=-1&limit=abc", "")
	f.Add(uint8(3), "at=99999999999999999999", "")
	// One node for every input (Start stops it when the fuzzing ends).
	fx := &fixture{Node: gatewaytest.Start(f, gatewaytest.Options{Script: `{"default":{"text":"ok"}}`,
		Gateway: gateway.Options{MaxBodyBytes: 64 << 10, MaxEvents: 10}})}
	f.Fuzz(func(t *testing.T, route uint8, query, body string) {
		fx.t = t
		r := fuzzRoutes[int(route)%len(fuzzRoutes)]
		if strings.IndexFunc(query, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '#' }) >= 0 {
			return // not a request line a client can send
		}
		ctx := context.Background()
		before := fx.lastIndex("s1")
		sessions, err := fx.Store.Sessions(ctx, "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		path := r.path
		if query != "" {
			path += "?" + query
		}
		status, answer := fx.do(r.method, path, body, map[string]string{"Content-Type": "application/json"})
		if status >= 500 {
			t.Fatalf("%s %s with %q: %d %s", r.method, path, body, status, answer)
		}
		if status >= 400 && r.method == "POST" {
			if after := fx.lastIndex("s1"); after != before {
				t.Fatalf("a refused %s (%d %s) moved s1 from %d to %d", r.path, status, answer, before, after)
			}
			now, _ := fx.Store.Sessions(ctx, "", 1000)
			if len(now) != len(sessions) {
				t.Fatalf("a refused %s (%d %s) made a session: %v, were %v", r.path, status, answer, now, sessions)
			}
		}
		// Work the request started (a turn) ends before the next input, so
		// that each input meets a settled session.
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, idle, err := fx.Runtime.Idle(ctx, "assistant", "s1")
			if err != nil || idle || time.Now().After(deadline) {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
}
