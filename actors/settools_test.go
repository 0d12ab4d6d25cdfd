package actors

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// textModel records its requests and answers each with a short text.
type textModel struct{ requestLog }

func (m *textModel) Stream(_ context.Context, req harness.Request) (harness.Stream, error) {
	m.record(req)
	return &chunkStream{chunks: []protocol.UIMessageChunk{{Type: protocol.ChunkStart}, {Type: protocol.ChunkStartStep},
		{Type: protocol.ChunkTextStart, ID: "t"}, {Type: protocol.ChunkTextDelta, ID: "t", Delta: "ok"}, {Type: protocol.ChunkTextEnd, ID: "t"},
		{Type: protocol.ChunkFinishStep}, {Type: protocol.ChunkFinish, FinishReason: "stop"}}}, nil
}

// SetTools replaces the tools that the next steps offer; a list it refuses
// leaves the agent's tools as they were; a recovery option for a tool the
// new list lacks is no error (the tool went away).
func TestSetToolsChangesTheNextSteps(t *testing.T) {
	m := &textModel{}
	tool := func(name string) tools.Tool {
		return tools.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`),
			Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`"done"`), nil }}
	}
	f := newFixture(t, `{}`, func(o *AgentOptions) {
		o.Models = func(string) (harness.Model, error) { return m, nil }
		o.Tools = []tools.Tool{tool("first")}
		o.ToolRecovery = map[string]string{"first": "report"}
	})
	offered := func(turn int) []string {
		t.Helper()
		f.push("s1", protocol.Inputs.Text("m"+string(rune('0'+turn)), "hi"))
		f.waitFor("s1", "the turn's end", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2*turn })
		m.mu.Lock()
		defer m.mu.Unlock()
		var names []string
		for _, d := range m.reqs[len(m.reqs)-1].Tools {
			names = append(names, d.Name)
		}
		return names
	}
	if got := offered(1); !slices.Equal(got, []string{"first"}) {
		t.Fatalf("the first step offered %v", got)
	}
	if err := f.agent.SetTools([]tools.Tool{tool("second"), tool("third")}); err != nil {
		t.Fatalf("SetTools: %v", err)
	}
	if got := offered(2); !slices.Equal(got, []string{"second", "third"}) {
		t.Fatalf("the step after SetTools offered %v", got)
	}
	if err := f.agent.SetTools([]tools.Tool{tool("dup"), tool("dup")}); err == nil {
		t.Fatal("SetTools took two tools of one name")
	}
	if got := f.agent.ToolNames(); !slices.Equal(got, []string{"second", "third"}) {
		t.Fatalf("after a refused list the agent has %v", got)
	}
}
