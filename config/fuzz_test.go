package config

import (
	"errors"
	"os"
	"testing"
)

// FuzzParse feeds Parse any bytes: it answers a *File or an *Error listing
// problems, never panics, and what it accepts it accepts again the same
// way (a file that parses has agents, each with a name).
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("../docs/agents.md"); err == nil {
		f.Add(b) // not YAML of agents: a refusal
	}
	for _, s := range []string{
		"agents:\n  - name: a\n",
		"agents:\n  - name: a\n    model: demo\n    maxSteps: 3\n    tools:\n      - builtin: calculator\n        recovery: report\n",
		"mcpServers:\n  - name: m\n    url: http://127.0.0.1:1/mcp\nagents:\n  - name: a\n    tools:\n      - mcp: m\n        only: [x]\n",
		"agents:\n  - name: a\n    harness: pi\n",
		"agents: [{name: a, progress: {maxDelayMs: 5}}]\n",
		"{{{", "\x00", "agents:\n  - &a {name: a}\n  - *a\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("agents.yaml", data)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) || len(fe.Problems) == 0 || file != nil {
				t.Fatalf("a refusal that is not a list of problems: %T %v", err, err)
			}
			return
		}
		if len(file.Agents) == 0 {
			t.Fatal("a file accepted without agents")
		}
		for _, a := range file.Agents {
			if a.Name == "" {
				t.Fatal("an agent accepted without a name")
			}
		}
		again, err := Parse("agents.yaml", data)
		if err != nil || len(again.Agents) != len(file.Agents) {
			t.Fatalf("a second parse of an accepted file: %v", err)
		}
	})
}
