package protocol

import (
	"strconv"
	"testing"
)

func newIDs() func() string {
	n := 0
	return func() string { n++; return "id" + strconv.Itoa(n) }
}

// drive appends a command with its decision and effects, then returns the
// state, as a server would.
func drive(t *testing.T, s *AIState, log *[]Event, evs ...Event) {
	t.Helper()
	for _, ev := range evs {
		ev.Session = "s1"
		out, err := Decide(Policy{}, s, ev)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range append([]Event{ev}, out...) {
			e.Index = uint64(len(*log) + 1)
			if err := Fold(s, e); err != nil {
				t.Fatal(err)
			}
			*log = append(*log, e)
		}
	}
}

func work(t *testing.T, s *AIState, log *[]Event, typ string, payload any) {
	t.Helper()
	ev := Event{ID: "w" + strconv.Itoa(len(*log)), Type: typ, Payload: mustJSON(payload), Session: "s1", Index: uint64(len(*log) + 1)}
	if err := Fold(s, ev); err != nil {
		t.Fatal(err)
	}
	*log = append(*log, ev)
	more, err := Step(Policy{}, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range more {
		e.Index = uint64(len(*log) + 1)
		if err := Fold(s, e); err != nil {
			t.Fatal(err)
		}
		*log = append(*log, e)
	}
}

// R-CLIENT-11 R-CLIENT-12 R-CLIENT-13 R-CLIENT-14 R-CLIENT-15 R-CLIENT-16
// R-CLIENT-18 R-CLIENT-19 R-STOP-03 R-RETRY-05: actions read identities
// from the render and address nothing when there is nothing to address.
func TestActions(t *testing.T) {
	s := NewAIState()
	var log []Event
	ids := newIDs()
	act := func() Actions { return Actions{View: s, NewID: ids} }

	// Nothing to address while idle (R-CLIENT-19).
	if got := act().Stop(); len(got) != 0 {
		t.Fatalf("stop while idle: %v", got)
	}
	if got := act().Retry(); len(got) != 0 {
		t.Fatalf("retry with nothing failed: %v", got)
	}
	if got := act().Approve("nope"); len(got) != 0 {
		t.Fatal("approve of nothing pending")
	}
	// sendMessage: one text part, event ID = message ID (R-CLIENT-11).
	send := act().SendMessage("Hi", nil)
	c, err := ValidateCommand(send[0], Untrusted)
	if err != nil || c.Message.ID != send[0].ID || len(c.Message.Parts) != 1 || c.Message.Parts[0].Text != "Hi" {
		t.Fatalf("sendMessage: %v %+v", err, c)
	}
	// Idle steer sends (R-CLIENT-12).
	st := act().Steer("x")
	if c, _ := ValidateCommand(st[0], Untrusted); c.TurnID != nil {
		t.Fatal("an idle steer observed a turn")
	}
	drive(t, s, &log, send...)
	work(t, s, &log, TypeGenerationStarted, GenerationStarted{GenerationID: "g1", RequestID: s.ActiveRequestID, Attempt: 1})
	work(t, s, &log, TypeGenerationProgress, GenerationProgress{GenerationID: "g1", Chunks: []UIMessageChunk{
		{Type: ChunkTextStart, ID: "t"}, {Type: ChunkTextDelta, ID: "t", Delta: "a"},
		{Type: ChunkToolInputAvailable, ToolCallID: "c1", ToolName: "deploy", Input: []byte(`{}`)},
		{Type: ChunkToolApproval, ToolCallID: "c1", ApprovalID: "ap1"}}})

	render := act() // the render the user acts on
	turn := s.Active.TurnID
	// Stop carries the render's turn and frontier (R-CLIENT-13, R-CLIENT-18).
	stop := render.Stop()
	c, err = ValidateCommand(stop[0], Untrusted)
	if err != nil || *c.TurnID != turn || c.LastSeenIndex == nil || *c.LastSeenIndex != 3 || stop[0].ID == "" {
		t.Fatalf("stop: %v %+v", err, c)
	}
	// Steer observes the active turn (R-CLIENT-12).
	c, _ = ValidateCommand(render.Steer("later")[0], Untrusted)
	if c.TurnID == nil || *c.TurnID != turn {
		t.Fatal("steer did not observe the active turn")
	}
	// Approve copies the pending request's IDs (R-CLIENT-14).
	ap := render.Approve("ap1")
	c, err = ValidateCommand(ap[0], Untrusted)
	if err != nil || c.RequestID != s.PendingApprovals["ap1"].RequestID || c.GenerationID != "g1" || !*c.Approved {
		t.Fatalf("approve: %v %+v", err, c)
	}
	if c, _ := ValidateCommand(render.Deny("ap1", "no")[0], Untrusted); *c.Approved || c.Reason != "no" {
		t.Fatal("deny")
	}
	// Queue actions and pause/resume (R-CLIENT-16).
	drive(t, s, &log, act().SendMessage("queued", nil)...)
	q := s.Inbox.Items[0].ID
	sn := act().QueueSendNow(q)
	if c, err := ValidateCommand(sn[0], Untrusted); err != nil || *c.TurnID != turn {
		t.Fatalf("sendNow: %v", err)
	}
	for _, evs := range [][]Event{act().Pause(PauseAfterTurn), act().Resume(), act().QueueMove(q, nil), act().QueueRemove(q),
		act().QueueEdit(UIMessage{ID: q, Role: RoleUser, Parts: []Part{{Type: PartText, Text: "e"}}})} {
		if len(evs) != 1 || evs[0].ID == "" {
			t.Fatalf("queue action: %v", evs)
		}
		if _, err := ValidateCommand(evs[0], Untrusted); err != nil {
			t.Fatal(err)
		}
	}
	// Retry: a fresh retryId per call (R-CLIENT-15, R-RETRY-05).
	work(t, s, &log, TypeGenerationFailed, GenerationFailed{GenerationID: "g1", Message: "boom"})
	r1, r2 := act().Retry(), act().Retry()
	if len(r1) != 1 || r1[0].ID == r2[0].ID {
		t.Fatal("retry must use a fresh retryId each call")
	}
	// Respond copies the pending input's IDs.
	if len(act().Respond("nope", []byte(`1`))) != 0 {
		t.Fatal("respond to nothing")
	}
}

// R-CLIENT-02 R-CLIENT-06 R-CLIENT-22: a contract-free client follows only
// the built-in reducer; a contract client folds the application state too;
// hydration takes state and index together.
func TestClientContracts(t *testing.T) {
	c := deskContract(t)
	if AcceptsContractFreeClient(c.ReducerName()) {
		t.Fatal("a contract-free client must refuse an extended reducer")
	}
	st := c.NewState()
	log := []Event{
		{ID: "e1", Type: "plan.changed", Payload: []byte(`{"plan":"pro"}`), Index: 1},
		{ID: "e2", Type: "ticket.flagged", Payload: []byte(`{"ticketId":"T"}`), Index: 2},
	}
	at, err := c.Hydrate(st, 0, log[:1])
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := st.MarshalJSON()
	restored, err := c.UnmarshalState(snap)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Hydrate(restored, at, log); err != nil {
		t.Fatal(err)
	}
	if d := restored.App.(desk); d.Plan != "pro" || len(d.Flagged) != 1 {
		t.Fatalf("hydrated state %+v", d)
	}
}

// R-CLIENT-19 OQ-18: a turn that maxSteps failed has nothing to retry.
func TestRetryActionAfterStepLimit(t *testing.T) {
	v := NewAIState()
	v.Active = &Turn{TurnID: "T1", Input: TurnInput{ID: "m1", Role: RoleUser, Generate: true}, Phase: PhaseRunning,
		ResponseMessageID: "R1", Steps: 1, LastStep: "G1", Failed: true}
	v.Error = &ErrorInfo{Message: stepLimitMessage, StepLimit: true}
	if got := (Actions{View: v, NewID: newIDs()}).Retry(); len(got) != 0 {
		t.Fatalf("retry after a stepLimit failure: %v", got)
	}
}
