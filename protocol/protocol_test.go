package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// R-LOG-05 R-LOG-06: caller IDs are nonempty and never use the reserved
// prefix; bad IDs name the field.
func TestValidateCallerID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want string
	}{
		{"m1", ""},
		{"", "must not be empty"},
		{"a2.ai:xyz", "reserved prefix"},
		{strings.Repeat("x", MaxIDLength+1), "longer than the limit"},
		{"bad\xffutf8", "not valid UTF-8"},
		{"tab\there", "control characters"},
		{"A2.AI:upper-is-fine", ""},
	} {
		err := ValidateCallerID("id", tc.id)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: unexpected error %v", tc.id, err)
			}
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != "id" || !strings.Contains(ve.Message, tc.want) {
			t.Errorf("%q: got %v, want a ValidationError on id containing %q", tc.id, err, tc.want)
		}
	}
}

// R-LOG-07: A2 IDs are opaque, fixed-length, deterministic and reserved.
// R-LOG-11: IdempotentID converges on the same ID and never uses the prefix.
func TestDerivedIDs(t *testing.T) {
	a := DeriveID("turn", "s1", "m1")
	if a != DeriveID("turn", "s1", "m1") {
		t.Fatal("DeriveID is not deterministic")
	}
	if len(a) != A2IDLength || !IsA2ID(a) {
		t.Fatalf("DeriveID = %q: want %d characters with prefix %q", a, A2IDLength, ReservedPrefix)
	}
	seen := map[string][]string{}
	for _, parts := range [][]string{{"turn", "s1", "m1"}, {"turn", "s1m", "1"}, {"turn", "s", "1m1"}, {"turns1", "m1"}, {"created", "s1", "m1"}} {
		id := DeriveID(parts[0], parts[1:]...)
		if len(id) != A2IDLength {
			t.Fatalf("length %d", len(id))
		}
		if prev, dup := seen[id]; dup {
			t.Fatalf("%v and %v derive the same ID: parts are not length-prefixed", prev, parts)
		}
		seen[id] = parts
	}
	x := IdempotentID("support-desk", "s1", "room-event-7")
	if x != IdempotentID("support-desk", "s1", "room-event-7") || x == IdempotentID("support-desk", "s2", "room-event-7") {
		t.Fatal("IdempotentID must be deterministic and depend on every part")
	}
	if err := ValidateCallerID("id", x); err != nil {
		t.Fatalf("IdempotentID gives an invalid caller ID: %v", err)
	}
}

