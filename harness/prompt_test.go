package harness

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"testing"

	"github.com/a2-runtime/a2/protocol"
)

// A prompt from the cache is the whole computation's (the conversion and
// the estimate's bytes) at every step of a conversation that grows, whose
// response is written to between steps, and the settled messages' model
// messages are the ones of the step before, not converted again.
func TestPromptCacheEqualsTheWholeComputation(t *testing.T) {
	var c PromptCache
	var transcript []protocol.TranscriptMessage
	active := ""
	settled := func(id string) bool { return id != active }
	check := func(step string) []ModelMessage {
		t.Helper()
		// A lane's view: the active response's parts copied, the rest shared.
		view := append([]protocol.TranscriptMessage(nil), transcript...)
		for i := range view {
			if view[i].ID == active {
				view[i].Parts = append([]protocol.Part(nil), view[i].Parts...)
			}
		}
		got, bytes, release, err := c.Prompt(view, settled)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		defer release() // the step has ended
		want, err := ConvertToModelMessages(view)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			a, _ := json.Marshal(got)
			b, _ := json.Marshal(want)
			t.Fatalf("%s: the cached prompt differs:\n%s\nwant\n%s", step, a, b)
		}
		if full := protocol.EstimateBytes(view, nil, ""); bytes != full {
			t.Fatalf("%s: cached bytes %d, whole computation %d", step, bytes, full)
		}
		return got
	}
	var before []ModelMessage
	for turn := 0; turn < 20; turn++ {
		transcript = append(transcript, protocol.TranscriptMessage{ID: "u" + strconv.Itoa(turn), Role: protocol.RoleUser,
			Parts: []protocol.Part{{Type: protocol.PartText, Text: "question " + strconv.Itoa(turn)}}})
		active = "a" + strconv.Itoa(turn)
		transcript = append(transcript, protocol.TranscriptMessage{ID: active, Role: protocol.RoleAssistant})
		resp := &transcript[len(transcript)-1]
		// Step one streams text and a tool call; the fold writes the
		// response in place (a text that grows, a tool part that gets its
		// output) between this step and the continuation.
		resp.Parts = append(resp.Parts, protocol.Part{Type: protocol.PartStepStart}, protocol.Part{Type: protocol.PartText, Text: "let me"})
		now := check("turn " + strconv.Itoa(turn) + " step 1")
		if turn > 0 {
			// The settled messages' model messages are the earlier step's.
			if len(now) < len(before)-2 || &now[0].Content[0] != &before[0].Content[0] {
				t.Fatalf("turn %d: the first message was converted again", turn)
			}
		}
		resp.Parts[1].Text += " look"
		check("turn " + strconv.Itoa(turn) + " text grows")
		resp.Parts = append(resp.Parts, protocol.Part{Type: "tool-lookup", ToolCallID: "c" + strconv.Itoa(turn), State: protocol.ToolInputAvailable,
			Input: json.RawMessage(`{"q":"x"}`)})
		check("turn " + strconv.Itoa(turn) + " tool call")
		resp.Parts[2].State, resp.Parts[2].Output = protocol.ToolOutputAvailable, json.RawMessage(`{"found":true}`)
		resp.Parts = append(resp.Parts, protocol.Part{Type: protocol.PartStepStart}, protocol.Part{Type: protocol.PartText, Text: "found"})
		before = check("turn " + strconv.Itoa(turn) + " step 2")
	}
	// A compaction: the model context starts after its part, a shorter
	// view of a settled message; the cache follows it.
	_, after := protocol.ModelContext(append(transcript[:len(transcript):len(transcript)], protocol.TranscriptMessage{ID: "c", Role: protocol.RoleAssistant,
		Parts: []protocol.Part{{Type: protocol.PartCompaction, Data: json.RawMessage(`{"status":"completed","summary":"s"}`)}, {Type: protocol.PartText, Text: "after"}}}))
	transcript, active = after, ""
	check("after a compaction")
	// A message the conversion refuses fails the prompt, and the next
	// prompt without it is whole again.
	transcript = append(transcript, protocol.TranscriptMessage{ID: "bad", Role: "robot", Parts: []protocol.Part{{Type: protocol.PartText, Text: "?"}}})
	if _, _, _, err := c.Prompt(transcript, settled); !errors.Is(err, ErrUnsupportedRole) {
		t.Fatalf("a message of role robot: %v, want ErrUnsupportedRole", err)
	}
	transcript = transcript[:len(transcript)-1]
	check("after the refused message")
}

// A prompt is lent to its step: a later prompt while it is held is a copy
// and changes nothing the step reads, even where the conversation moved
// on; once released, the next prompt is made in the same memory, so a
// step costs no copy of the history.
func TestAPromptIsLentUntilReleased(t *testing.T) {
	var c PromptCache
	var transcript []protocol.TranscriptMessage
	for i := 0; i < 40; i++ {
		role := protocol.RoleUser
		if i%2 == 1 {
			role = protocol.RoleAssistant
		}
		transcript = append(transcript, protocol.TranscriptMessage{ID: "m" + strconv.Itoa(i), Role: role,
			Parts: []protocol.Part{{Type: protocol.PartText, Text: "text " + strconv.Itoa(i)}}})
	}
	active := "m39"
	settled := func(id string) bool { return id != active }
	prompt := func(step string) ([]ModelMessage, func()) {
		t.Helper()
		got, _, release, err := c.Prompt(transcript, settled)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		want, err := ConvertToModelMessages(transcript)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: the prompt differs from the whole computation", step)
		}
		return got, release
	}
	first, release1 := prompt("first")
	held, _ := json.Marshal(first)
	// The conversation moves on while the first step still reads its
	// prompt: the response settles and two messages follow, one active.
	active = "m41"
	transcript = append(transcript, protocol.TranscriptMessage{ID: "m40", Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: "next"}}},
		protocol.TranscriptMessage{ID: "m41", Role: protocol.RoleAssistant, Parts: []protocol.Part{{Type: protocol.PartText, Text: "answer"}}})
	second, release2 := prompt("while the first is held")
	if now, _ := json.Marshal(first); string(now) != string(held) {
		t.Fatalf("a prompt made while the first was held changed it:\n%s\n->\n%s", held, now)
	}
	if &second[0] == &first[0] {
		t.Fatal("a prompt made while the first was held shares its memory")
	}
	release2() // a copy's release changes nothing
	release1()
	release1() // twice is harmless
	third, release3 := prompt("after the release")
	defer release3()
	if &third[0] != &first[0] {
		t.Fatal("the prompt after the release was copied: it does not reuse the cache's memory")
	}
}
