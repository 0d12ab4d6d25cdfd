package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/a2-runtime/a2/protocol"
)

// A coding tool's call the chat cannot read as one (what a model may send)
// is shown as any tool's, its JSON; a long command's output keeps its last
// lines.
func TestCodingToolsRenderWhateverTheInput(t *testing.T) {
	part := func(name, input, output string) protocol.Part {
		p := protocol.Part{Type: "tool-" + name, ToolCallID: "c1", State: protocol.ToolOutputAvailable, Input: json.RawMessage(input)}
		if output != "" {
			p.Output = json.RawMessage(output)
		}
		return p
	}
	var long []string
	for i := range 20 {
		long = append(long, fmt.Sprintf("line %d", i+1))
	}
	longOut, _ := json.Marshal(strings.Join(long, "\n"))
	for _, tc := range []struct {
		name string
		p    protocol.Part
		want []string
	}{
		{"edits as a string", part("edit", `{"path":"a.go","edits":"[{\"oldText\":1}]"}`, `"ok"`), []string{"⚙ edit {"}},
		{"an edit without a path", part("edit", `{"edits":[{"oldText":"a","newText":"b"}]}`, `"ok"`), []string{"⚙ edit"}},
		{"a write of a number", part("write", `{"path":"a","content":5}`, `"ok"`), []string{"⚙ write"}},
		{"input that is not an object", part("bash", `"ls"`, `"x"`), []string{`⚙ bash "ls"`}},
		{"no input yet", protocol.Part{Type: "tool-bash", ToolCallID: "c1", State: protocol.ToolInputStreaming}, []string{"⚙ bash"}},
		{"a command's output that is not text", part("bash", `{"command":"ls"}`, `{"files":2}`), []string{"$ ls", `{"files":2}`}},
		{"a long output", part("bash", `{"command":"seq 20"}`, string(longOut)), []string{"$ seq 20", "… 8 lines above", "line 9", "line 20"}},
		{"the old form of an edit", part("edit", `{"path":"a.txt","oldText":"x","newText":"y"}`, `"ok"`), []string{"✎ edit a.txt", "- x", "+ y"}},
		{"a failed command", protocol.Part{Type: "tool-bash", ToolCallID: "c1", State: protocol.ToolOutputError, Input: json.RawMessage(`{"command":"false"}`), ErrorText: "exit 1"}, []string{"$ false", "✗ exit 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ansi.Strip(renderPart(tc.p, 80, false))
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
			if strings.Contains(got, "line 8\n") {
				t.Errorf("%q shows more than the last lines", got)
			}
		})
	}
}
