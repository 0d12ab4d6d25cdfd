package harness

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/a2-runtime/a2/protocol"
)

// Model streams one model step: a prompt in, UI message chunks out. It is
// the seam between A2 and a provider (OpenAI-compatible chat completions,
// Anthropic messages, the script and demo models).
//
// Stream must honour ctx: when it is cancelled (Stop, Pause now, a lapsed
// claim) the stream ends with ctx's error. A provider error is returned by
// Next as an error; the step then fails.
type Model interface {
	Stream(ctx context.Context, req Request) (Stream, error)
}

// Stream yields the chunks of one model step, in order. Next returns
// io.EOF after the last chunk. Close releases the stream early; it is safe
// to call more than once.
type Stream interface {
	Next() (protocol.UIMessageChunk, error)
	Close() error
}

// ReadyStream is a Stream that can tell whether its next chunk is already
// at hand: decoded, or received and buffered, so that Next would return it
// without waiting for the model. The runtime hands the chunks that arrive
// together (one network read, say) to the session in one message, so they
// share a progress event instead of the first of them riding alone. Ready
// must not block; a stream that cannot tell returns false.
type ReadyStream interface {
	Stream
	Ready() bool
}

// Request is one model step's prompt and settings.
type Request struct {
	// Model is the model ID as the provider knows it.
	Model string
	// System is the system prompt (the resolved instructions).
	System string
	// Messages is the prompt (ConvertToModelMessages of the model context).
	// A model reads it while its stream is open and keeps no reference
	// after the stream closes: the memory is the session's prompt cache's,
	// lent to the step (PromptCache.Prompt). Nor may it change it.
	Messages []ModelMessage
	// Tools are the tool definitions the model may call; A2 runs them.
	Tools []ToolDefinition
	// Settings are the resolved generation settings, Gateway defaults
	// applied for Gateway models.
	Settings GenerationSettings
	// Headers are the request's extra headers (RequestHeaders).
	Headers map[string]string
	// SessionID and GenerationID identify the step, for logs and fakes.
	SessionID    string
	GenerationID string
}

// LatestUserText is the text of the prompt's last user message ("" when
// there is none): what the script and demo models answer to.
func (r Request) LatestUserText() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role != ModelRoleUser {
			continue
		}
		var b strings.Builder
		for _, p := range r.Messages[i].Content {
			if p.Type == ContentText {
				b.WriteString(p.Text)
			}
		}
		return b.String()
	}
	return ""
}

// ToolDefinition is a tool as the model sees it.
type ToolDefinition struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// Model message roles.
const (
	ModelRoleSystem    = "system"
	ModelRoleUser      = "user"
	ModelRoleAssistant = "assistant"
	ModelRoleTool      = "tool"
)

// ModelMessage is one message of a model prompt (the AI SDK ModelMessage).
type ModelMessage struct {
	Role    string        `json:"role"`
	Content []ContentPart `json:"content"`
}

// Content part types of model messages.
const (
	ContentText             = "text"
	ContentFile             = "file"
	ContentReasoning        = "reasoning"
	ContentToolCall         = "tool-call"
	ContentToolResult       = "tool-result"
	ContentApprovalRequest  = "tool-approval-request"
	ContentApprovalResponse = "tool-approval-response"
)

