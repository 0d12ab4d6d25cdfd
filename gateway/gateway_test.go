package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/internal/testutil"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/gateway/gatewaytest"
	"github.com/a2-runtime/a2/protocol"
)

// R-FETCH-01 R-INPUT-27 R-FETCH-08: a first conversation through the API:
// the push answers once durable with the events' indexes (persistence, not
// application: the receipt comes on the stream), the state shows the
// answer, the history pages through the log, and an identical resubmission
// answers the same and appends nothing.
func TestFirstConversation(t *testing.T) {
	f := newFixture(t, `{"replies":[{"text":"Hello there, how can I help?"}]}`, gateway.Options{}, nil)
	status, b := f.do(http.MethodGet, "/healthz", "", nil)
	if status != http.StatusOK || string(b) != "ok\n" {
		t.Fatalf("healthz: %d %q", status, b)
	}
	out := f.push("s1", protocol.Inputs.Text("m1", "Hi"))
	// Index 2: the session's first write starts with ai.session.created.
	if len(out) != 1 || out[0] != (pushed{ID: "m1", Type: protocol.TypeControlRequested, Index: 2}) {
		t.Fatalf("push answered %+v", out)
	}
	st, index := f.waitState("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	if got := lastText(st); got != "Hello there, how can I help?" {
		t.Fatalf("answer %q", got)
	}
	if st.Receipt == nil || st.Receipt.CommandID != "m1" || st.Receipt.Outcome != protocol.OutcomeApplied {
		t.Fatalf("receipt %+v", st.Receipt)
	}
	all := f.history("s1")
	if uint64(len(all)) != index || all[0].Type != protocol.TypeSessionCreated || all[1].ID != "m1" || all[1].Session != "s1" || all[len(all)-1].Index != index {
		t.Fatalf("history of %d events, state at %d", len(all), index)
	}
	for i, ev := range all {
		if ev.Index != uint64(i+1) {
			t.Fatalf("history index %d at position %d", ev.Index, i)
		}
	}
	// Paging: limit and next.
	status, b = f.do(http.MethodGet, sessionsPath+"s1/events?after=1&limit=2", "", nil)
	var page struct {
		Events []protocol.Event `json:"events"`
		Next   uint64           `json:"next"`
	}
	if err := json.Unmarshal(b, &page); status != http.StatusOK || err != nil || len(page.Events) != 2 || page.Next != 3 || page.Events[0].Index != 2 {
		t.Fatalf("page: %d %s", status, b)
	}
	status, b = f.do(http.MethodGet, sessionsPath+"s1/events?after=1000", "", nil)
	if status != http.StatusOK || !bytes.Contains(b, []byte(`"events":[]`)) || !bytes.Contains(b, []byte(`"next":1000`)) {
		t.Fatalf("a page past the end: %d %s", status, b)
	}
	// R-LOG-09: the identical resubmission (a transport retry) answers the
	// same and appends nothing.
	again := f.push("s1", protocol.Inputs.Text("m1", "Hi"))
	if !reflect.DeepEqual(again, out) || f.lastIndex("s1") != index {
		t.Fatalf("resubmission answered %+v, log at %d (was %d)", again, f.lastIndex("s1"), index)
	}
	// Session IDs are path segments, escaped: any caller ID works.
	odd := "team/alpha room?"
	f.push("team%2Falpha%20room%3F", protocol.Inputs.Text("odd1", "Hi"))
	if hist := f.history("team%2Falpha%20room%3F"); len(hist) == 0 || hist[0].Session != odd {
		t.Fatalf("history of %q: %+v", odd, hist)
	}
	// A session nobody wrote to reads as empty, not as an error.
	empty, at := f.state("nobody")
	if at != 0 || len(empty.Messages) != 0 {
		t.Fatalf("an empty session: index %d", at)
	}
}

