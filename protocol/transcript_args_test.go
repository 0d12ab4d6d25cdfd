// A transcript command's arguments: strings, turns, numbers, messages,
// trust, raw JSON and chunks.

package protocol

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

func arg(d *datadriven.TestData, key string) (string, bool) {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			if len(a.Vals) == 0 {
				return "", true
			}
			return strings.Join(a.Vals, ","), true
		}
	}
	return "", false
}

func (tr *transcript) str(d *datadriven.TestData, key string) string {
	v, _ := arg(d, key)
	return tr.resolve(v)
}

func (tr *transcript) optTurn(d *datadriven.TestData) *string {
	v, ok := arg(d, "turn")
	if !ok || v == "null" {
		return nil
	}
	v = tr.resolve(v)
	return &v
}

func optInt(d *datadriven.TestData, key string) *int64 {
	v, ok := arg(d, key)
	if !ok {
		return nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		d.Fatalf(nil, "%s: %v", key, err)
	}
	return &n
}

func textMessage(id, role, text string) *UIMessage {
	if role == "" {
		role = RoleUser
	}
	return &UIMessage{ID: id, Role: role, Parts: []Part{{Type: PartText, Text: strings.TrimSpace(text)}}}
}

func trustOf(d *datadriven.TestData) Trust {
	if _, ok := arg(d, "trusted"); ok {
		return Trusted
	}
	return Untrusted
}

func rawOr(s, def string) json.RawMessage {
	s = strings.TrimSpace(s)
	if s == "" {
		s = def
	}
	return json.RawMessage(s)
}

// parseChunks reads one chunk per input line: a JSON object, or a short
// form: "start-step", "finish-step", "text-start ID", "text-delta ID text",
// "text-end ID", "reasoning-start ID", "reasoning-delta ID text",
// "reasoning-end ID", "tool-start CALL NAME", "tool-delta CALL text",
// "tool-call CALL NAME {json}", "provider-call CALL NAME {json}",
// "tool-approval CALL APPROVAL", "tool-output CALL {json}".
func parseChunks(t *testing.T, d *datadriven.TestData) []UIMessageChunk {
	var out []UIMessageChunk
	for _, line := range strings.Split(d.Input, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "{") {
			var c UIMessageChunk
			if err := json.Unmarshal([]byte(line), &c); err != nil {
				d.Fatalf(t, "chunk %q: %v", line, err)
			}
			out = append(out, c)
			continue
		}
		f := strings.SplitN(line, " ", 3)
		get := func(i int) string {
			if i < len(f) {
				return f[i]
			}
			return ""
		}
		c := UIMessageChunk{Type: f[0]}
		switch f[0] {
		case ChunkStartStep, ChunkFinishStep, ChunkStart, ChunkFinish:
		case ChunkTextStart, ChunkTextEnd, ChunkReasoningStart, ChunkReasoningEnd:
			c.ID = get(1)
		case ChunkTextDelta, ChunkReasoningDelta:
			c.ID, c.Delta = get(1), get(2)
		case "tool-start":
			c = UIMessageChunk{Type: ChunkToolInputStart, ToolCallID: get(1), ToolName: get(2)}
		case "tool-delta":
			c = UIMessageChunk{Type: ChunkToolInputDelta, ToolCallID: get(1), InputTextDelta: get(2)}
		case "tool-call", "provider-call":
			rest := strings.SplitN(get(2), " ", 2)
			c = UIMessageChunk{Type: ChunkToolInputAvailable, ToolCallID: get(1), ToolName: rest[0], Input: json.RawMessage(`{}`)}
			if len(rest) > 1 {
				c.Input = json.RawMessage(rest[1])
			}
			if f[0] == "provider-call" {
				yes := true
				c.ProviderExec = &yes
			}
		case "tool-approval":
			c = UIMessageChunk{Type: ChunkToolApproval, ToolCallID: get(1), ApprovalID: get(2)}
		case "tool-output":
			c = UIMessageChunk{Type: ChunkToolOutput, ToolCallID: get(1), Output: json.RawMessage(get(2))}
		default:
			d.Fatalf(t, "unknown chunk form %q", line)
		}
		out = append(out, c)
	}
	return out
}
