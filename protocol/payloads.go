package protocol

import "encoding/json"

// Payloads of the built-in events other than ai.control.requested (Command).
// docs/protocol.md lists each with its JSON shape and who may write it.

// Decided is the payload of ai.control.decided, the receipt of one command.
type Decided = Receipt

// MessageCreated is the payload of ai.message.created: the control lane
// admitted a pending input into the transcript. It refers to the command
// that sent the input (and the edit that last changed it) and never copies
// the content (R-LOG-12). TurnID is set on the input that starts a turn.
type MessageCreated struct {
	MessageID   string `json:"messageId"`
	CommandID   string `json:"commandId"`
	EditID      string `json:"editId,omitempty"`
	TurnID      string `json:"turnId,omitempty"`
	Generate    bool   `json:"generate"`
	AfterStepOf string `json:"afterStepOf,omitempty"`
}

// MessageInterrupted is the payload of ai.message.interrupted (R-STOP-06):
// exactly one of RequestID (before the generation starts) and GenerationID
// (after) names the owner.
type MessageInterrupted struct {
	MessageID     string `json:"messageId"`
	RequestID     string `json:"requestId,omitempty"`
	GenerationID  string `json:"generationId,omitempty"`
	Reason        string `json:"reason,omitempty"`
	LastSeenIndex *int64 `json:"lastSeenIndex,omitempty"`
}

// Generation request reasons.
const (
	RequestTurn     = "turn"
	RequestContinue = "continue"
	RequestRetry    = "retry"
	RequestResume   = "resume"
)

// GenerationRequested is the payload of ai.generation.requested. The event's
// own ID is the request ID; the first request of a response has
// ResponseMessageID equal to its own ID (R-LOG-08).
type GenerationRequested struct {
	ResponseMessageID  string `json:"responseMessageId"`
	TurnID             string `json:"turnId"`
	Reason             string `json:"reason"`
	SourceGenerationID string `json:"sourceGenerationId,omitempty"`
	Version            int    `json:"version,omitempty"`
}

// GenerationStarted is the payload of ai.generation.started. Model is
// omitted when the model resolver failed (R-GEN-16).
type GenerationStarted struct {
	GenerationID string `json:"generationId"`
	RequestID    string `json:"requestId"`
	Attempt      int    `json:"attempt"`
	Model        string `json:"model,omitempty"`
}

// GenerationProgress is the payload of ai.generation.progress: a batch of
// chunks whose first has the 0-based index FromIndex in the generation's
// chunk stream. The fold applies only chunks it has not applied yet.
type GenerationProgress struct {
	GenerationID string           `json:"generationId"`
	FromIndex    int              `json:"fromIndex"`
	Chunks       []UIMessageChunk `json:"chunks"`
}

// GenerationCompleted is the payload of ai.generation.completed.
// InputTokenEstimate is the step's calibrated prompt estimate and
// InputBytes the prompt's size it came from (R-COMPACT-21); with the usage
// they calibrate the next same-model estimate.
type GenerationCompleted struct {
	GenerationID       string `json:"generationId"`
	Usage              *Usage `json:"usage,omitempty"`
	InputTokenEstimate int64  `json:"inputTokenEstimate,omitempty"`
	InputBytes         int64  `json:"inputBytes,omitempty"`
	FinishReason       string `json:"finishReason,omitempty"`
}

// GenerationFailed is the payload of ai.generation.failed. A stepLimit
// failure names the request that maxSteps refused instead of a generation.
type GenerationFailed struct {
	GenerationID string `json:"generationId,omitempty"`
	RequestID    string `json:"requestId,omitempty"`
	Message      string `json:"message"`
	StepLimit    bool   `json:"stepLimit,omitempty"`
}

// GenerationSuperseded is the payload of ai.generation.superseded: an attempt
// that will not finish (its claim lapsed, or Pause now cancelled it). Its
// partial output is removed; the request stays and a new attempt runs it.
type GenerationSuperseded struct {
	GenerationID string `json:"generationId"`
	RequestID    string `json:"requestId"`
	Attempt      int    `json:"attempt"`
	Reason       string `json:"reason,omitempty"`
}

// RetryRequested is the payload of ai.retry.requested (R-RETRY-01).
type RetryRequested struct {
	MessageID         string `json:"messageId"`
	ResponseMessageID string `json:"responseMessageId"`
	RetryID           string `json:"retryId"`
}

