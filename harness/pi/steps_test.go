package pi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/external/externaltest"
	"github.com/a2-runtime/a2/protocol"
)

// R-HARNESS-02: each model call Pi makes is a step like any other: a turn
// steered while Pi's step streams is answered by a new step whose Pi
// prompt ends with the steering message, after what the step said; a stop
// while Pi's step streams ends the response there (the sidecar's run is
// ended), and the next turn's Pi prompt holds what was kept; maxSteps
// ends a response of Pi's that would go on.
func TestPisStepsSteerStopAndEndAsAnyStep(t *testing.T) {
	h := startPi(t, dirPool(t))
	f := newFixture(t, h, `{"replies":[
		{"match":"plan","text":"planning the trip","gate":"g1"},
		{"match":"trains","text":"steered answer"},
		{"match":"story","text":"once upon a time there was","gate":"g2"},
		{"match":"continue","text":"the end"}]}`)
	if _, err := f.RT.Push(t.Context(), "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m1", "plan a trip")}, false); err != nil {
		t.Fatal(err)
	}
	st := f.Wait("s1", 30*time.Second, "streaming", func(s *protocol.AIState) bool { return s.Status == protocol.StatusStreaming })
	turn := st.Active.TurnID
	steer := protocol.UIMessage{ID: "st1", Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: "prefer trains"}}}
	if _, err := f.RT.Push(t.Context(), "assistant", "s1", []protocol.Event{protocol.Inputs.Steer(&turn, steer, nil)}, false); err != nil {
		t.Fatal(err)
	}
	f.models.Release("g1")
	f.Wait("s1", 30*time.Second, "the steered turn", func(s *protocol.AIState) bool { return externaltest.Settled(s) && len(s.Messages) == 4 })
	reqs := f.models.Requests()
	if len(reqs) != 2 || !strings.HasSuffix(conversation(reqs[1].Messages), "assistant: planning the trip\nuser: prefer trains\n") || !strings.Contains(reqs[1].System, "running inside pi") {
		t.Fatalf("%d calls; the steered step's Pi prompt:\n%s", len(reqs), conversation(reqs[len(reqs)-1].Messages))
	}

	if _, err := f.RT.Push(t.Context(), "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m2", "tell a story")}, false); err != nil {
		t.Fatal(err)
	}
	st = f.Wait("s1", 30*time.Second, "the story streaming", func(s *protocol.AIState) bool {
		return s.Status == protocol.StatusStreaming && len(s.Messages) == 6 && strings.Contains(conversationText(s), "once")
	})
	stop := protocol.Inputs.Stop(st.Active.TurnID, nil)
	stop.ID = "stop1"
	if _, err := f.RT.Push(t.Context(), "assistant", "s1", []protocol.Event{stop}, false); err != nil {
		t.Fatal(err)
	}
	st = f.Wait("s1", 30*time.Second, "the stop", func(s *protocol.AIState) bool { return s.Idle() && len(s.Messages) == 6 })
	kept := textOf(st.Messages[5])
	if kept == "" || strings.Contains(kept, "there was") {
		t.Fatalf("the stopped response keeps %q: want what streamed before the stop", kept)
	}
	f.models.Release("g2")
	f.turnOK(t, "s1", "continue")
	reqs = f.models.Requests()
	if last := conversation(reqs[len(reqs)-1].Messages); !strings.HasSuffix(last, "user: tell a story\nassistant: "+kept+"\nuser: continue\n") {
		t.Fatalf("the turn after the stop: Pi's prompt\n%s\nwant the kept %q before continue", last, kept)
	}

	// maxSteps: two steps, then the response ends at the limit.
	g := &fixture{models: externaltest.NewModels(t, `{"default":{"toolCalls":[{"id":"b1","name":"bash","input":{"command":"echo 1"}}],
		"then":{"toolCalls":[{"id":"b2","name":"bash","input":{"command":"echo 2"}}],"then":{"text":"done"}}}}`)}
	g.Runtime = externaltest.Start(t, actors.AgentOptions{Model: harness.ModelID("script/test"), Models: g.models.Provider, MaxSteps: 2,
		Tools: h.Tools(), Harness: h.HarnessOptions(g.models.Provider)})
	st = g.turn("s2", "count")
	if st.Status != protocol.StatusFailed || st.Error == nil || !st.Error.StepLimit || len(g.models.Requests()) != 2 {
		t.Fatalf("maxSteps 2: status %s, error %+v, %d model calls; want the step limit after 2", st.Status, st.Error, len(g.models.Requests()))
	}
}

// textOf is a message's text.
func textOf(m protocol.TranscriptMessage) string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == protocol.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// conversationText is the text of every message.
func conversationText(st *protocol.AIState) string {
	var b strings.Builder
	for _, m := range st.Messages {
		b.WriteString(textOf(m) + "\n")
	}
	return b.String()
}
