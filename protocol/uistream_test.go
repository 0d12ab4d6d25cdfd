package protocol

import (
	"encoding/json"
	"testing"
)

// rebuildChunks builds a message from chunks the way a client does, with
// A2's own fold of a single projection.
func rebuildChunks(t *testing.T, chunks []UIMessageChunk) []Part {
	t.Helper()
	raws := make([]string, len(chunks))
	for i, c := range chunks {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		raws[i] = string(b)
	}
	var parts []Part
	if err := json.Unmarshal([]byte(foldChunks(t, raws...)), &parts); err != nil {
		t.Fatal(err)
	}
	return parts
}

func msgOf(parts ...Part) *UIMessage { return &UIMessage{ID: "R1", Role: RoleAssistant, Parts: parts} }

// A UIStream fed the successive states of a response sends chunks that
// rebuild the last state, taking back with reset-step what the fold removed
// (a superseded attempt, a cut), and never sends a removed part again.
func TestUIStreamFollowsTheFoldedMessage(t *testing.T) {
	ss := Part{Type: PartStepStart}
	text := func(s, state string) Part { return Part{Type: PartText, Text: s, State: state} }
	tool := func(state string) Part {
		p := Part{Type: "tool-calc", ToolCallID: "c1", State: state, Input: json.RawMessage(`{"a":1}`)}
		if state == ToolOutputAvailable {
			p.Output = json.RawMessage(`2`)
		}
		return p
	}
	steps := []*UIMessage{
		msgOf(ss, text("Hel", "streaming")),
		msgOf(ss, text("Hello", "done"), tool(ToolInputAvailable)),
		msgOf(ss, text("Hello", "done"), tool(ToolOutputAvailable)),
		msgOf(ss, text("Hello", "done"), tool(ToolOutputAvailable), ss, text("Sec", "streaming")),
		// The second step's attempt is superseded: cut back before it.
		msgOf(ss, text("Hello", "done"), tool(ToolOutputAvailable)),
		// Its new attempt.
		msgOf(ss, text("Hello", "done"), tool(ToolOutputAvailable), ss, text("Second", "streaming")),
		// A Stop at an earlier index of that attempt.
		msgOf(ss, text("Hello", "done"), tool(ToolOutputAvailable), ss, text("Se", "done")),
	}
	u := NewUIStream("R1")
	var all []UIMessageChunk
	resets := 0
	for i, m := range steps {
		chunks := u.Update(m)
		for _, c := range chunks {
			if c.Type == ChunkResetStep {
				resets++
			}
		}
		all = append(all, chunks...)
		if u.Broken() {
			t.Fatalf("step %d: broken", i)
		}
	}
	all = append(all, u.Finish("interrupted", "")...)
	if all[0].Type != ChunkStart || all[0].MessageID != "R1" {
		t.Fatalf("first chunk %+v", all[0])
	}
	if resets != 2 {
		t.Fatalf("%d reset-steps, want 2 (the superseded attempt, the cut)", resets)
	}
	got, _ := json.Marshal(rebuildChunks(t, all))
	want, _ := json.Marshal(steps[len(steps)-1].Parts)
	if !equalJSON(t, got, want) {
		t.Fatalf("rebuilt\n %s\nwant\n %s", got, want)
	}
}

// A change before the current step cannot be shown with chunks: the
// stream says so instead of sending a wrong message.
func TestUIStreamBrokenBeforeTheCurrentStep(t *testing.T) {
	ss := Part{Type: PartStepStart}
	u := NewUIStream("R1")
	u.Update(msgOf(ss, Part{Type: PartText, Text: "a", State: "done"}, ss, Part{Type: PartText, Text: "b", State: "done"}))
	u.Update(msgOf(ss, Part{Type: PartText, Text: "x", State: "done"}, ss, Part{Type: PartText, Text: "b", State: "done"}))
	if !u.Broken() {
		t.Fatal("a change in an earlier step was not reported")
	}
}