// R-FETCH-01: a stream cut in the middle of a turn and resumed with
// Last-Event-ID (which wins over ?after) sees every event of the log
// exactly once, in order.
func TestStreamResumesWithLastEventID(t *testing.T) {
	f := newFixture(t, `{"replies":[{"text":"one two three four five six seven","gate":"g"}]}`, gateway.Options{}, nil)
	a := f.openStream("s1", "", "")
	f.push("s1", protocol.Inputs.Text("m1", "Hi"))
	// Read up to the first text delta: the model holds at its gate there,
	// so the turn is certainly not over.
	var first []protocol.Event
	for {
		ev, ok := a.nextEvent(t, 10*time.Second)
		if !ok {
			t.Fatal("the stream ended")
		}
		first = append(first, ev)
		if ev.Type == protocol.TypeGenerationCompleted {
			t.Fatal("the turn completed before the cut")
		}
		if ev.Type == protocol.TypeGenerationProgress && bytes.Contains(ev.Payload, []byte(`"text-delta"`)) {
			break
		}
	}
	a.close()
	cut := first[len(first)-1].Index
	f.Model.Release("g")
	_, last := f.waitState("s1", "the turn's end", idle)
	b := f.openStream("s1", "?after=0", fmt.Sprint(cut))
	rest := b.readUntil(t, last)
	seen := append(first, rest...)
	want := f.history("s1")
	if len(seen) != len(want) {
		t.Fatalf("saw %d events across the cut at %d, the log has %d", len(seen), cut, len(want))
	}
	for i := range want {
		if seen[i].ID != want[i].ID || seen[i].Index != want[i].Index {
			t.Fatalf("event %d: saw %s@%d, log has %s@%d", i, seen[i].ID, seen[i].Index, want[i].ID, want[i].Index)
		}
	}
	// ?after alone resumes too.
	c := f.openStream("s1", fmt.Sprintf("?after=%d", last-2), "")
	if got := c.readUntil(t, last); len(got) != 2 || got[0].Index != last-1 {
		t.Fatalf("?after=%d gave %d events", last-2, len(got))
	}
}

