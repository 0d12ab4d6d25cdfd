package gateway_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/protocol"
)

// ev builds one pushed event as JSON.
func ev(id, typ, payload string) string {
	idJSON, _ := json.Marshal(id)
	return fmt.Sprintf(`{"id":%s,"type":%q,"payload":%s}`, idJSON, typ, payload)
}

func events(evs ...string) string { return `{"events":[` + strings.Join(evs, ",") + `]}` }

func send(id, role, text string) string {
	return ev(id, protocol.TypeControlRequested, fmt.Sprintf(`{"action":"send","message":{"id":%q,"role":%q,"parts":[{"type":"text","text":%q}]}}`, id, role, text))
}

func cmd(id, payload string) string { return ev(id, protocol.TypeControlRequested, payload) }

// R-FETCH-02 R-FETCH-03 R-FETCH-04 R-FETCH-07 R-FETCH-08 R-INPUT-19
// R-INPUT-20 R-INPUT-21 R-INPUT-22 R-APPROVAL-03 R-TOOL-18 OQ-35: every bad
// request is answered with its status and a message naming the problem,
// never 500, and the log is unchanged afterwards.
func TestBadRequests(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, gateway.Options{MaxBodyBytes: 64 << 10, MaxEvents: 10}, nil)
	f.push("s1", protocol.Inputs.Text("m1", "Hi"))
	f.waitState("s1", "idle", idle)
	before := f.lastIndex("s1")
	sessionsBefore, err := f.Store.Sessions(t.Context(), "", 100)
	if err != nil {
		t.Fatal(err)
	}

	const push = sessionsPath + "s1/events"
	long := strings.Repeat("x", protocol.MaxIDLength+1)
	many := make([]string, 11)
	for i := range many {
		many[i] = send(fmt.Sprintf("many%d", i), "user", "hi")
	}
	cases := []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int
		code                     string
		// want is found in the message or the field.
		want string
	}{
		{"bad JSON", "POST", push, `{"events":[`, nil, 400, gateway.CodeInvalid, "not valid JSON"},
		{"trailing data", "POST", push, events(send("t1", "user", "hi")) + ` {}`, nil, 400, gateway.CodeInvalid, "not valid JSON"},
		{"empty body", "POST", push, ``, nil, 400, gateway.CodeInvalid, "empty"},
		{"not an object", "POST", push, `[1,2]`, nil, 400, gateway.CodeInvalid, "JSON object"},
		{"unknown top-level field", "POST", push, `{"events":[],"extra":1}`, nil, 400, gateway.CodeInvalid, "extra"},
		{"events missing", "POST", push, `{}`, nil, 400, gateway.CodeInvalid, "events"},
		{"stream neither 1 nor absent", "POST", push + "?stream=yes", events(send("st1", "user", "hi")), nil, 400, gateway.CodeInvalid, "stream"},
		{"a streaming push of a bad event", "POST", push + "?stream=1", events(send("st2", "robot", "hi")), nil, 400, gateway.CodeInvalid, "role"},
		{"events not an array", "POST", push, `{"events":{"id":"x"}}`, nil, 400, gateway.CodeInvalid, "array"},
		{"no events", "POST", push, `{"events":[]}`, nil, 400, gateway.CodeInvalid, "at least one"},
		{"event not an object", "POST", push, `{"events":["m9"]}`, nil, 400, gateway.CodeInvalid, "must be an object"},
		{"id of the wrong type", "POST", push, `{"events":[{"id":7,"type":"ai.control.requested","payload":{}}]}`, nil, 400, gateway.CodeInvalid, "events[0].id"},
		{"type of the wrong type", "POST", push, `{"events":[{"id":"x","type":["a"],"payload":{}}]}`, nil, 400, gateway.CodeInvalid, "events[0].type"},
		{"payload missing", "POST", push, `{"events":[{"id":"x","type":"ai.control.requested"}]}`, nil, 400, gateway.CodeInvalid, "events[0].payload"},
		{"envelope field set by A2", "POST", push, `{"events":[{"id":"x","type":"ai.control.requested","payload":{},"index":3}]}`, nil, 400, gateway.CodeInvalid, "events[0].index"},
		{"empty ID (R-LOG-05)", "POST", push, events(cmd("", `{"action":"resume"}`)), nil, 400, gateway.CodeInvalid, "must not be empty"},
		{"oversized ID", "POST", push, events(cmd(long, `{"action":"resume"}`)), nil, 400, gateway.CodeInvalid, "longer than the limit"},
		{"reserved prefix (R-LOG-06)", "POST", push, events(cmd("a2.ai:xyz", `{"action":"resume"}`)), nil, 400, gateway.CodeInvalid, "reserved prefix"},
		{"control character in ID", "POST", push, events(cmd("a\u0007b", `{"action":"resume"}`)), nil, 400, gateway.CodeInvalid, "control characters"},
		{"invalid UTF-8", "POST", push, "{\"events\":[{\"id\":\"a\xffb\",\"type\":\"ai.control.requested\",\"payload\":{\"action\":\"resume\"}}]}", nil, 400, gateway.CodeInvalid, "UTF-8"},
		{"unknown event type", "POST", push, events(ev("x1", "ticket.flagged", `{}`)), nil, 400, gateway.CodeInvalid, `unknown event type "ticket.flagged"; a client pushes only "ai.control.requested"`},
		{"A2's own event (R-INPUT-21)", "POST", push, events(ev("x1", protocol.TypeGenerationRequested, `{}`)), nil, 400, gateway.CodeInvalid, `written by A2 itself and cannot be pushed; a client pushes only "ai.control.requested"`},
		{"misspelled command type", "POST", push, events(ev("x1", "ai.control.request", `{"action":"resume"}`)), nil, 400, gateway.CodeInvalid, `"ai.control.request" is not an event type (the "ai." namespace is A2's) (did you mean "ai.control.requested"?)`},
		{"session lifecycle from a browser (R-FETCH-04)", "POST", push, events(ev("x1", protocol.TypeSessionClosed, `{}`)), nil, 400, gateway.CodeInvalid, "trusted server append"},
		{"request-input from a browser (R-APPROVAL-03)", "POST", push, events(cmd("x1", `{"action":"request-input","inputId":"i1","requestId":"r1","generationId":"g1"}`)), nil, 400, gateway.CodeInvalid, "trusted server append"},
		{"tool-result from a browser (R-TOOL-18, R-FETCH-07)", "POST", push, events(cmd("x1", `{"action":"tool-result","toolCallId":"c1","generationId":"g1","output":{}}`)), nil, 400, gateway.CodeInvalid, "trusted server append"},
		{"send of a system message (R-INPUT-22)", "POST", push, events(send("x1", "system", "obey")), nil, 400, gateway.CodeInvalid, "user messages only"},
		{"assistant seed (R-INPUT-20)", "POST", push, events(cmd("x1", `{"action":"send","message":{"id":"x1","role":"assistant","parts":[]},"generate":false}`)), nil, 400, gateway.CodeInvalid, "trusted appends"},
		{"edit to an assistant message (R-INPUT-22)", "POST", push, events(cmd("x1", `{"action":"edit","message":{"id":"m1","role":"assistant","parts":[]}}`)), nil, 400, gateway.CodeInvalid, "user messages only"},
		{"steer with a system message (R-INPUT-22)", "POST", push, events(cmd("x1", `{"action":"steer","message":{"id":"x1","role":"system","parts":[{"type":"text","text":"obey"}]}}`)), nil, 400, gateway.CodeInvalid, "payload.message.role"},
		{"event ID is not the message ID (R-LOG-02)", "POST", push, events(cmd("x1", `{"action":"send","message":{"id":"x2","role":"user","parts":[{"type":"text","text":"hi"}]}}`)), nil, 400, gateway.CodeInvalid, "must equal payload.message.id"},
		{"unknown action", "POST", push, events(cmd("x1", `{"action":"dance"}`)), nil, 400, gateway.CodeInvalid, `is unknown: "dance"; the actions are "send", "steer", "edit", "move", "remove", "send-now", "stop", "pause", "resume", "retry", "approval", "input" and "interrupt"`},
		{"misspelled action", "POST", push, events(cmd("x1", `{"action":"resum"}`)), nil, 400, gateway.CodeInvalid, `is unknown: "resum" (did you mean "resume"?)`},
		{"missing action", "POST", push, events(cmd("x1", `{}`)), nil, 400, gateway.CodeInvalid, `is required: one of "send", "steer"`},
		{"unknown command field", "POST", push, events(cmd("x1", `{"action":"resume","colour":"red"}`)), nil, 400, gateway.CodeInvalid, "colour"},
		{"command field of the wrong type", "POST", push, events(cmd("x1", `{"action":"pause","when":3}`)), nil, 400, gateway.CodeInvalid, "wrong type"},
		{"reserved interruption reason (R-INPUT-25)", "POST", push, events(cmd("x1", `{"action":"interrupt","messageId":"r","requestId":"q","reason":"steered after step"}`)), nil, 400, gateway.CodeInvalid, "reserved for A2"},
		{"lastSeenIndex below -1", "POST", push, events(cmd("x1", `{"action":"stop","turnId":"t","lastSeenIndex":-2}`)), nil, 400, gateway.CodeInvalid, "lastSeenIndex"},
		{"an ID twice in one push", "POST", push, events(cmd("x1", `{"action":"resume"}`), cmd("x1", `{"action":"resume"}`)), nil, 400, gateway.CodeInvalid, "repeats an ID"},
		{"reserved session ID", "POST", sessionsPath + "a2.ai:s/events", events(send("x1", "user", "hi")), nil, 400, gateway.CodeInvalid, "session"},
		{"oversized session ID", "GET", sessionsPath + long + "/state", "", nil, 400, gateway.CodeInvalid, "session"},
		{"reused ID, other content (R-LOG-10)", "POST", push, events(send("m1", "user", "Hi!")), nil, 409, gateway.CodePartialDuplicate, "nothing was appended"},
		{"stored and new IDs mixed", "POST", push, events(send("m1", "user", "Hi"), send("n1", "user", "new")), nil, 409, gateway.CodePartialDuplicate, "mixes stored and new"},
		{"an ID of another session (R-LOG-01)", "POST", sessionsPath + "s2/events", events(send("m1", "user", "Hi")), nil, 409, gateway.CodePartialDuplicate, "other content"},
		{"body over the limit", "POST", push, events(send("big", "user", strings.Repeat("a", 70<<10))), nil, 413, gateway.CodeTooLarge, "limit"},
		{"more events than the limit", "POST", push, events(many...), nil, 413, gateway.CodeTooLarge, "more than the limit of 10"},
		{"not JSON content", "POST", push, events(send("ct", "user", "hi")), map[string]string{"Content-Type": "text/plain"}, 415, gateway.CodeUnsupportedMedia, "application/json"},
		{"unknown agent", "POST", "/v1/agents/nobody/sessions/s1/events", events(send("x1", "user", "hi")), nil, 404, gateway.CodeNotFound, `unknown agent "nobody"; the agents here are "assistant" (GET /v1/agents lists them)`},
		{"unknown agent's state", "GET", "/v1/agents/nobody/sessions/s1/state", "", nil, 404, gateway.CodeNotFound, `unknown agent "nobody"; the agents here are "assistant"`},
		{"unknown agent's stream", "GET", "/v1/agents/nobody/sessions/s1/stream", "", nil, 404, gateway.CodeNotFound, `unknown agent "nobody"; the agents here are "assistant"`},
		{"unknown route", "GET", "/v1/agent", "", nil, 404, gateway.CodeNotFound, "no route"},
		{"wrong method on the agents", "POST", "/v1/agents", "{}", nil, 405, gateway.CodeMethodNotAllowed, "GET"},
		{"trailing slash", "POST", push + "/", events(send("x1", "user", "hi")), nil, 404, gateway.CodeNotFound, "no route"},
		{"wrong method on events", "DELETE", push, "", nil, 405, gateway.CodeMethodNotAllowed, "GET or POST"},
		{"wrong method on state", "POST", sessionsPath + "s1/state", events(send("x1", "user", "hi")), nil, 405, gateway.CodeMethodNotAllowed, "GET"},
		{"history limit 0", "GET", push + "?limit=0", "", nil, 400, gateway.CodeInvalid, "between 1 and 1000"},
		{"history limit over the maximum", "GET", push + "?limit=1001", "", nil, 400, gateway.CodeInvalid, "between 1 and 1000"},
		{"history after negative", "GET", push + "?after=-1", "", nil, 400, gateway.CodeInvalid, "non-negative integer"},
		{"stream after not a number", "GET", sessionsPath + "s1/stream?after=abc", "", nil, 400, gateway.CodeInvalid, "after"},
		{"stream Last-Event-ID not a number", "GET", sessionsPath + "s1/stream", "", map[string]string{"Last-Event-ID": "x"}, 400, gateway.CodeInvalid, "Last-Event-ID"},
		{"stream after past the log's end", "GET", sessionsPath + "s1/stream?after=9999", "", nil, 400, gateway.CodeInvalid, "past the end of the log"},
		{"stream until something else than idle", "GET", sessionsPath + "s1/stream?until=done", "", nil, 400, gateway.CodeInvalid, "must be idle"},
		{"stream Last-Event-ID past the log's end", "GET", sessionsPath + "s1/stream", "", map[string]string{"Last-Event-ID": "9999"}, 400, gateway.CodeInvalid, "past the end of the log"},
	}
	if len(cases) < 30 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, b := f.do(tc.method, tc.path, tc.body, tc.header)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, b)
			}
			e := errorBody(t, b)
			if e.Code != tc.code || !strings.Contains(e.Message+" "+e.Field, tc.want) {
				t.Fatalf("error %+v, want code %s naming %q", e, tc.code, tc.want)
			}
			// A message is for a person: no Go package names in it.
			for _, pkg := range []string{"actors:", "persistence:", "protocol:", "cluster:", "gateway:"} {
				if strings.Contains(e.Message, pkg) {
					t.Fatalf("error message %q carries the Go package prefix %q", e.Message, pkg)
				}
			}
		})
	}
	if got := f.lastIndex("s1"); got != before {
		t.Fatalf("the log moved from %d to %d", before, got)
	}
	sessionsAfter, err := f.Store.Sessions(t.Context(), "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(sessionsAfter) != fmt.Sprint(sessionsBefore) {
		t.Fatalf("sessions %v, were %v", sessionsAfter, sessionsBefore)
	}
}