// ContentPart is one part of a model message.
type ContentPart struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`

	MediaType string `json:"mediaType,omitempty"`
	Filename  string `json:"filename,omitempty"`
	// Data is a file's URL (https: or data:).
	Data string `json:"data,omitempty"`

	ToolCallID       string          `json:"toolCallId,omitempty"`
	ToolName         string          `json:"toolName,omitempty"`
	Input            json.RawMessage `json:"input,omitempty"`
	Output           *ToolOutput     `json:"output,omitempty"`
	ProviderExecuted bool            `json:"providerExecuted,omitempty"`

	ApprovalID string `json:"approvalId,omitempty"`
	Approved   *bool  `json:"approved,omitempty"`
	Reason     string `json:"reason,omitempty"`

	ProviderOptions json.RawMessage `json:"providerOptions,omitempty"`
}

// ToolOutput is a tool result as the model sees it: Type is "text",
// "json", "error-text" or "error-json".
type ToolOutput struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

// Text returns the output as text for providers that take a string.
func (o *ToolOutput) Text() string {
	var s string
	if (o.Type == "text" || o.Type == "error-text") && json.Unmarshal(o.Value, &s) == nil {
		return s
	}
	return string(o.Value)
}

// ErrUnsupportedRole is returned for a message of an unknown role.
var ErrUnsupportedRole = errors.New("harness: unsupported message role")

// ConvertToModelMessages turns transcript messages into a model prompt, the
// way the AI SDK's convertToModelMessages does: system messages become one
// system text; user messages keep text and file parts; an assistant message
// splits at step boundaries into an assistant message (text, reasoning,
// files, tool calls, provider-executed results) followed by a tool message
// with the results of its local calls (denied calls as an error result).
// Data parts, the compaction part among them, never enter model context
// (R-COMPACT-34); input-streaming drafts are skipped (R-STOP-13).
func ConvertToModelMessages(messages []protocol.TranscriptMessage) ([]ModelMessage, error) {
	var out []ModelMessage
	for _, m := range messages {
		switch m.Role {
		case protocol.RoleSystem:
			var b strings.Builder
			for _, p := range m.Parts {
				if p.Type == protocol.PartText {
					b.WriteString(p.Text)
				}
			}
			out = append(out, ModelMessage{Role: ModelRoleSystem, Content: []ContentPart{{Type: ContentText, Text: b.String()}}})
		case protocol.RoleUser:
			var content []ContentPart
			for _, p := range m.Parts {
				switch p.Type {
				case protocol.PartText:
					content = append(content, ContentPart{Type: ContentText, Text: p.Text, ProviderOptions: p.ProviderMetadata})
				case protocol.PartFile:
					content = append(content, ContentPart{Type: ContentFile, MediaType: p.MediaType, Filename: p.Filename, Data: p.URL, ProviderOptions: p.ProviderMetadata})
				}
			}
			out = append(out, ModelMessage{Role: ModelRoleUser, Content: content})
		case protocol.RoleAssistant:
			var block []protocol.Part
			for _, p := range m.Parts {
				if p.Type == protocol.PartStepStart {
					out = appendBlock(out, block)
					block = nil
					continue
				}
				block = append(block, p)
			}
			out = appendBlock(out, block)
		default:
			return nil, ErrUnsupportedRole
		}
	}
	return out, nil
}

// appendBlock converts one step of an assistant message.
func appendBlock(out []ModelMessage, block []protocol.Part) []ModelMessage {
	var content, results []ContentPart
	for i := range block {
		p := &block[i]
		switch {
		case p.Type == protocol.PartText:
			content = append(content, ContentPart{Type: ContentText, Text: p.Text, ProviderOptions: p.ProviderMetadata})
		case p.Type == protocol.PartReasoning:
			content = append(content, ContentPart{Type: ContentReasoning, Text: p.Text, ProviderOptions: p.ProviderMetadata})
		case p.Type == protocol.PartFile:
			content = append(content, ContentPart{Type: ContentFile, MediaType: p.MediaType, Filename: p.Filename, Data: p.URL, ProviderOptions: p.ProviderMetadata})
		case p.IsToolPart() && p.State != protocol.ToolInputStreaming:
			name := p.ToolNameOf()
			input := p.Input
			if p.State == protocol.ToolOutputError && len(input) == 0 {
				input = p.RawInput
			}
			providerExecuted := p.ProviderExecuted != nil && *p.ProviderExecuted
			content = append(content, ContentPart{Type: ContentToolCall, ToolCallID: p.ToolCallID, ToolName: name,
				Input: input, ProviderExecuted: providerExecuted, ProviderOptions: p.CallProviderMetadata})
			if p.Approval != nil {
				content = append(content, ContentPart{Type: ContentApprovalRequest, ApprovalID: p.Approval.ID, ToolCallID: p.ToolCallID})
			}
			if providerExecuted && (p.State == protocol.ToolOutputAvailable || p.State == protocol.ToolOutputError) {
				content = append(content, ContentPart{Type: ContentToolResult, ToolCallID: p.ToolCallID, ToolName: name,
					Output: toolOutput(p, "json"), ProviderOptions: p.ResultProviderMetadata})
			}
			if p.Approval != nil && p.Approval.Approved != nil {
				results = append(results, ContentPart{Type: ContentApprovalResponse, ApprovalID: p.Approval.ID,
					Approved: p.Approval.Approved, Reason: p.Approval.Reason, ProviderExecuted: providerExecuted})
			}
			if providerExecuted {
				continue
			}
			switch p.State {
			case protocol.ToolOutputDenied:
				reason := "Tool call execution denied."
				if p.Approval != nil && p.Approval.Reason != "" {
					reason = p.Approval.Reason
				}
				results = append(results, ContentPart{Type: ContentToolResult, ToolCallID: p.ToolCallID, ToolName: name,
					Output: &ToolOutput{Type: "error-text", Value: mustMarshal(reason)}})
			case protocol.ToolOutputAvailable, protocol.ToolOutputError:
				results = append(results, ContentPart{Type: ContentToolResult, ToolCallID: p.ToolCallID, ToolName: name,
					Output: toolOutput(p, "text"), ProviderOptions: p.CallProviderMetadata})
			}
		}
	}
	if len(content) > 0 {
		out = append(out, ModelMessage{Role: ModelRoleAssistant, Content: content})
	}
	if len(results) > 0 {
		out = append(out, ModelMessage{Role: ModelRoleTool, Content: results})
	}
	return out
}

// toolOutput is a tool part's output as the model sees it: an error as
// error-text (local) or error-json (provider-executed), a string as text,
// anything else as JSON.
func toolOutput(p *protocol.Part, errorMode string) *ToolOutput {
	if p.State == protocol.ToolOutputError {
		if errorMode == "json" {
			return &ToolOutput{Type: "error-json", Value: mustMarshal(p.ErrorText)}
		}
		return &ToolOutput{Type: "error-text", Value: mustMarshal(p.ErrorText)}
	}
	var s string
	if len(p.Output) > 0 && p.Output[0] == '"' && json.Unmarshal(p.Output, &s) == nil {
		return &ToolOutput{Type: "text", Value: p.Output}
	}
	v := p.Output
	if len(v) == 0 {
		v = json.RawMessage("null")
	}
	return &ToolOutput{Type: "json", Value: v}
}

func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// TakeUsage reads the usage a provider reported on a finish chunk's
// messageMetadata ({"usage": {...}}) and removes it from the chunk, so that
// usage is recorded on the generation, not merged into the assistant
// message's metadata. It returns nil when the chunk carries none.
func TakeUsage(c *protocol.UIMessageChunk) *protocol.Usage {
	if c.Type != protocol.ChunkFinish || len(c.MessageMeta) == 0 {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(c.MessageMeta, &m) != nil {
		return nil
	}
	raw, ok := m["usage"]
	if !ok {
		return nil
	}
	var u protocol.Usage
	if json.Unmarshal(raw, &u) != nil {
		return nil
	}
	delete(m, "usage")
	if len(m) == 0 {
		c.MessageMeta = nil
	} else {
		c.MessageMeta = mustMarshal(m)
	}
	return &u
}