// R-FETCH-01: fifty clients streaming one session observe the identical
// sequence, the log's.
func TestConcurrentStreamsSeeTheSameSequence(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"An answer in a few words."}}`, gateway.Options{}, nil)
	const clients = 50
	conns := make([]*sseConn, clients)
	for i := range conns {
		conns[i] = f.openStream("s1", "", "")
	}
	for i := 1; i <= 3; i++ {
		f.push("s1", protocol.Inputs.Text(fmt.Sprintf("m%d", i), fmt.Sprintf("message %d", i)))
	}
	_, last := f.waitState("s1", "three answers", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 6 })
	want := f.history("s1")
	var wg sync.WaitGroup
	got := make([][]protocol.Event, clients)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = conns[i].readUntil(t, last)
		}()
	}
	wg.Wait()
	for i := range got {
		if len(got[i]) != len(want) {
			t.Fatalf("client %d saw %d events, the log has %d", i, len(got[i]), len(want))
		}
		for j := range want {
			if got[i][j].ID != want[j].ID || got[i][j].Index != want[j].Index || !bytes.Equal(got[i][j].Payload, want[j].Payload) {
				t.Fatalf("client %d, event %d differs from the log", i, j)
			}
		}
	}
}

// R-FETCH-05 R-INPUT-24 R-FETCH-06: Authorize sees every read and push of
// the untrusted routes; a denial is 403 and appends nothing; trusted admin
// appends skip it.
func TestAuthorize(t *testing.T) {
	var mu sync.Mutex
	var ops []gateway.Operation
	authorize := func(_ context.Context, op gateway.Operation) error {
		mu.Lock()
		ops = append(ops, op)
		mu.Unlock()
		if op.Session == "secret" {
			return errors.New("not your session")
		}
		for _, ev := range op.Events {
			if bytes.Contains(ev.Payload, []byte("forbidden")) {
				return errors.New("no forbidden words")
			}
		}
		return nil
	}
	f := newFixture(t, `{"default":{"text":"ok"}}`, gateway.Options{Authorize: authorize, AdminToken: "t0ken"}, nil)
	f.push("s1", protocol.Inputs.Text("m1", "fine"))
	before := f.lastIndex("s1")
	status, b := f.do(http.MethodPost, sessionsPath+"s1/events", pushBody(protocol.Inputs.Text("m2", "forbidden words")), nil)
	if e := errorBody(t, b); status != http.StatusForbidden || e.Code != gateway.CodeForbidden || !strings.Contains(e.Message, "no forbidden words") {
		t.Fatalf("denied push: %d %s", status, b)
	}
	for _, path := range []string{"secret/state", "secret/events", "secret/stream"} {
		status, b := f.do(http.MethodGet, sessionsPath+path, "", nil)
		if e := errorBody(t, b); status != http.StatusForbidden || !strings.Contains(e.Message, "not your session") {
			t.Fatalf("denied read %s: %d %s", path, status, b)
		}
	}
	f.waitState("s1", "idle", idle)
	if got := f.history("s1"); len(got) < int(before) || got[1].ID != "m1" {
		t.Fatalf("the log lost events: %d, was %d", len(got), before)
	}
	for _, ev := range f.history("s1") {
		if ev.ID == "m2" {
			t.Fatal("a denied push was appended")
		}
	}
	// The admin route is trusted: authorize does not see it.
	mu.Lock()
	seen := len(ops)
	mu.Unlock()
	status, b = f.do(http.MethodPost, "/v1/admin/agents/assistant/sessions/s1/events",
		pushBody(protocol.Inputs.Text("m3", "forbidden words, from the server")), map[string]string{"Authorization": "Bearer t0ken"})
	if status != http.StatusOK {
		t.Fatalf("admin push: %d %s", status, b)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ops) != seen {
		t.Fatalf("authorize saw the trusted append: %+v", ops[seen:])
	}
	first := ops[0]
	if first.Type != gateway.OpPush || first.Agent != "assistant" || first.Session != "s1" || len(first.Events) != 1 || first.Events[0].ID != "m1" {
		t.Fatalf("push operation %+v", first)
	}
	reads := 0
	for _, op := range ops {
		if op.Type == gateway.OpRead {
			reads++
			if op.Events != nil {
				t.Fatalf("a read carries events: %+v", op)
			}
		}
	}
	if reads < 3 {
		t.Fatalf("authorize saw %d reads", reads)
	}
}

// R-INPUT-20 R-INPUT-24 R-APPROVAL-03 R-TOOL-18: the admin route takes
// trusted appends with the admin token only; without a configured token it
// says how to set one.
func TestAdminRoute(t *testing.T) {
	seed := protocol.Inputs.Seed(protocol.UIMessage{ID: "sys1", Role: protocol.RoleSystem, Parts: []protocol.Part{{Type: protocol.PartText, Text: "Be brief."}}})
	const admin = "/v1/admin/agents/assistant/sessions/s1/events"

	off := newFixture(t, `{}`, gateway.Options{}, nil)
	status, b := off.do(http.MethodPost, admin, pushBody(seed), map[string]string{"Authorization": "Bearer anything"})
	if e := errorBody(t, b); status != http.StatusForbidden || !strings.Contains(e.Message, "A2_ADMIN_TOKEN") || !strings.Contains(e.Message, "--admin-token") {
		t.Fatalf("admin route without a token: %d %s", status, b)
	}
	if off.lastIndex("s1") != 0 {
		t.Fatal("appended through a disabled admin route")
	}

	f := newFixture(t, `{}`, gateway.Options{AdminToken: "s3cret"}, nil)
	for _, h := range []map[string]string{nil, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic czNjcmV0"}} {
		status, b := f.do(http.MethodPost, admin, pushBody(seed), h)
		if e := errorBody(t, b); status != http.StatusUnauthorized || e.Code != gateway.CodeUnauthorized {
			t.Fatalf("admin route with %v: %d %s", h, status, b)
		}
	}
	if f.lastIndex("s1") != 0 {
		t.Fatal("appended without the admin token")
	}
	auth := map[string]string{"Authorization": "Bearer s3cret"}
	// A system seed is trusted only (R-INPUT-20); browser ingress refuses it.
	if status, b := f.do(http.MethodPost, sessionsPath+"s1/events", pushBody(seed), nil); status != http.StatusBadRequest {
		t.Fatalf("browser system seed: %d %s", status, b)
	}
	trusted := []protocol.Event{
		seed,
		// R-APPROVAL-03: request-input is a trusted append.
		withID(protocol.Inputs.RequestInput(protocol.InputRequest{InputID: "i1", Request: []byte(`{"q":"env?"}`), RequestID: "r1", GenerationID: "g1"}), "ri1"),
		// R-TOOL-18: a deferred provider tool result is a trusted append.
		withID(protocol.Inputs.ToolResult(protocol.ToolResult{ToolCallID: "nope", GenerationID: "g1", Output: []byte(`{"page":"x"}`)}), "tr1"),
		{ID: "closed1", Type: protocol.TypeSessionClosed, Payload: json.RawMessage(`{}`)},
	}
	for _, ev := range trusted {
		status, b := f.do(http.MethodPost, admin, pushBody(ev), auth)
		if status != http.StatusOK {
			t.Fatalf("trusted %s: %d %s", ev.ID, status, b)
		}
	}
	st, _ := f.waitState("s1", "closed", func(s *protocol.AIState) bool { return s.Session.Status == protocol.SessionStatusClosed })
	if len(st.Messages) != 1 || st.Messages[0].Role != protocol.RoleSystem {
		t.Fatalf("the trusted seed is not in the transcript: %+v", st.Messages)
	}
	// Nothing A2 writes itself is accepted even from trusted code.
	gen := protocol.Event{ID: "g1", Type: protocol.TypeGenerationRequested, Payload: json.RawMessage(`{}`)}
	if status, b := f.do(http.MethodPost, admin, pushBody(gen), auth); status != http.StatusBadRequest {
		t.Fatalf("trusted ai.generation.requested: %d %s", status, b)
	}
}

func withID(ev protocol.Event, id string) protocol.Event { ev.ID = id; return ev }

// The stream sends a ": ping" comment when idle, and ends when the gateway
// closes.
func TestStreamHeartbeatAndClose(t *testing.T) {
	f := newFixture(t, `{}`, gateway.Options{HeartbeatInterval: 20 * time.Millisecond}, nil)
	c := f.openStream("s1", "", "")
	pings := 0
	timeout := time.After(10 * time.Second)
	for pings < 2 {
		select {
		case it, ok := <-c.items:
			if !ok {
				t.Fatal("the stream ended")
			}
			if it.Comment == "ping" {
				pings++
			}
		case <-timeout:
			t.Fatal("no heartbeat")
		}
	}
	f.Gateway.Close()
	for {
		select {
		case _, ok := <-c.items:
			if !ok {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the stream did not end when the gateway closed")
		}
	}
}

// Test mode: POST /v1/test/gates/{name} releases a script gate; without a
// script model the route does not exist.
func TestGateRoute(t *testing.T) {
	off := newFixture(t, `{}`, gateway.Options{}, nil)
	if status, _ := off.do(http.MethodPost, "/v1/test/gates/g", "", nil); status != http.StatusNotFound {
		t.Fatalf("gate route outside test mode: %d", status)
	}
	n := gatewaytest.Start(t, gatewaytest.Options{Script: `{"replies":[{"text":"held then released","gate":"g"}]}`, TestMode: true})
	f := wrapNode(t, n)
	f.push("s1", protocol.Inputs.Text("m1", "Hi"))
	f.waitState("s1", "streaming", func(s *protocol.AIState) bool { return s.Status == protocol.StatusStreaming })
	status, b := f.do(http.MethodPost, "/v1/test/gates/g", "", nil)
	if status != http.StatusOK || !bytes.Contains(b, []byte(`"released":"g"`)) {
		t.Fatalf("release: %d %s", status, b)
	}
	st, _ := f.waitState("s1", "the answer", idle)
	if lastText(st) != "held then released" {
		t.Fatalf("answer %q", lastText(st))
	}
}

// faultRouter injects errors and panics into the real router.
type faultRouter struct {
	gateway.Router
	pushErr error
	panics  bool
}

func (r faultRouter) Push(ctx context.Context, agent, session string, events []protocol.Event, trusted bool) ([]protocol.Event, error) {
	if r.panics {
		panic("injected panic")
	}
	if r.pushErr != nil {
		return nil, r.pushErr
	}
	return r.Router.Push(ctx, agent, session, events, trusted)
}

// The Router's unavailability is 503 with Retry-After; an internal error
// is a logged 500 without details; a panic is recovered into a logged 500.
func TestServerSideErrors(t *testing.T) {
	cases := []struct {
		name    string
		router  faultRouter
		status  int
		code    string
		logged  string
		message string
	}{
		{"unavailable", faultRouter{pushErr: fmt.Errorf("%w: session busy", actors.ErrUnavailable)}, http.StatusServiceUnavailable, gateway.CodeUnavailable, "", "retry"},
		{"closed", faultRouter{pushErr: actors.ErrClosed}, http.StatusServiceUnavailable, gateway.CodeUnavailable, "", "retry"},
		{"internal", faultRouter{pushErr: errors.New("disk on fire")}, http.StatusInternalServerError, gateway.CodeInternal, "disk on fire", "internal error"},
		{"panic", faultRouter{panics: true}, http.StatusInternalServerError, gateway.CodeInternal, "injected panic", "internal error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs testutil.SyncBuffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			f := newFixture(t, `{}`, gateway.Options{Logger: logger}, func(r gateway.Router) gateway.Router {
				tc.router.Router = r
				return tc.router
			})
			status, b := f.do(http.MethodPost, sessionsPath+"s1/events", pushBody(protocol.Inputs.Text("m1", "Hi")), nil)
			e := errorBody(t, b)
			if status != tc.status || e.Code != tc.code || !strings.Contains(e.Message, tc.message) {
				t.Fatalf("%d %s", status, b)
			}
			if strings.Contains(e.Message, "disk on fire") {
				t.Fatal("an internal error's details reached the client")
			}
			if tc.logged != "" && !strings.Contains(logs.String(), tc.logged) {
				t.Fatalf("not logged: %q", logs.String())
			}
			if f.lastIndex("s1") != 0 {
				t.Fatal("appended")
			}
			// The node keeps serving.
			if status, _ := f.do(http.MethodGet, "/healthz", "", nil); status != http.StatusOK {
				t.Fatalf("healthz after the error: %d", status)
			}
		})
	}
}

// Two agents on one node's store: a session ID belongs to the agent that
// wrote it first (docs/storage.md §1.1). The other agent's push, state,
// history and stream of that ID answer 409 SESSION_OWNED naming the owner,
// and nothing is appended.
func TestSessionOwnedByAnotherAgent(t *testing.T) {
	f := wrapNode(t, gatewaytest.Start(t, gatewaytest.Options{Script: `{"default":{"text":"ok"}}`, MoreAgents: []string{"helper"}}))
	f.push("s1", protocol.Inputs.Text("m1", "Hi"))
	f.waitState("s1", "idle", idle)
	before := f.lastIndex("s1")
	const other = "/v1/agents/helper/sessions/s1/"
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, other + "events", pushBody(protocol.Inputs.Text("m2", "Hi"))},
		{http.MethodGet, other + "state", ""},
		{http.MethodGet, other + "events", ""},
		{http.MethodGet, other + "stream", ""},
	} {
		status, b := f.do(c.method, c.path, c.body, nil)
		e := errorBody(t, b)
		if status != http.StatusConflict || e.Code != gateway.CodeSessionOwned || e.Field != "session" || !strings.Contains(e.Message, `"assistant"`) {
			t.Fatalf("%s %s: %d %s, want 409 %s naming the owner", c.method, c.path, status, b, gateway.CodeSessionOwned)
		}
	}
	if f.lastIndex("s1") != before {
		t.Fatal("the refused push appended")
	}
	// The helper's own sessions work.
	status, b := f.do(http.MethodPost, "/v1/agents/helper/sessions/s2/events", pushBody(protocol.Inputs.Text("m3", "Hi")), nil)
	if status != http.StatusOK {
		t.Fatalf("helper's own session: %d %s", status, b)
	}
}

// GET /v1/agents lists the agents a node serves (through the runtime's
// router and the cluster's alike); Authorize sees it, and may deny it.
func TestListAgents(t *testing.T) {
	deny := false
	var seen []gateway.Operation
	var mu sync.Mutex
	authorize := func(_ context.Context, op gateway.Operation) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, op)
		if deny {
			return errors.New("not for you")
		}
		return nil
	}
	f := wrapNode(t, gatewaytest.Start(t, gatewaytest.Options{MoreAgents: []string{"helper"}, Gateway: gateway.Options{Authorize: authorize}}))
	status, b := f.do(http.MethodGet, "/v1/agents", "", nil)
	if status != http.StatusOK || string(b) != `{"agents":[{"name":"assistant"},{"name":"helper"}]}`+"\n" {
		t.Fatalf("GET /v1/agents: %d %s", status, b)
	}
	mu.Lock()
	if len(seen) != 1 || seen[0].Type != gateway.OpListAgents || seen[0].Agent != "" || seen[0].Session != "" {
		t.Fatalf("authorize saw %+v", seen)
	}
	deny = true
	mu.Unlock()
	status, b = f.do(http.MethodGet, "/v1/agents", "", nil)
	if e := errorBody(t, b); status != http.StatusForbidden || !strings.Contains(e.Message, "not for you") {
		t.Fatalf("denied GET /v1/agents: %d %s", status, b)
	}
}

// A stream with until=idle is bounded: it sends the history and the live
// tail, and ends with ": idle" once the session is idle: after the turn a
// push started and the input queued behind it, not before.
func TestStreamUntilIdle(t *testing.T) {
	f := newFixture(t, `{"replies":[{"match":"first","text":"one two three","delayMs":20},{"match":"second","text":"four five"}]}`, gateway.Options{}, nil)
	read := func(query string) string {
		t.Helper()
		_, body := readBounded(t, http.MethodGet, f.URL+sessionsPath+"s1/stream"+query, "")
		return body
	}
	// An idle session (never written) ends at once.
	if got := read("?until=idle"); !strings.HasSuffix(got, ": idle\n\n") {
		t.Fatalf("an idle session's bounded stream: %q", got)
	}
	f.push("s1", protocol.Inputs.Text("m1", "first"), protocol.Inputs.Text("m2", "second"))
	got := read("?until=idle")
	if !strings.HasSuffix(got, ": idle\n\n") {
		t.Fatalf("the bounded stream did not end with the idle comment: %q", got)
	}
	completed := strings.Count(got, "event: "+protocol.TypeGenerationCompleted+"\n")
	if completed != 2 {
		t.Fatalf("the bounded stream ended after %d completed generations, want both turns' (2):\n%s", completed, got)
	}
	_, index := f.state("s1")
	if !strings.Contains(got, fmt.Sprintf("id: %d\n", index)) {
		t.Fatalf("the bounded stream ended before the log's last event %d", index)
	}
	// A replay of an idle session's log from an earlier index ends at its
	// last event (it waited for ever for an event after it).
	got = read("?until=idle&after=1")
	if !strings.HasSuffix(got, ": idle\n\n") || !strings.Contains(got, fmt.Sprintf("id: %d\n", index)) || strings.Contains(got, "id: 1\n") {
		t.Fatalf("the replay of an idle session from index 1: %q", got)
	}
}

// The state of a session nobody wrote to has the fields of any other, and
// a written session's status settles at open (the runtime creates it in
// its first write).
func TestEmptyStateHasEveryField(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, gateway.Options{}, nil)
	raw := func(session string) map[string]json.RawMessage {
		status, b := f.do(http.MethodGet, sessionsPath+session+"/state", "", nil)
		if status != http.StatusOK {
			t.Fatalf("state: %d %s", status, b)
		}
		var out struct{ State map[string]json.RawMessage }
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return out.State
	}
	f.push("s1", protocol.Inputs.Text("m1", "hi"))
	st, _ := f.waitState("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	if st.Session.Status != protocol.SessionStatusOpen || st.Session.ID != "s1" {
		t.Fatalf("a written session's session is %+v, want s1 open", st.Session)
	}
	written, empty := raw("s1"), raw("nobody")
	for k := range written {
		if _, ok := empty[k]; !ok {
			t.Errorf("the empty session's state lacks %q", k)
		}
	}
	var session protocol.SessionInfo
	if err := json.Unmarshal(empty["session"], &session); err != nil || session.ID != "nobody" || session.Status != protocol.SessionStatusNew {
		t.Fatalf("the empty session's session is %s (%v), want nobody, new", empty["session"], err)
	}
}

// A push with stream=1 is a turn in one request: it answers with the
// session's stream from the first pushed event, not the history before it,
// until the session is idle again.
func TestAPushThatStreams(t *testing.T) {
	f := newFixture(t, `{"replies":[{"match":"first","text":"one two"},{"match":"second","text":"three four five"}]}`, gateway.Options{}, nil)
	f.push("s1", protocol.Inputs.Text("m1", "first"))
	f.waitState("s1", "the first turn", idle)
	_, before := f.state("s1")
	resp, got := readBounded(t, http.MethodPost, f.URL+sessionsPath+"s1/events?stream=1", pushBody(protocol.Inputs.Text("m2", "second")))
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("a streaming push: %d %s %q", resp.StatusCode, resp.Header.Get("Content-Type"), got)
	}
	if !strings.HasSuffix(got, ": idle\n\n") {
		t.Fatalf("the push's stream did not end with the idle comment: %q", got)
	}
	first := strings.Index(got, "id: ")
	if first < 0 || !strings.HasPrefix(got[first:], fmt.Sprintf("id: %d\n", before+1)) {
		t.Fatalf("the push's stream does not start at the pushed event %d:\n%s", before+1, got)
	}
	if n := strings.Count(got, "event: "+protocol.TypeGenerationCompleted+"\n"); n != 1 {
		t.Fatalf("the push's stream has %d completed generations, want its own turn's (1):\n%s", n, got)
	}
	st, index := f.state("s1")
	if !strings.Contains(got, fmt.Sprintf("id: %d\n", index)) || lastText(st) != "three four five" {
		t.Fatalf("the stream ended before the turn's last event %d (state %q)", index, lastText(st))
	}
}

// olderOwner is a router whose streams cannot end themselves (a cluster
// whose session owner is of an older build): SubscribeUntilIdle answers
// errors.ErrUnsupported, as does PushUntilIdle (having pushed nothing).
type olderOwner struct {
	gateway.Router
	gateway.IdleReader
	asked, pushes atomic.Int32
}

func (o *olderOwner) PushUntilIdle(context.Context, string, string, []protocol.Event, bool) ([]protocol.Event, <-chan protocol.Event, <-chan error, error) {
	o.pushes.Add(1)
	return nil, nil, nil, fmt.Errorf("the owner is of an older build: %w", errors.ErrUnsupported)
}

func (o *olderOwner) SubscribeUntilIdle(context.Context, string, string, uint64) (<-chan protocol.Event, <-chan error, error) {
	o.asked.Add(1)
	return nil, nil, fmt.Errorf("the owner is of an older build: %w", errors.ErrUnsupported)
}

// A router that cannot serve a push with its stream (gateway.PushStreamer)
// nor a stream that ends itself once the session is idle
// (gateway.IdleSubscriber), answering errors.ErrUnsupported, is pushed to
// and subscribed to plainly, and the gateway asks whether the session is idle
// itself: a streaming push still ends at idle, with the turn's last event.
func TestAStreamFallsBackWhereTheRouterCannotEndIt(t *testing.T) {
	var older *olderOwner
	f := newFixture(t, `{"default":{"text":"one two"}}`, gateway.Options{}, func(r gateway.Router) gateway.Router {
		older = &olderOwner{Router: r, IdleReader: r.(gateway.IdleReader)}
		return older
	})
	resp, got := readBounded(t, http.MethodPost, f.URL+sessionsPath+"s1/events?stream=1", pushBody(protocol.Inputs.Text("m1", "hi")))
	if resp.StatusCode != http.StatusOK || !strings.HasSuffix(got, ": idle\n\n") {
		t.Fatalf("a streaming push over a router that cannot end streams: %d %q", resp.StatusCode, got)
	}
	if older.asked.Load() == 0 || older.pushes.Load() == 0 {
		t.Fatalf("the gateway asked the router for a push with a stream %d times and a stream that ends itself %d times, want both", older.pushes.Load(), older.asked.Load())
	}
	_, index := f.state("s1")
	if !strings.Contains(got, fmt.Sprintf("id: %d\n", index)) {
		t.Fatalf("the stream ended before the turn's last event %d:\n%s", index, got)
	}
	_, got = readBounded(t, http.MethodGet, f.URL+sessionsPath+"s1/stream?until=idle&after=1", "")
	if !strings.HasSuffix(got, ": idle\n\n") || !strings.Contains(got, fmt.Sprintf("id: %d\n", index)) {
		t.Fatalf("a bounded stream over a router that cannot end streams: %q", got)
	}
}

// readBounded sends a request whose answer is a stream that ends by itself
// (until=idle, a push with stream=1) and reads it to its end, within 15 s.
func readBounded(t *testing.T, method, url, body string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: the stream did not end by itself: %v", method, url, err)
	}
	return resp, string(b)
}
