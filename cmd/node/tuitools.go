package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"charm.land/lipgloss/v2"
	"github.com/aymanbagabas/go-udiff"

	"github.com/a2-runtime/a2/protocol"
)

var (
	styleAdded   = lipgloss.NewStyle().Foreground(lipgloss.Color("2"))
	styleRemoved = lipgloss.NewStyle().Foreground(lipgloss.Color("1"))
)

// Lines of a command's output and of a written file the chat shows; the
// rest is summed up in a line.
const (
	outputLines  = 12
	writtenLines = 8
)

// renderCodingTool renders the calls of a coding agent's tools (Pi's
// edit, write and bash) the way a developer reads them: an edit as a diff
// of each replacement, a new file's first lines, a command with its
// output. It returns false for any other call (or input it cannot read),
// which renderPart shows as JSON.
func renderCodingTool(p protocol.Part, w int) (string, bool) {
	var in struct {
		Path    string  `json:"path"`
		Content *string `json:"content"`
		Command string  `json:"command"`
		Edits   []struct {
			OldText string `json:"oldText"`
			NewText string `json:"newText"`
		} `json:"edits"`
		OldText *string `json:"oldText"`
		NewText *string `json:"newText"`
	}
	if len(p.Input) == 0 || json.Unmarshal(p.Input, &in) != nil {
		return "", false
	}
	var body []string
	var head string
	switch name := p.ToolNameOf(); {
	case name == "edit" && in.Path != "" && (len(in.Edits) > 0 || (in.OldText != nil && in.NewText != nil)):
		edits := in.Edits
		if in.OldText != nil && in.NewText != nil {
			edits = append(edits, struct {
				OldText string `json:"oldText"`
				NewText string `json:"newText"`
			}{*in.OldText, *in.NewText})
		}
		head = "✎ edit " + in.Path
		for i, e := range edits {
			if i > 0 {
				body = append(body, styleDim.Render("  ⋯"))
			}
			body = append(body, diffLines(e.OldText, e.NewText)...)
		}
	case name == "write" && in.Path != "" && in.Content != nil:
		lines := strings.Split(strings.TrimSuffix(*in.Content, "\n"), "\n")
		head = fmt.Sprintf("✎ write %s (%d lines)", in.Path, len(lines))
		for i, l := range lines {
			if i == writtenLines {
				body = append(body, styleDim.Render(fmt.Sprintf("  … %d more lines", len(lines)-writtenLines)))
				break
			}
			body = append(body, styleAdded.Render("+ "+l))
		}
	case name == "bash" && in.Command != "":
		head = "$ " + in.Command
		if p.State == protocol.ToolOutputAvailable {
			var out string
			if json.Unmarshal(p.Output, &out) != nil {
				out = string(p.Output)
			}
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			if len(lines) > outputLines {
				body = append(body, styleDim.Render(fmt.Sprintf("  … %d lines above", len(lines)-outputLines)))
				lines = lines[len(lines)-outputLines:]
			}
			for _, l := range lines {
				body = append(body, styleDim.Render("  "+l))
			}
		}
	default:
		return "", false
	}
	head += stateNote(p.State)
	if p.State == protocol.ToolOutputError {
		body = append(body, styleError.Render("✗ "+p.ErrorText))
	}
	wrap := lipgloss.NewStyle().Width(w)
	for i, l := range body {
		if lipgloss.Width(l) > w {
			body[i] = truncate(l, w)
		}
	}
	return strings.Join(append([]string{styleTool.Render(wrap.Render(head))}, body...), "\n"), true
}

// diffLines is a line diff of a replacement: removed lines red, added
// green, the lines they share dimmed.
func diffLines(old, new string) []string {
	if !strings.HasSuffix(old, "\n") || !strings.HasSuffix(new, "\n") {
		old, new = old+"\n", new+"\n"
	}
	u, err := udiff.ToUnifiedDiff("a", "b", old, udiff.Lines(old, new), 2)
	if err != nil {
		return nil
	}
	var out []string
	for _, h := range u.Hunks {
		for _, l := range h.Lines {
			text := strings.TrimSuffix(l.Content, "\n")
			switch l.Kind {
			case udiff.Delete:
				out = append(out, styleRemoved.Render("- "+text))
			case udiff.Insert:
				out = append(out, styleAdded.Render("+ "+text))
			default:
				out = append(out, styleDim.Render("  "+text))
			}
		}
	}
	return out
}
