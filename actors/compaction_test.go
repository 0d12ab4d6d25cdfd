package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// summarizingModel answers summary requests with a short summary and
// everything else from a script; it records the size of every prompt.
type summarizingModel struct {
	answer *script.Model
	mu     sync.Mutex
	sizes  []int64
	kinds  []string
	reqs   []harness.Request
}

func (m *summarizingModel) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	b, _ := json.Marshal(req.Messages)
	size := protocol.TokensOf(int64(len(b)) + int64(len(req.System)))
	last := req.Messages[len(req.Messages)-1]
	summary := last.Role == harness.ModelRoleUser && len(last.Content) > 0 && strings.HasPrefix(last.Content[0].Text, protocol.SummaryInstructions)
	m.mu.Lock()
	m.sizes = append(m.sizes, size)
	m.reqs = append(m.reqs, req)
	if summary {
		m.kinds = append(m.kinds, "summary")
	} else {
		m.kinds = append(m.kinds, "step")
	}
	m.mu.Unlock()
	if summary {
		sc, _ := script.Parse([]byte(`{"default":{"text":"Summary: the user asked many questions about numbers; keep going."}}`))
		return script.New(sc).Stream(ctx, req)
	}
	return m.answer.Stream(ctx, req)
}

// R-COMPACT-02 R-COMPACT-03 R-COMPACT-04 R-COMPACT-07 R-COMPACT-12: a
// session scripted to exceed its window many times over: every model step
// stays under the threshold plus one turn, state.messages stays complete,
// tool calls keep their results paired in the prompt, and the summary
// request runs no tools.
func TestCompactionKeepsPromptsBounded(t *testing.T) {
	const threshold = 1000
	var toolRuns int
	count := tools.Tool{Name: "count", Execute: func(_ context.Context, in json.RawMessage) (json.RawMessage, error) {
		toolRuns++
		return json.RawMessage(`{"n":42}`), nil
	}}
	sc, _ := script.Parse([]byte(`{"default":{"toolCalls":[{"name":"count","input":{}}],
		"then":{"text":"` + strings.Repeat("This is a long answer that fills the context window quickly. ", 6) + `"}}}`))
	m := &summarizingModel{answer: script.New(sc)}
	f := newFixture(t, `{"replies":[]}`, func(a *AgentOptions) {
		a.Models = func(string) (harness.Model, error) { return m, nil }
		a.Tools = []tools.Tool{count}
		a.Harness.Compaction = protocol.CompactionOptions{ThresholdTokens: threshold, Instructions: "Keep numbers."}
	})
	const turns = 50
	for i := 0; i < turns; i++ {
		f.push("s1", protocol.Inputs.Text(fmt.Sprintf("m%02d", i), fmt.Sprintf("question %d: how many things are there?", i)))
		f.waitFor("s1", "turn done", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2*(i+1) })
	}
	st, _, _ := f.rt.State(context.Background(), "assistant", "s1")
	if len(st.AI.Messages) != 2*turns {
		t.Fatalf("state.messages lost messages: %d", len(st.AI.Messages))
	}
	compactions := 0
	for _, msg := range st.AI.Messages {
		for _, p := range msg.Parts {
			if protocol.IsCompactionPart(p) {
				compactions++
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// One turn's share of a prompt: how much the first step of turn 2 grew
	// over that of turn 1 (before any compaction).
	var firsts []int64
	maxStep := int64(0)
	for i, req := range m.reqs {
		if m.kinds[i] != "step" {
			continue
		}
		if m.sizes[i] > maxStep {
			maxStep = m.sizes[i]
		}
		if req.Messages[len(req.Messages)-1].Role == harness.ModelRoleUser {
			firsts = append(firsts, m.sizes[i])
		}
		// Every tool call in the prompt has its result paired after it.
		results := map[string]bool{}
		for _, msg := range req.Messages {
			for _, p := range msg.Content {
				if p.Type == harness.ContentToolResult {
					results[p.ToolCallID] = true
				}
			}
		}
		for _, msg := range req.Messages {
			for _, p := range msg.Content {
				if p.Type == harness.ContentToolCall && !results[p.ToolCallID] {
					t.Fatalf("call %d: tool call %s has no result in the prompt", i, p.ToolCallID)
				}
			}
		}
	}
	perTurn := firsts[1] - firsts[0]
	t.Logf("%d turns, %d model calls, %d compactions, largest step prompt %d tokens (threshold %d, one turn %d)",
		turns, len(m.sizes), compactions, maxStep, threshold, perTurn)
	if compactions < 5 {
		t.Fatalf("only %d compactions", compactions)
	}
	if maxStep > threshold+perTurn {
		t.Fatalf("a step prompt of %d tokens exceeds the threshold %d plus one turn (%d)", maxStep, threshold, perTurn)
	}
	if toolRuns != turns {
		t.Fatalf("tools ran %d times for %d turns: the summary request must run none", toolRuns, turns)
	}
}
