// Package external runs a response's agent loop in another process: an
// agent loop of its own (Pi's coding agent, or any other) that speaks the
// JSON-lines protocol of docs/harness.md ("External harnesses") on its
// standard input and output, while A2 keeps every model call a durable
// step and every tool call an A2 tool call.
//
// Each model step of a response is one run: A2 sends the loop the session
// as of the end of the last response, the instructions and the tools; the
// loop replays its response from the start, asking A2 for each model call
// and each tool call. A2 answers the calls the log already records (the
// response's earlier steps and their tool results: no network, no tool
// run) and runs the first model call it has not recorded live, through
// the agent's own models, streaming its chunks to the loop and to the
// step. When that call ends the run ends: the tool calls it asked for run
// as A2 tool executions, and the next step is the next run.
package external

import (
	"encoding/json"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/protocol"
)

// ProtocolVersion is the version of the protocol this package speaks; a
// loop's hello names the one it speaks, and a loop that speaks another is
// refused.
const ProtocolVersion = 1

// Message types from the loop to A2.
const (
	TypeHello = "hello" // the loop's first line: {"protocol":1,"name":...}
	TypeModel = "model" // a model call: call (1, 2, ... within the run), system, messages, tools
	TypeTool  = "tool"  // a tool call: toolCallId, toolName, input
	TypeDone  = "done"  // the loop ended the run by itself
	TypeError = "error" // the run failed: message
	TypeLog   = "log"   // a diagnostic line: level, message
)

// Message types from A2 to the loop.
const (
	TypeRun         = "run"          // a step: the history, instructions, tools, settings
	TypeModelResult = "model-result" // a model call's whole result: replayed, or the live call's end
	TypeModelChunk  = "model-chunk"  // a chunk of the live model call
	TypeToolResult  = "tool-result"  // a recorded tool call's output
	TypeEnd         = "end"          // the run is over: the loop sends nothing more for it
	TypeRefused     = "refused"      // a call A2 cannot answer (the run fails)
)

// Message is one line of the protocol, in either direction; each type uses
// the fields its comment above names.
type Message struct {
	Type string `json:"type"`
	Run  string `json:"run,omitempty"`

	// hello
	Protocol int    `json:"protocol,omitempty"`
	Name     string `json:"name,omitempty"`

	// run
	Session      string                      `json:"session,omitempty"`
	Generation   string                      `json:"generation,omitempty"`
	Model        *harness.ModelSettings      `json:"model,omitempty"`
	Instructions string                      `json:"instructions,omitempty"`
	Settings     *harness.GenerationSettings `json:"settings,omitempty"`

	// run (the history), model (the call's prompt)
	System   string                   `json:"system,omitempty"`
	Messages []harness.ModelMessage   `json:"messages,omitempty"`
	Tools    []harness.ToolDefinition `json:"tools,omitempty"`

	// model, model-result, model-chunk
	Call         int                      `json:"call,omitempty"`
	Replay       bool                     `json:"replay,omitempty"`
	Content      []harness.ContentPart    `json:"content,omitempty"`
	FinishReason string                   `json:"finishReason,omitempty"`
	Usage        *protocol.Usage          `json:"usage,omitempty"`
	Chunk        *protocol.UIMessageChunk `json:"chunk,omitempty"`

	// tool, tool-result
	ToolCallID string              `json:"toolCallId,omitempty"`
	ToolName   string              `json:"toolName,omitempty"`
	Input      json.RawMessage     `json:"input,omitempty"`
	Output     *harness.ToolOutput `json:"output,omitempty"`

	// error, refused, log, end
	Message string `json:"message,omitempty"`
	Level   string `json:"level,omitempty"`
}
