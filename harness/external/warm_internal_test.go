package external

import (
	"encoding/json"
	"testing"

	"github.com/a2-runtime/a2/harness"
)

// R-HARNESS-10: a loop's saved state counts only when the history a step
// is built from, out of the log, holds what the state stands for: a state
// whose response was committed otherwise (cut at a stop's seen index, a
// tool's result that differs), or not committed at all (a retry drops the
// response), or saved by another session or another process, is not named
// and the run is cold. What the log renders differently without changing
// the conversation (reasoning, provider metadata, JSON spacing) still
// matches.
func TestASavedStateCountsOnlyWhenTheLogHoldsIt(t *testing.T) {
	text := func(role, s string) harness.ModelMessage {
		return harness.ModelMessage{Role: role, Content: []harness.ContentPart{{Type: harness.ContentText, Text: s}}}
	}
	call := harness.ModelMessage{Role: harness.ModelRoleAssistant, Content: []harness.ContentPart{
		{Type: harness.ContentToolCall, ToolCallID: "c1", ToolName: "bash", Input: json.RawMessage(`{"command":"ls"}`)}}}
	result := func(out string) harness.ModelMessage {
		return harness.ModelMessage{Role: harness.ModelRoleTool, Content: []harness.ContentPart{
			{Type: harness.ContentToolResult, ToolCallID: "c1", ToolName: "bash", Output: &harness.ToolOutput{Type: "text", Value: json.RawMessage(out)}}}}
	}
	// What the loop saved at the end of the first response.
	saved := []harness.ModelMessage{text("user", "list the files"), call, result(`"a.txt"`), text("assistant", "There is a.txt.")}
	next := text("user", "and now?")
	with := func(msgs ...harness.ModelMessage) []harness.ModelMessage { return append(msgs, next) }
	rendered := []harness.ModelMessage{text("user", "list the files"),
		{Role: harness.ModelRoleAssistant, Content: []harness.ContentPart{{Type: harness.ContentReasoning, Text: "thinking"},
			{Type: harness.ContentToolCall, ToolCallID: "c1", ToolName: "bash", Input: json.RawMessage(`{ "command": "ls" }`)}}},
		result(`"a.txt"`), text("assistant", "There is a.txt.")}

	for _, tc := range []struct {
		name    string
		session string
		history []harness.ModelMessage
		warm    bool
	}{
		{"the log holds the response", "s1", with(saved...), true},
		{"the log renders it otherwise, saying the same", "s1", with(rendered...), true},
		{"the response cut at a stop's seen index", "s1", with(saved[0], call, result(`"a.txt"`), text("assistant", "There is")), false},
		{"a tool's result that differs", "s1", with(saved[0], call, result(`"b.txt"`), saved[3]), false},
		{"the response retried: not in the log", "s1", []harness.ModelMessage{saved[0]}, false},
		{"another session", "s2", with(saved...), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &process{hello: Message{Warm: true}}
			p.expect("s1", "g1#1", saved)
			w := p.base(tc.session, tc.history)
			if (w != nil) != tc.warm {
				t.Fatalf("base = %+v, want warm %v", w, tc.warm)
			}
			if w != nil && (w.run != "g1#1" || w.count != len(saved)) {
				t.Fatalf("base = %+v, want run g1#1 standing for %d messages", w, len(saved))
			}
		})
	}
	// Another process (the loop restarted) holds nothing of the first's;
	// a loop that does not say warm is never named a state.
	if w := (&process{hello: Message{Warm: true}}).base("s1", with(saved...)); w != nil {
		t.Fatalf("a new process: base = %+v", w)
	}
	cold := &process{}
	cold.expect("s1", "g1#1", saved)
	if w := cold.base("s1", with(saved...)); w != nil {
		t.Fatalf("a loop that keeps no state: base = %+v", w)
	}
}