// R-LOG-02 R-INPUT-25 R-INPUT-19 R-INPUT-20 R-INPUT-22: the ingress table of
// bad commands. Each is answered with a ValidationError naming the field.
func TestValidateCommandTable(t *testing.T) {
	msg := func(id, role string) string {
		return `{"id":"` + id + `","role":"` + role + `","parts":[{"type":"text","text":"x"}]}`
	}
	for _, tc := range []struct {
		name    string
		id      string
		payload string
		trust   Trust
		field   string
	}{
		{"empty id", "", `{"action":"resume"}`, Untrusted, "id"},
		{"reserved prefix", "a2.ai:x", `{"action":"resume"}`, Untrusted, "id"},
		{"not JSON", "c1", `{"action":`, Untrusted, "payload"},
		{"wrong type", "c1", `{"action":5}`, Untrusted, "payload.action"},
		{"unknown field", "c1", `{"action":"resume","bogus":1}`, Untrusted, "payload"},
		{"missing action", "c1", `{}`, Untrusted, "payload.action"},
		{"unknown action", "c1", `{"action":"explode"}`, Untrusted, "payload.action"},
		{"send without message", "m1", `{"action":"send"}`, Untrusted, "payload.message"},
		{"send id differs from message id", "m1", `{"action":"send","message":` + msg("m2", "user") + `}`, Untrusted, "id"},
		{"send message id reserved", "a2.ai:m", `{"action":"send","message":` + msg("a2.ai:m", "user") + `}`, Untrusted, "id"},
		{"send system from browser", "m1", `{"action":"send","message":` + msg("m1", "system") + `}`, Untrusted, "payload.message.role"},
		{"send bad role", "m1", `{"action":"send","message":` + msg("m1", "robot") + `}`, Trusted, "payload.message.role"},
		{"send no parts", "m1", `{"action":"send","message":{"id":"m1","role":"user"}}`, Untrusted, "payload.message.parts"},
		{"send part without type", "m1", `{"action":"send","message":{"id":"m1","role":"user","parts":[{}]}}`, Untrusted, "payload.message.parts[0].type"},
		{"send forged compaction part", "m1", `{"action":"send","message":{"id":"m1","role":"user","parts":[{"type":"data-a2-compaction","data":{}}]}}`, Untrusted, "payload.message.parts[0].type"},
		{"steer non-user even trusted", "s1", `{"action":"steer","message":` + msg("s1", "system") + `}`, Trusted, "payload.message.role"},
		{"steer passive", "s1", `{"action":"steer","generate":false,"message":` + msg("s1", "user") + `}`, Untrusted, "payload.generate"},
		{"edit system from browser", "e1", `{"action":"edit","message":` + msg("m1", "system") + `}`, Untrusted, "payload.message.role"},
		{"move without input", "c1", `{"action":"move"}`, Untrusted, "payload.inputId"},
		{"remove without input", "c1", `{"action":"remove"}`, Untrusted, "payload.inputId"},
		{"send-now without turnId", "c1", `{"action":"send-now","inputId":"q"}`, Untrusted, "payload.turnId"},
		{"stop without turn", "c1", `{"action":"stop"}`, Untrusted, "payload.turnId"},
		{"stop bad lastSeenIndex", "c1", `{"action":"stop","turnId":"t","lastSeenIndex":-5}`, Untrusted, "payload.lastSeenIndex"},
		{"pause bad when", "c1", `{"action":"pause","when":"later"}`, Untrusted, "payload.when"},
		{"approval without approved", "c1", `{"action":"approval","approvalId":"a","requestId":"r","generationId":"g"}`, Untrusted, "payload.approved"},
		{"approval without ids", "c1", `{"action":"approval","approvalId":"a","approved":true}`, Untrusted, "payload.requestId"},
		{"input without generation", "c1", `{"action":"input","inputId":"i","requestId":"r"}`, Untrusted, "payload.generationId"},
		{"request-input from browser", "c1", `{"action":"request-input","inputId":"i","requestId":"r","generationId":"g"}`, Untrusted, "payload.action"},
		{"request-input without generation", "c1", `{"action":"request-input","inputId":"i","requestId":"r"}`, Trusted, "payload.generationId"},
		{"tool-result from browser", "c1", `{"action":"tool-result","toolCallId":"c","generationId":"g","output":1}`, Untrusted, "payload.action"},
		{"tool-result without outcome", "c1", `{"action":"tool-result","toolCallId":"c","generationId":"g"}`, Trusted, "payload.output"},
		{"retry without retryId", "c1", `{"action":"retry","messageId":"m","responseMessageId":"r"}`, Untrusted, "payload.retryId"},
		{"interrupt without owner", "c1", `{"action":"interrupt","messageId":"m"}`, Untrusted, "payload.requestId"},
		{"interrupt with both owners", "c1", `{"action":"interrupt","messageId":"m","requestId":"r","generationId":"g"}`, Untrusted, "payload.requestId"},
		{"interrupt reserved reason", "c1", `{"action":"interrupt","messageId":"m","requestId":"r","reason":"steered after step"}`, Trusted, "payload.reason"},
		{"trailing data", "c1", `{"action":"resume"} {}`, Untrusted, "payload"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ValidateCommand(Event{ID: tc.id, Type: TypeControlRequested, Payload: json.RawMessage(tc.payload)}, tc.trust)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got %v, want a ValidationError", err)
			}
			if ve.Field != tc.field {
				t.Fatalf("field %q (%v), want %q", ve.Field, err, tc.field)
			}
			if ve.Message == "" {
				t.Fatal("empty message")
			}
		})
	}
}

