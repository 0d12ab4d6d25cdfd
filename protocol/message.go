package protocol

import (
	"encoding/json"
	"strings"
)

// Message roles of the AI SDK UIMessage.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleSystem    = "system"
)

// UIMessage is the AI SDK UIMessage in its JSON shape: an ID, a role, optional
// metadata and a list of parts. A message A2 serializes can be rendered by an
// AI SDK chat client as it is.
type UIMessage struct {
	ID       string          `json:"id"`
	Role     string          `json:"role"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Parts    []Part          `json:"parts"`
}

// TranscriptMessage is the message type of AIState.Messages: a UIMessage whose
// parts may include the compaction part (type "data-a2-compaction").
type TranscriptMessage = UIMessage

// Part is one UIMessage part. The Type discriminator decides which fields
// are meaningful, as in the AI SDK:
//
//   - "text", "reasoning": Text, State ("streaming" | "done"), ProviderMetadata
//     (reasoning also ID; text also Citations);
//   - "custom": Kind, ProviderMetadata;
//   - "tool-<name>" and "dynamic-tool" (ToolName set): ToolCallID, State
//     (see the ToolState constants), Input, RawInput, Output, ErrorText,
//     ProviderExecuted, Preliminary, Approval, Title, ToolMetadata,
//     CallProviderMetadata, ResultProviderMetadata, InputEncoding;
//   - "step-start": no fields;
//   - "file": MediaType, Filename, URL, ProviderReference;
//   - "reasoning-file": MediaType, URL;
//   - "steering-message": ID and Parts (text and file parts);
//   - "source-url": SourceID, URL, Title; "source-document": SourceID,
//     MediaType, Title, Filename;
//   - "data-<name>": ID and Data.
//
// Fields are omitted from JSON when empty, so each part serializes to the
// AI SDK shape of its type. The shapes are those of the ai package, version 7
// (docs/protocol.md §3.8a).
type Part struct {
	Type string `json:"type"`

	ID        string `json:"id,omitempty"`
	Text      string `json:"text,omitempty"`
	State     string `json:"state,omitempty"`
	SourceID  string `json:"sourceId,omitempty"`
	URL       string `json:"url,omitempty"`
	Title     string `json:"title,omitempty"`
	MediaType string `json:"mediaType,omitempty"`
	Filename  string `json:"filename,omitempty"`
	Kind      string `json:"kind,omitempty"`

	Citations         json.RawMessage `json:"citations,omitempty"`
	ProviderReference json.RawMessage `json:"providerReference,omitempty"`
	Parts             []Part          `json:"parts,omitempty"`

	ToolName               string          `json:"toolName,omitempty"`
	ToolCallID             string          `json:"toolCallId,omitempty"`
	Input                  json.RawMessage `json:"input,omitempty"`
	RawInput               json.RawMessage `json:"rawInput,omitempty"`
	InputEncoding          string          `json:"inputEncoding,omitempty"`
	Output                 json.RawMessage `json:"output,omitempty"`
	ErrorText              string          `json:"errorText,omitempty"`
	ProviderExecuted       *bool           `json:"providerExecuted,omitempty"`
	Preliminary            *bool           `json:"preliminary,omitempty"`
	Approval               *ToolApproval   `json:"approval,omitempty"`
	ToolMetadata           json.RawMessage `json:"toolMetadata,omitempty"`
	CallProviderMetadata   json.RawMessage `json:"callProviderMetadata,omitempty"`
	ResultProviderMetadata json.RawMessage `json:"resultProviderMetadata,omitempty"`

	Data             json.RawMessage `json:"data,omitempty"`
	ProviderMetadata json.RawMessage `json:"providerMetadata,omitempty"`
}

// ToolApproval is the approval of a tool part. RequestReason is the reason
// the approval was asked for (the request chunk's reason); Reason is the
// answer's.
type ToolApproval struct {
	ID               string          `json:"id"`
	Approved         *bool           `json:"approved,omitempty"`
	Reason           string          `json:"reason,omitempty"`
	RequestReason    string          `json:"requestReason,omitempty"`
	IsAutomatic      bool            `json:"isAutomatic,omitempty"`
	Descriptor       json.RawMessage `json:"descriptor,omitempty"`
	Signature        string          `json:"signature,omitempty"`
	InputSchemaInput json.RawMessage `json:"inputSchemaInput,omitempty"`
}

// Part types and tool states of the AI SDK.
const (
	PartText        = "text"
	PartReasoning   = "reasoning"
	PartStepStart   = "step-start"
	PartFile        = "file"
	PartReasonFile  = "reasoning-file"
	PartCustom      = "custom"
	PartSteering    = "steering-message"
	PartSourceURL   = "source-url"
	PartSourceDoc   = "source-document"
	PartDynamicTool = "dynamic-tool"
	PartCompaction  = "data-a2-compaction"

	ToolInputStreaming    = "input-streaming"
	ToolInputAvailable    = "input-available"
	ToolApprovalRequested = "approval-requested"
	ToolApprovalResponded = "approval-responded"
	ToolOutputAvailable   = "output-available"
	ToolOutputError       = "output-error"
	ToolOutputDenied      = "output-denied"
)

// IsToolPart reports whether p is a tool invocation ("tool-<name>" or
// "dynamic-tool").
func (p *Part) IsToolPart() bool {
	return p.Type == PartDynamicTool || strings.HasPrefix(p.Type, "tool-")
}

// ToolNameOf returns the tool name of a tool part.
func (p *Part) ToolNameOf() string {
	if p.Type == PartDynamicTool {
		return p.ToolName
	}
	return strings.TrimPrefix(p.Type, "tool-")
}

// IsDataPart reports whether p is a data part ("data-<name>"). Data parts
// never enter model context.
func (p *Part) IsDataPart() bool { return strings.HasPrefix(p.Type, "data-") }

// IsCompactionPart reports whether p is the compaction part
// (R-COMPACT-28): exactly when its type is "data-a2-compaction".
func IsCompactionPart(p Part) bool { return p.Type == PartCompaction }

// CompactionData is the data of a compaction part (R-COMPACT-27).
type CompactionData struct {
	Status          string `json:"status"`
	InputTokens     *int64 `json:"inputTokens,omitempty"`
	ThresholdTokens *int64 `json:"thresholdTokens,omitempty"`
	Summary         string `json:"summary,omitempty"`
	Usage           *Usage `json:"usage,omitempty"`
}

// Compaction statuses.
const (
	CompactionStatusRunning     = "running"
	CompactionStatusCompleted   = "completed"
	CompactionStatusFailed      = "failed"
	CompactionStatusInterrupted = "interrupted"
)

// Usage is the token usage of one generation (OQ-38), in the AI SDK
// LanguageModelUsage field names.
type Usage struct {
	InputTokens       int64  `json:"inputTokens"`
	OutputTokens      int64  `json:"outputTokens"`
	TotalTokens       int64  `json:"totalTokens"`
	ReasoningTokens   *int64 `json:"reasoningTokens,omitempty"`
	CachedInputTokens *int64 `json:"cachedInputTokens,omitempty"`
}

// UIMessageChunk is one chunk of the AI SDK UI message stream, in its JSON
// shape. Type is the discriminator ("start", "text-delta",
// "tool-input-available", "finish", "data-<name>", ...); the fields used by
// each type follow the AI SDK. Unknown chunk types are kept in progress and
// ignored by the fold.
type UIMessageChunk struct {
	Type string `json:"type"`

	ID             string          `json:"id,omitempty"`
	Delta          string          `json:"delta,omitempty"`
	ErrorText      string          `json:"errorText,omitempty"`
	ToolCallID     string          `json:"toolCallId,omitempty"`
	ToolName       string          `json:"toolName,omitempty"`
	InputTextDelta string          `json:"inputTextDelta,omitempty"`
	Input          json.RawMessage `json:"input,omitempty"`
	Output         json.RawMessage `json:"output,omitempty"`
	InputEncoding  string          `json:"inputEncoding,omitempty"`
	Dynamic        bool            `json:"dynamic,omitempty"`
	Title          string          `json:"title,omitempty"`
	ProviderExec   *bool           `json:"providerExecuted,omitempty"`
	Preliminary    *bool           `json:"preliminary,omitempty"`
	ApprovalID     string          `json:"approvalId,omitempty"`
	ApprovalDesc   json.RawMessage `json:"approvalDescriptor,omitempty"`
	Signature      string          `json:"signature,omitempty"`
	SourceID       string          `json:"sourceId,omitempty"`
	URL            string          `json:"url,omitempty"`
	MediaType      string          `json:"mediaType,omitempty"`
	Filename       string          `json:"filename,omitempty"`
	Data           json.RawMessage `json:"data,omitempty"`
	Transient      bool            `json:"transient,omitempty"`
	MessageID      string          `json:"messageId,omitempty"`
	MessageMeta    json.RawMessage `json:"messageMetadata,omitempty"`
	FinishReason   string          `json:"finishReason,omitempty"`
	Reason         string          `json:"reason,omitempty"`
	ToolMetadata   json.RawMessage `json:"toolMetadata,omitempty"`

	Citations        json.RawMessage `json:"citations,omitempty"`
	Kind             string          `json:"kind,omitempty"`
	Approved         *bool           `json:"approved,omitempty"`
	IsAutomatic      bool            `json:"isAutomatic,omitempty"`
	InputSchemaInput json.RawMessage `json:"inputSchemaInput,omitempty"`
	Parts            []Part          `json:"parts,omitempty"`

	ProviderMetadata json.RawMessage `json:"providerMetadata,omitempty"`
}

// Chunk types of the AI SDK UI message stream.
const (
	ChunkStart              = "start"
	ChunkFinish             = "finish"
	ChunkStartStep          = "start-step"
	ChunkFinishStep         = "finish-step"
	ChunkTextStart          = "text-start"
	ChunkTextDelta          = "text-delta"
	ChunkTextEnd            = "text-end"
	ChunkReasoningStart     = "reasoning-start"
	ChunkReasoningDelta     = "reasoning-delta"
	ChunkReasoningEnd       = "reasoning-end"
	ChunkError              = "error"
	ChunkAbort              = "abort"
	ChunkToolInputStart     = "tool-input-start"
	ChunkToolInputDelta     = "tool-input-delta"
	ChunkToolInputAvailable = "tool-input-available"
	ChunkToolInputError     = "tool-input-error"
	ChunkToolApproval       = "tool-approval-request"
	ChunkToolApprovalAnswer = "tool-approval-response"
	ChunkToolOutput         = "tool-output-available"
	ChunkToolOutputError    = "tool-output-error"
	ChunkToolOutputDenied   = "tool-output-denied"
	ChunkSourceURL          = "source-url"
	ChunkSourceDocument     = "source-document"
	ChunkFile               = "file"
	ChunkReasoningFile      = "reasoning-file"
	ChunkCustom             = "custom"
	ChunkSteeringMessage    = "steering-message"
	ChunkResetStep          = "reset-step"
	ChunkMessageMetadata    = "message-metadata"
)

// IsBoundaryChunk reports whether a chunk ends a unit the user sees, so that
// a progress batch holding it is written without waiting for maxDelayMs
// (OQ-33).
func IsBoundaryChunk(c UIMessageChunk) bool {
	switch c.Type {
	case ChunkStart, ChunkStartStep, ChunkFinishStep, ChunkResetStep, ChunkFinish, ChunkError,
		ChunkToolInputAvailable, ChunkToolApproval, ChunkTextEnd, ChunkReasoningEnd:
		return true
	}
	return false
}

// MarshalJSON writes the part in its AI SDK shape. Text and reasoning parts
// always carry "text", even when it is empty.
func (p Part) MarshalJSON() ([]byte, error) {
	type plain Part
	if p.Type == PartText || p.Type == PartReasoning {
		return json.Marshal(struct {
			plain
			Text string `json:"text"`
		}{plain(p), p.Text})
	}
	return json.Marshal(plain(p))
}
