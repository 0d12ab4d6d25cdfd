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
	TypeModel = "model" // a model call: call (1, 2, ... within the run), system, messages, tools, reasoning
	TypeTool  = "tool"  // a tool call: toolCallId, toolName, input
	TypeDone  = "done"  // the loop ended the run by itself
	TypeError = "error" // the run failed: message
	TypeLog   = "log"   // a diagnostic line: level, message

	TypeMissing = "missing" // a warm loop does not hold the run's base: A2 sends the run again whole
	TypeChecked = "checked" // a tool input checked: toolCallId, then input (as the loop coerced it) or message (rejected)

	TypeSandbox  = "sandbox"  // during an execute: a sandbox operation (id, op, path, data, command, timeout)
	TypeExecuted = "executed" // an execute's result: output, isError
)

// Message types from A2 to the loop.
const (
	TypeRun         = "run"          // a step: the history, instructions, tools, settings
	TypeModelResult = "model-result" // a model call's whole result: replayed, or the live call's end
	TypeModelChunk  = "model-chunk"  // a chunk of the live model call
	TypeToolResult  = "tool-result"  // a recorded tool call's output
	TypeEnd         = "end"          // the run is over: the loop sends nothing more for it
	TypeRefused     = "refused"      // a call A2 cannot answer (the run fails)
	TypeCheck       = "check"        // to a loop whose hello says check: a tool call of the live call (toolCallId, toolName, input)

	TypeExecute       = "execute"        // run one of the loop's tools (session, cwd, toolCallId, toolName, input)
	TypeSandboxResult = "sandbox-result" // a sandbox operation's answer (id, data, info, exitCode, or code and message)
	TypeSandboxData   = "sandbox-data"   // a running command's output, before its result (id, data)
)

// Sandbox operations a loop's tool asks for (Message.Op).
const (
	OpRead  = "read"  // path: the file's bytes (data), at most ReadLimit
	OpWrite = "write" // path, data: the file written, its parents made
	OpStat  = "stat"  // path: info {type, size}
	OpMkdir = "mkdir" // path: a directory may be made there (writes make parents)
	OpExec  = "exec"  // command (sh -c), path (its directory), timeout (s): sandbox-data, then exitCode
)

// Error codes of a sandbox-result (Message.Code).
const (
	CodeNotFound  = "ENOENT"    // no such file
	CodeIsDir     = "EISDIR"    // a file operation on a directory
	CodeNotDir    = "ENOTDIR"   // a directory wanted where a file is
	CodeOutside   = "EOUTSIDE"  // the path leads out of the sandbox's working directory
	CodeLimit     = "ELIMIT"    // past 4 MiB (a file read, a command's output)
	CodeTimedOut  = "ETIMEDOUT" // the command ran past its time limit
	CodeCancelled = "ECANCELED" // the tool call was cancelled
	CodeFailed    = "EIO"       // anything else
)

// Message is one line of the protocol, in either direction; each type uses
// the fields its comment above names.
type Message struct {
	Type string `json:"type"`
	Run  string `json:"run,omitempty"`

	// hello (Tools: the tools the loop implements; Warm: it keeps its
	// state at the end of a session's last response, and takes base)
	Protocol int    `json:"protocol,omitempty"`
	Name     string `json:"name,omitempty"`
	Warm     bool   `json:"warm,omitempty"`
	// hello: the loop checks the live call's tool inputs (check)
	Check bool `json:"check,omitempty"`

	// run: the saved state (the run that saved it) the run starts from;
	// Messages then hold only the history after it
	Base string `json:"base,omitempty"`

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
	// model: the call's reasoning level, when the loop sets it (Pi's
	// thinking level): the live call is made with it.
	Reasoning string `json:"reasoning,omitempty"`

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

	// execute, sandbox, sandbox-result, sandbox-data, executed
	Cwd      string    `json:"cwd,omitempty"`
	ID       int       `json:"id,omitempty"`
	Op       string    `json:"op,omitempty"`
	Path     string    `json:"path,omitempty"`
	Data     []byte    `json:"data,omitempty"` // base64 in JSON
	Command  string    `json:"command,omitempty"`
	Timeout  float64   `json:"timeout,omitempty"`
	Info     *FileInfo `json:"info,omitempty"`
	ExitCode *int      `json:"exitCode,omitempty"`
	Code     string    `json:"code,omitempty"`
	IsError  bool      `json:"isError,omitempty"`
}

// FileInfo is a stat's answer: type "file", "directory" or "other", and
// the size in bytes.
type FileInfo struct {
	Type string `json:"type"`
	Size int64  `json:"size"`
}