// ToolExecutionRequested is the payload of ai.tool.execution.requested, the
// work event of one tool call (R-TOOL-23).
type ToolExecutionRequested struct {
	ToolCallID   string          `json:"toolCallId"`
	ToolName     string          `json:"toolName"`
	Input        json.RawMessage `json:"input"`
	GenerationID string          `json:"generationId"`
	TurnID       string          `json:"turnId"`
	Version      int             `json:"version"`
}

// ToolExecutionCompleted is the payload of ai.tool.execution.completed: the
// terminal outcome of a tool call, exactly one of Output and ErrorText.
// Interrupted marks the error result a toolRecovery "report" tool records
// when its call was cut short after execute started (R-TOOL-13, R-TOOL-14):
// it is accepted for the version whose claim started the call even after
// Pause now moved the call to a newer version.
type ToolExecutionCompleted struct {
	ToolCallID   string          `json:"toolCallId"`
	GenerationID string          `json:"generationId"`
	Version      int             `json:"version"`
	Output       json.RawMessage `json:"output,omitempty"`
	ErrorText    string          `json:"errorText,omitempty"`
	Interrupted  bool            `json:"interrupted,omitempty"`
}

// ToolExecutionClaimed is the payload of ai.tool.execution.claimed: an
// attempt of a tool execution took ownership of the call, before execute
// runs. A claim whose owner is gone is lapsed (Pending names it again).
type ToolExecutionClaimed struct {
	ToolCallID   string `json:"toolCallId"`
	GenerationID string `json:"generationId"`
	Version      int    `json:"version"`
	Attempt      int    `json:"attempt"`
}

// ToolOutputPreliminary is the payload of ai.tool.output.preliminary: a
// streamed, non-final output of a running tool (R-TOOL-07). Seq orders the
// outputs of one attempt.
type ToolOutputPreliminary struct {
	ToolCallID   string          `json:"toolCallId"`
	GenerationID string          `json:"generationId"`
	Version      int             `json:"version"`
	Attempt      int             `json:"attempt"`
	Seq          int             `json:"seq"`
	Output       json.RawMessage `json:"output"`
}

// InterruptedToolError is the error text of a tool call that was cut short
// and may have partly run (OQ-12, R-TOOL-13).
const InterruptedToolError = "interrupted: the call was cut short and may have partly run"

// SessionClosed is the payload of ai.session.closed.
type SessionClosed struct {
	Reason string `json:"reason,omitempty"`
}

// SessionCreated is the payload of ai.session.created.
type SessionCreated struct {
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		// Only called with payload structs of this package, which always
		// marshal.
		panic("protocol: marshal " + err.Error())
	}
	return b
}

// CompactionRequested is the payload of ai.compaction.requested (OQ-28),
// written by the generation attempt before the step it compacts for. The
// last three fields are recorded by automatic compaction only.
type CompactionRequested struct {
	GenerationID       string `json:"generationId"`
	ResponseMessageID  string `json:"responseMessageId"`
	InputTokenEstimate *int64 `json:"inputTokenEstimate,omitempty"`
	InputTokens        *int64 `json:"inputTokens,omitempty"`
	ThresholdTokens    *int64 `json:"thresholdTokens,omitempty"`
}

// CompactionCompleted is the payload of ai.compaction.completed.
type CompactionCompleted struct {
	GenerationID string `json:"generationId"`
	Summary      string `json:"summary"`
	Usage        *Usage `json:"usage,omitempty"`
}

// ModelMetadataRequested is the payload of ai.model.metadata.requested.
type ModelMetadataRequested struct {
	Model string `json:"model"`
}

// HandlerCompleted is the payload of ai.handler.completed: the runtime ran
// the agent's handler of application event EventID to completion
// (R-CONTRACT-15).
type HandlerCompleted struct {
	EventID string `json:"eventId"`
}

// ModelMetadataResolved is the payload of ai.model.metadata.resolved: the
// model's limits, or Unavailable when the catalog does not list it.
type ModelMetadataResolved struct {
	Model           string `json:"model"`
	Unavailable     bool   `json:"unavailable,omitempty"`
	ContextWindow   int64  `json:"contextWindow,omitempty"`
	MaxOutputTokens int64  `json:"maxOutputTokens,omitempty"`
}

// Model metadata statuses.
const (
	MetadataPending     = "pending"
	MetadataResolved    = "resolved"
	MetadataUnavailable = "unavailable"
)