// R-CONTRACT-01 R-CONTRACT-02 R-CONTRACT-03 R-CONTRACT-04 R-CONTRACT-05
// R-CONTRACT-06 R-CONTRACT-07 R-CONTRACT-08 R-CONTRACT-09: contracts,
// reducer names and the application fold.
type desk struct {
	Plan    string   `json:"plan"`
	Flagged []string `json:"flagged"`
	Seen    int      `json:"seen"`
}

func deskContract(t *testing.T) *Contract {
	t.Helper()
	fold := func(s desk, ev Event) desk {
		s.Seen++ // sees every event, built-in ones too (R-CONTRACT-06)
		switch ev.Type {
		case "plan.changed":
			var p struct{ Plan string }
			_ = json.Unmarshal(ev.Payload, &p)
			s.Plan = p.Plan
		case "ticket.flagged":
			var p struct{ TicketID string }
			_ = json.Unmarshal(ev.Payload, &p)
			s.Flagged = append(append([]string(nil), s.Flagged...), p.TicketID)
		}
		return s
	}
	needPlan := SchemaFunc(func(v json.RawMessage) error {
		var p struct{ Plan string }
		if json.Unmarshal(v, &p) != nil || (p.Plan != "free" && p.Plan != "pro") {
			return errors.New("plan must be free or pro")
		}
		return nil
	})
	c, err := AgentContract(ContractOptions{
		Name:    "support-desk",
		Events:  map[string]Schema{"plan.changed": needPlan, "ticket.flagged": nil},
		Reducer: NewReducer("support-desk.v1", desk{Plan: "free", Flagged: []string{}}, fold),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestContract(t *testing.T) {
	c := deskContract(t)
	if got := c.ReducerName(); got != "support-desk.v1+a2.ai.state.v27" {
		t.Fatalf("reducer name %q", got)
	}
	var builtin *Contract
	if builtin.ReducerName() != AIStateReducer || AIStateReducer != "a2.ai.state.v27" {
		t.Fatal("built-in reducer name")
	}
	plain, _ := AgentContract(ContractOptions{Name: "plain"})
	if plain.ReducerName() != AIStateReducer {
		t.Fatal("a contract without a reducer keeps the built-in name")
	}

	st := c.NewState()
	evs := []Event{
		{ID: "e1", Type: "plan.changed", Payload: json.RawMessage(`{"plan":"pro"}`), Index: 1},
		{ID: "m1", Type: TypeControlRequested, Payload: Inputs.Text("m1", "hi").Payload, Index: 2},
		{ID: "e2", Type: "ticket.flagged", Payload: json.RawMessage(`{"ticketId":"T-1"}`), Index: 3},
	}
	for _, ev := range evs {
		if err := c.Fold(st, ev); err != nil {
			t.Fatal(err)
		}
	}
	app := st.App.(desk)
	if app.Plan != "pro" || len(app.Flagged) != 1 || app.Seen != 3 {
		t.Fatalf("app state %+v", app)
	}
	// The AI fold ignores application events (R-CONTRACT-08): only the
	// command changed AIState.
	ai := NewAIState()
	_ = Fold(ai, evs[1])
	a, _ := json.Marshal(ai)
	b, _ := json.Marshal(st.AI)
	if !bytes.Equal(a, b) {
		t.Fatalf("application events changed AIState:\n%s\n%s", a, b)
	}
	// The merged state is AIState & X (R-CONTRACT-02) and round-trips.
	merged, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(merged, &keys)
	for _, k := range []string{"messages", "inbox", "plan", "flagged"} {
		if _, ok := keys[k]; !ok {
			t.Fatalf("merged state lacks %q: %s", k, merged)
		}
	}
	back, err := c.UnmarshalState(merged)
	if err != nil || back.App.(desk).Plan != "pro" {
		t.Fatalf("unmarshal: %v %+v", err, back)
	}

	// Ingress: schemas validate application payloads (R-CONTRACT-05 for
	// messages, below).
	if err := c.ValidateIngress(Event{ID: "x", Type: "plan.changed", Payload: json.RawMessage(`{"plan":"gold"}`)}, Untrusted); err == nil {
		t.Fatal("schema did not reject an invalid payload")
	}
	if err := c.ValidateIngress(Event{ID: "x", Type: "ticket.flagged", Payload: json.RawMessage(`{"ticketId":"T"}`)}, Untrusted); err != nil {
		t.Fatal(err)
	}
}

func TestContractConstructionErrors(t *testing.T) {
	var ce *ConfigError
	// R-CONTRACT-03: an initial state key that AIState also has.
	_, err := AgentContract(ContractOptions{Name: "x", Reducer: NewReducer("x.v1", map[string]int{"messages": 1}, func(s map[string]int, _ Event) map[string]int { return s })})
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "messages") {
		t.Fatalf("clashing key: %v", err)
	}
	_, err = AgentContract(ContractOptions{Name: "x", Reducer: NewReducer("x.v1", 5, func(s int, _ Event) int { return s })})
	if !errors.As(err, &ce) {
		t.Fatalf("non-object state: %v", err)
	}
	// R-CONTRACT-04: events cannot replace built-in names.
	_, err = AgentContract(ContractOptions{Name: "x", Events: map[string]Schema{"ai.message.created": nil}})
	if !errors.As(err, &ce) {
		t.Fatalf("built-in event name: %v", err)
	}
	// R-CONTRACT-12: name or contract, never both; name's events are
	// server-only.
	c := deskContract(t)
	if _, err := ResolveContract("x", c, nil, nil); !errors.As(err, &ce) {
		t.Fatalf("name and contract: %v", err)
	}
	if _, err := ResolveContract("", nil, nil, nil); !errors.As(err, &ce) || !strings.Contains(err.Error(), `Name: "support" names it`) {
		t.Fatalf("neither: %v, want a message that shows the Name option", err)
	}
	named, err := ResolveContract("x", nil, map[string]Schema{"audit.logged": nil}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := Event{ID: "a1", Type: "audit.logged", Payload: json.RawMessage(`{}`)}
	if named.ValidateIngress(ev, Untrusted) == nil || named.ValidateIngress(ev, Trusted) != nil {
		t.Fatal("events given with name must be server-only")
	}
	// R-CONTRACT-13: a contract not built by AgentContract.
	if _, err := ResolveContract("", &Contract{}, nil, nil); !errors.As(err, &ce) {
		t.Fatalf("hand-built contract: %v", err)
	}
	// R-CONTRACT-14: handlers may not name the agent's own events.
	if err := c.ValidateHandlers([]string{"ticket.flagged"}); err != nil {
		t.Fatal(err)
	}
	if err := c.ValidateHandlers([]string{"ai.generation.requested"}); !errors.As(err, &ce) {
		t.Fatalf("built-in handler: %v", err)
	}
	// R-CONTRACT-22: the contract-free client accepts only the built-in
	// reducer name.
	if !AcceptsContractFreeClient(AIStateReducer) || AcceptsContractFreeClient(c.ReducerName()) {
		t.Fatal("contract-free client acceptance")
	}
}

// R-CONTRACT-05: messageSchema validates the messages commands carry.
func TestMessageSchema(t *testing.T) {
	c, err := AgentContract(ContractOptions{Name: "narrow", MessageSchema: SchemaFunc(func(v json.RawMessage) error {
		if !bytes.Contains(v, []byte(`"metadata"`)) {
			return errors.New("metadata is required")
		}
		return nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ValidateIngress(Inputs.Text("m1", "hi"), Untrusted); err == nil {
		t.Fatal("message without metadata accepted")
	}
	m := UIMessage{ID: "m2", Role: RoleUser, Metadata: json.RawMessage(`{"k":1}`), Parts: []Part{{Type: PartText, Text: "hi"}}}
	if err := c.ValidateIngress(Inputs.Message(m, MessageOptions{}), Untrusted); err != nil {
		t.Fatal(err)
	}
}

// R-FETCH-04 (unit part): browsers push commands and the contract's events
// only; lifecycle events are trusted; other ai.* events are refused.
func TestIngressTypes(t *testing.T) {
	c := deskContract(t)
	for _, tc := range []struct {
		ev    Event
		trust Trust
		ok    bool
		// want is in the error's message: what to push instead.
		want string
	}{
		{Event{ID: "x", Type: TypeGenerationRequested, Payload: json.RawMessage(`{}`)}, Trusted, false, `is written by A2 itself and cannot be pushed; the types this agent accepts are "ai.control.requested", "plan.changed", "ticket.flagged", "ai.session.created" and "ai.session.closed"`},
		{Event{ID: "x", Type: TypeSessionClosed, Payload: json.RawMessage(`{}`)}, Untrusted, false, "trusted server append"},
		{Event{ID: "x", Type: TypeSessionClosed, Payload: json.RawMessage(`{}`)}, Trusted, true, ""},
		{Event{ID: "x", Type: "unknown.event", Payload: json.RawMessage(`{}`)}, Trusted, false, `unknown event type "unknown.event"; the types this agent accepts are "ai.control.requested", "plan.changed"`},
		{Event{ID: "x", Type: "ticket.flaged", Payload: json.RawMessage(`{}`)}, Untrusted, false, `unknown event type "ticket.flaged" (did you mean "ticket.flagged"?); the types this agent accepts are "ai.control.requested", "plan.changed" and "ticket.flagged"`},
		{Event{ID: "x", Type: "ai.control.request", Payload: json.RawMessage(`{}`)}, Untrusted, false, `"ai.control.request" is not an event type (the "ai." namespace is A2's) (did you mean "ai.control.requested"?)`},
		{Event{ID: "x", Type: "", Payload: json.RawMessage(`{}`)}, Trusted, false, "is required; the types this agent accepts are"},
		{Event{ID: "x", Type: "ticket.flagged"}, Untrusted, false, "is required"},
		{Event{ID: "x", Type: "ticket.flagged", Payload: json.RawMessage(`{`)}, Untrusted, false, "not valid JSON"},
	} {
		err := c.ValidateIngress(tc.ev, tc.trust)
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s (trust %d): err=%v, want ok=%v naming %q", tc.ev.Type, tc.trust, err, tc.ok, tc.want)
		}
	}
	// An agent built with a name: its events are the server's, and a
	// client is told it pushes commands only.
	named, err := ResolveContract("x", nil, map[string]Schema{"audit.logged": nil}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = named.ValidateIngress(Event{ID: "x", Type: "audit.loged", Payload: json.RawMessage(`{}`)}, Untrusted)
	if err == nil || !strings.Contains(err.Error(), `unknown event type "audit.loged"; a client pushes only "ai.control.requested"`) {
		t.Errorf("a named agent's client: %v", err)
	}
}

// R-INPUT-01..17 R-LOG-02 R-LOG-03 R-APPROVAL-06: builders are pure and give the IDs the
// reference says; every builder's command passes validation.
func TestInputBuilders(t *testing.T) {
	m := UIMessage{ID: "m1", Role: RoleUser, Parts: []Part{{Type: PartText, Text: "hi"}}}
	turn := "t1"
	last := int64(7)
	before := "m0"
	withID := func(ev Event, id string) Event { ev.ID = id; return ev }
	cases := []struct {
		ev     Event
		id     string // expected ID, "" when the pusher assigns it
		action string
		trust  Trust
	}{
		{Inputs.Message(m, MessageOptions{}), "m1", ActionSend, Untrusted},                                                                                         // R-INPUT-02
		{Inputs.Seed(UIMessage{ID: "s1", Role: RoleSystem, Parts: []Part{{Type: PartText, Text: "obey"}}}), "s1", ActionSend, Trusted},                             // R-INPUT-03
		{Inputs.Approval(ApprovalResponse{ApprovalID: "a", Approved: true, RequestID: "r", GenerationID: "g"}), "stable", ActionApproval, Untrusted},               // R-INPUT-04
		{Inputs.Input(InputResponse{InputID: "i", Value: []byte(`1`), RequestID: "r", GenerationID: "g"}), "stable", ActionInput, Untrusted},                       // R-INPUT-05
		{withID(Inputs.RequestInput(InputRequest{InputID: "i", Request: []byte(`{}`), RequestID: "r", GenerationID: "g"}), "c"), "c", ActionRequestInput, Trusted}, // R-INPUT-06
		{Inputs.Retry(RetryOptions{MessageID: "m", ResponseMessageID: "r", RetryID: "x"}), "stable", ActionRetry, Untrusted},                                       // R-INPUT-07
		{withID(Inputs.Stop(turn, &last), "c"), "c", ActionStop, Untrusted},                                                                                        // R-INPUT-08
		{Inputs.Steer(&turn, m, &last), "m1", ActionSteer, Untrusted},                                                                                              // R-INPUT-09
		{withID(Inputs.Queue.Edit(m), "c"), "c", ActionEdit, Untrusted},                                                                                            // R-INPUT-10
		{withID(Inputs.Queue.Move("m1", &before), "c"), "c", ActionMove, Untrusted},                                                                                // R-INPUT-11
		{withID(Inputs.Queue.Remove("m1"), "c"), "c", ActionRemove, Untrusted},                                                                                     // R-INPUT-12
		{withID(Inputs.Queue.SendNow("m1", nil, nil), "c"), "c", ActionSendNow, Untrusted},                                                                         // R-INPUT-13
		{withID(Inputs.Pause(PauseNow), "c"), "c", ActionPause, Untrusted},                                                                                         // R-INPUT-14
		{withID(Inputs.Resume(), "c"), "c", ActionResume, Untrusted},                                                                                               // R-INPUT-15
		{withID(Inputs.ToolResult(ToolResult{ToolCallID: "c", GenerationID: "g", Output: []byte(`1`)}), "c"), "c", ActionToolResult, Trusted},                      // R-INPUT-16
		{withID(Inputs.Interrupt(InterruptOptions{MessageID: "m", GenerationID: "g"}), "c"), "c", ActionInterrupt, Untrusted},                                      // R-INPUT-17
	}
	for i, tc := range cases {
		c, err := ValidateCommand(tc.ev, tc.trust)
		if err != nil {
			t.Fatalf("case %d (%s): %v", i, tc.action, err)
		}
		if c.Action != tc.action {
			t.Fatalf("case %d: action %q", i, c.Action)
		}
		if tc.id == "stable" {
			if !bytes.Equal(mustJSON(tc.ev), mustJSON(cases[i].ev)) || tc.ev.ID == "" {
				t.Fatalf("case %d: no stable ID", i)
			}
		} else if tc.ev.ID != tc.id {
			t.Fatalf("case %d: id %q, want %q", i, tc.ev.ID, tc.id)
		}
	}
	// Stable interaction IDs (R-LOG-03): the same answer twice is the same
	// event; another retry action is another event.
	a1 := Inputs.Approval(ApprovalResponse{ApprovalID: "a", Approved: true, RequestID: "r", GenerationID: "g"})
	a2 := Inputs.Approval(ApprovalResponse{ApprovalID: "a", Approved: true, RequestID: "r", GenerationID: "g"})
	if a1.ID != a2.ID || !SameContent(a1, a2) {
		t.Fatal("the same approval answer must be an identical event")
	}
	r1 := Inputs.Retry(RetryOptions{MessageID: "m", ResponseMessageID: "r", RetryID: "x"})
	r2 := Inputs.Retry(RetryOptions{MessageID: "m", ResponseMessageID: "r", RetryID: "y"})
	if r1.ID == r2.ID {
		t.Fatal("two retry actions must have two IDs")
	}
	// Builders are pure: the message given is not aliased into the payload.
	m.Parts[0].Text = "changed"
	if bytes.Contains(cases[0].ev.Payload, []byte("changed")) {
		t.Fatal("builder kept a reference to its argument")
	}
}

// R-LOG-13: an ai.message.created whose command was not folded before is an
// error, in DeriveUIMessages and in Fold alike (R-CONTRACT-18).
func TestMessageCreatedNeedsCommand(t *testing.T) {
	ev := Event{ID: "x", Type: TypeMessageCreated, Payload: mustJSON(MessageCreated{MessageID: "m1", CommandID: "m1", Generate: true})}
	if _, err := DeriveUIMessages([]Event{ev}); err == nil || !strings.Contains(err.Error(), "R-LOG-13") {
		t.Fatalf("DeriveUIMessages: %v", err)
	}
	if err := Fold(NewAIState(), ev); err == nil {
		t.Fatal("Fold accepted ai.message.created without its command")
	}
	cmd := Inputs.Text("m1", "hi")
	dec := Event{ID: "d", Type: TypeControlDecided, Payload: mustJSON(Decided{CommandID: "m1", Outcome: OutcomeApplied})}
	msgs, err := DeriveUIMessages([]Event{cmd, dec, ev})
	if err != nil || len(msgs) != 1 || msgs[0].Parts[0].Text != "hi" {
		t.Fatalf("DeriveUIMessages: %v %+v", err, msgs)
	}
	// Both forms agree.
	s := NewAIState()
	for _, e := range []Event{cmd, dec, ev} {
		if err := Fold(s, e); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(mustJSON(s.Messages), mustJSON(msgs)) {
		t.Fatal("Fold and DeriveUIMessages disagree")
	}
}

// R-CONTRACT-17: hydration skips events at or before the snapshot's index.
func TestHydrateSkipsSeenEvents(t *testing.T) {
	c := deskContract(t)
	log := []Event{
		{ID: "e1", Type: "ticket.flagged", Payload: json.RawMessage(`{"ticketId":"A"}`), Index: 1},
		{ID: "e2", Type: "ticket.flagged", Payload: json.RawMessage(`{"ticketId":"B"}`), Index: 2},
	}
	st := c.NewState()
	at, err := c.Hydrate(st, 0, log[:1])
	if err != nil || at != 1 {
		t.Fatal(at, err)
	}
	at, err = c.Hydrate(st, at, log) // the whole log again
	if err != nil || at != 2 {
		t.Fatal(at, err)
	}
	if got := st.App.(desk).Flagged; len(got) != 2 {
		t.Fatalf("seen history folded twice: %v", got)
	}
}

// R-STATE-01 R-STATE-09: the initial AIState encodes every documented field
// with empty collections, and server folds never set starting.
func TestInitialState(t *testing.T) {
	b, err := MarshalState(NewAIState())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	for _, k := range []string{"messages", "inbox", "active", "status", "starting", "receipt", "pendingQueueCommands",
		"session", "pendingApprovals", "pendingInputs", "tools", "compaction", "modelMetadata", "usage", "error",
		"activeGeneration", "responseOwners"} {
		if _, ok := m[k]; !ok {
			t.Errorf("initial state lacks %q", k)
		}
	}
	if string(m["starting"]) != "false" || string(m["status"]) != `"idle"` {
		t.Fatalf("starting %s status %s", m["starting"], m["status"])
	}
}

// A message A2 serializes keeps the AI SDK part shapes: text parts always
// carry text, tool parts their state, data parts their data.
func TestPartJSONShapes(t *testing.T) {
	yes := true
	for _, tc := range []struct {
		part Part
		want string
	}{
		{Part{Type: PartText, Text: "", State: "streaming"}, `{"type":"text","state":"streaming","text":""}`},
		{Part{Type: PartReasoning, Text: "r"}, `{"type":"reasoning","text":"r"}`},
		{Part{Type: PartStepStart}, `{"type":"step-start"}`},
		{Part{Type: "tool-search", ToolCallID: "c1", State: ToolInputAvailable, Input: json.RawMessage(`{"q":1}`)}, `{"type":"tool-search","state":"input-available","toolCallId":"c1","input":{"q":1}}`},
		{Part{Type: PartDynamicTool, ToolName: "x", ToolCallID: "c1", State: ToolOutputAvailable, Input: json.RawMessage(`{}`), Output: json.RawMessage(`null`), Preliminary: &yes}, `{"type":"dynamic-tool","state":"output-available","toolName":"x","toolCallId":"c1","input":{},"output":null,"preliminary":true}`},
		{Part{Type: "data-weather", ID: "w", Data: json.RawMessage(`{"t":1}`)}, `{"type":"data-weather","id":"w","data":{"t":1}}`},
		{Part{Type: PartSourceURL, SourceID: "s", URL: "https://x"}, `{"type":"source-url","sourceId":"s","url":"https://x"}`},
		{Part{Type: PartFile, MediaType: "image/png", URL: "data:,"}, `{"type":"file","url":"data:,","mediaType":"image/png"}`},
	} {
		b, err := json.Marshal(tc.part)
		if err != nil || string(b) != tc.want {
			t.Errorf("%s: %s (%v), want %s", tc.part.Type, b, err, tc.want)
		}
	}
	if !IsCompactionPart(Part{Type: "data-a2-compaction"}) || IsCompactionPart(Part{Type: "data-other"}) {
		t.Fatal("IsCompactionPart")
	}
}

// R-STATE-26: partial JSON drafts close open strings, arrays and objects.
func TestParsePartialJSON(t *testing.T) {
	for in, want := range map[string]string{
		`{"path":"/tm`:          `{"path":"/tm"}`,
		`{"a":[1,2`:             `{"a":[1,2]}`,
		`{"a":1,`:               `{"a":1}`,
		`{"a":1,"b`:             `{"a":1}`,
		`{"a":`:                 `{}`,
		`{"cmd":"echo \"hi`:     `{"cmd":"echo \"hi"}`,
		`{"x":{"y":"z"},"w":tr`: `{"x":{"y":"z"}}`,
		`[`:                     `[]`,
		`{"done":true}`:         `{"done":true}`,
	} {
		got, ok := ParsePartialJSON(in)
		if !ok || string(got) != want {
			t.Errorf("%q: %s %v, want %s", in, got, ok, want)
		}
	}
	if _, ok := ParsePartialJSON(`}`); ok {
		t.Error("a lone closer is not a prefix")
	}
}

// OQ-36 R-LOG-09 R-LOG-10: a resubmission is the same content whatever its
// key order and whitespace; another payload under the same ID is not.
func TestSameContentCanonical(t *testing.T) {
	a := Event{ID: "p1", Type: TypeControlRequested, Session: "s1", Payload: json.RawMessage(`{"action":"pause","when":"now"}`)}
	b := a
	b.Payload = json.RawMessage(`{ "when": "now", "action": "pause" }`)
	if !SameContent(a, b) || !SameContent(b, a) {
		t.Fatal("key order and whitespace must not matter (OQ-36)")
	}
	c := a
	c.Payload = json.RawMessage(`{"action":"pause","when":"after-turn"}`)
	if SameContent(a, c) {
		t.Fatal("another payload under the same ID is a conflicting reuse (R-LOG-10)")
	}
}
