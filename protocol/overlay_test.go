// The optimistic overlay's bookkeeping: a receipt retires its command, and
// an input already confirmed shows once.

package protocol

import "testing"

// R-OPT-09: a receipt retires its command from the overlay.
func TestOverlayRetiresOnReceipt(t *testing.T) {
	var o Overlay
	o.Push(withID(Inputs.Pause(PauseNow), "p1"))
	o.Observe(Event{ID: "d1", Type: TypeControlDecided, Payload: mustJSON(Decided{CommandID: "p1", Outcome: OutcomeApplied})})
	if n := len(o.Pending()); n != 0 {
		t.Fatalf("%d commands pending after their receipt (R-OPT-09)", n)
	}
}

// R-OPT-03 R-OPT-04 R-OPT-05: a client that hydrated past a receipt still
// holds the command pending; the confirmed input shows once.
func TestOptimisticSkipsConfirmedInputs(t *testing.T) {
	s := NewAIState()
	var log []Event
	drive(t, s, &log, Inputs.Text("m1", "go"))
	q := Inputs.Text("q1", "queued")
	drive(t, s, &log, q) // q1 is confirmed at inbox[0]
	n := 0
	for _, it := range Optimistic(s, []Event{q}).Inbox.Items {
		if it.ID == "q1" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("a confirmed queued send shown %d times", n)
	}
	// The step streams: a steer waits in the inbox for the step's end,
	// ahead of q1 (mutant optimistic.go:114 showed it again from there).
	work(t, s, &log, TypeGenerationStarted, GenerationStarted{GenerationID: "g1", RequestID: s.ActiveRequestID, Attempt: 1})
	turn := s.Active.TurnID
	st := Inputs.Steer(&turn, UIMessage{ID: "s1", Role: RoleUser, Parts: []Part{{Type: PartText, Text: "steer"}}}, nil)
	drive(t, s, &log, st) // s1 is confirmed at inbox[0], ahead of q1
	if s.inboxIndex("s1") != 0 {
		t.Fatalf("the steer is at inbox index %d, want 0 (waiting for the step's end, ahead of q1)", s.inboxIndex("s1"))
	}
	n = 0
	v := Optimistic(s, []Event{st})
	for _, m := range v.Messages {
		if m.ID == "s1" {
			n++
		}
	}
	for _, it := range v.Inbox.Items { // where a pending steer would be shown again
		if it.ID == "s1" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("a confirmed steer shown %d times (messages and inbox)", n)
	}
}

// Send-now of the inbox's front item (index 0) promotes it like any
// other: it generates and steers after the running step (mutant
// fold.go:248:8, `k <= 0`, made send-now of the front item a no-op; the
// other send-now tests move items at index 1 or more).
func TestSendNowOfTheFrontItem(t *testing.T) {
	s := NewAIState()
	var log []Event
	drive(t, s, &log, Inputs.Text("m1", "go"))
	work(t, s, &log, TypeGenerationStarted, GenerationStarted{GenerationID: "g1", RequestID: s.ActiveRequestID, Attempt: 1})
	passive := false
	drive(t, s, &log, Inputs.Message(UIMessage{ID: "q1", Role: RoleUser, Parts: []Part{{Type: PartText, Text: "later"}}}, MessageOptions{Generate: &passive}))
	if len(s.Inbox.Items) != 1 || s.Inbox.Items[0].ID != "q1" || s.Inbox.Items[0].Generate {
		t.Fatalf("inbox %+v: want the passive q1 alone at its front", s.Inbox.Items)
	}
	turn := s.Active.TurnID
	drive(t, s, &log, withID(Inputs.Queue.SendNow("q1", &turn, nil), "sn1"))
	if len(s.Inbox.Items) != 1 || !s.Inbox.Items[0].Generate || s.Inbox.Items[0].AfterStepOf != turn {
		t.Fatalf("inbox %+v after send-now of its front item: want q1 generating after the step of %s", s.Inbox.Items, turn)
	}
}
