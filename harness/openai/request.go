package openai

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/a2-runtime/a2/harness"
)

// chatMessage is one message of the chat completions body.
type chatMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// contentPart is a part of a user message's content array.
type contentPart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *imageURL `json:"image_url,omitempty"`
	File     *fileData `json:"file,omitempty"`
}

type imageURL struct {
	URL string `json:"url"`
}

type fileData struct {
	Filename string `json:"filename,omitempty"`
	FileData string `json:"file_data"`
}

type chatTool struct {
	Type     string         `json:"type"`
	Function chatToolSchema `json:"function"`
}

type chatToolSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// optionAliases maps AI SDK provider option names (camelCase) to the
// chat completions body fields. Other names are sent as they are.
var optionAliases = map[string]string{
	"reasoningEffort":      "reasoning_effort",
	"parallelToolCalls":    "parallel_tool_calls",
	"maxCompletionTokens":  "max_completion_tokens",
	"serviceTier":          "service_tier",
	"textVerbosity":        "verbosity",
	"promptCacheKey":       "prompt_cache_key",
	"promptCacheRetention": "prompt_cache_retention",
	"safetyIdentifier":     "safety_identifier",
	"logitBias":            "logit_bias",
	"topLogprobs":          "top_logprobs",
}

// requestBody maps a harness request to the chat completions body.
func (m *Model) requestBody(req harness.Request) (map[string]any, error) {
	messages, err := m.messages(req)
	if err != nil {
		return nil, err
	}
	s := req.Settings
	body := map[string]any{
		"model":          m.modelID(req.Model),
		"messages":       messages,
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
	}
	if len(req.Tools) > 0 {
		tools := make([]chatTool, 0, len(req.Tools))
		for _, t := range req.Tools {
			schema := t.InputSchema
			if len(schema) == 0 || string(schema) == "null" {
				schema = json.RawMessage(`{"type":"object","properties":{}}`)
			}
			tools = append(tools, chatTool{Type: "function", Function: chatToolSchema{Name: t.Name, Description: t.Description, Parameters: schema}})
		}
		body["tools"] = tools
	}
	if s.Temperature != nil {
		body["temperature"] = *s.Temperature
	}
	if s.TopP != nil {
		body["top_p"] = *s.TopP
	}
	if s.MaxOutputTokens != nil {
		if m.openAIHost() {
			body["max_completion_tokens"] = *s.MaxOutputTokens
		} else {
			body["max_tokens"] = *s.MaxOutputTokens
		}
	}
	if s.Seed != nil {
		body["seed"] = *s.Seed
	}
	if len(s.StopSequences) > 0 {
		body["stop"] = s.StopSequences
	}
	if effort := reasoningEffort(s.Reasoning); effort != "" {
		body["reasoning_effort"] = effort
	}
	if err := applyExtra(body, s.Extra); err != nil {
		return nil, err
	}
	for k, v := range s.ProviderOptions[m.opts.ProviderOptionsKey] {
		if alias, ok := optionAliases[k]; ok {
			k = alias
		}
		if k == "max_completion_tokens" {
			delete(body, "max_tokens")
		}
		body[k] = v
	}
	if gw := s.ProviderOptions["gateway"]; m.gateway && len(gw) > 0 {
		body["providerOptions"] = map[string]any{"gateway": gw}
	}
	return body, nil
}

// reasoningEffort maps an A2 reasoning level to reasoning_effort: the
// level itself, nothing for "provider-default" (the model's default).
func reasoningEffort(level string) string {
	switch level {
	case "", "provider-default":
		return ""
	}
	return level
}

// applyExtra maps the AI SDK call settings that GenerationSettings keeps
// in Extra: toolChoice, presencePenalty, frequencyPenalty. Other extra
// settings (toolsContext, ...) are not model parameters.
func applyExtra(body map[string]any, extra map[string]json.RawMessage) error {
	if v, ok := extra["presencePenalty"]; ok {
		body["presence_penalty"] = v
	}
	if v, ok := extra["frequencyPenalty"]; ok {
		body["frequency_penalty"] = v
	}
	raw, ok := extra["toolChoice"]
	if !ok {
		return nil
	}
	var name string
	if json.Unmarshal(raw, &name) == nil {
		switch name {
		case "auto", "none", "required":
			body["tool_choice"] = name
			return nil
		}
		return fmt.Errorf("openai: toolChoice %q: %w", name, ErrUnsupportedContent)
	}
	var choice struct {
		Type     string `json:"type"`
		ToolName string `json:"toolName"`
	}
	if err := json.Unmarshal(raw, &choice); err != nil || choice.Type != "tool" || choice.ToolName == "" {
		return fmt.Errorf("openai: toolChoice %s: %w", raw, ErrUnsupportedContent)
	}
	body["tool_choice"] = map[string]any{"type": "function", "function": map[string]string{"name": choice.ToolName}}
	return nil
}

// messages maps the system prompt and the model messages. Reasoning parts,
// provider-executed tool calls and their results, approval parts and
// assistant files have no chat completions form and are left out.
func (m *Model) messages(req harness.Request) ([]chatMessage, error) {
	var out []chatMessage
	if req.System != "" {
		out = append(out, chatMessage{Role: "system", Content: req.System})
	}
	for i, msg := range req.Messages {
		switch msg.Role {
		case harness.ModelRoleSystem:
			out = append(out, chatMessage{Role: "system", Content: joinText(msg.Content)})
		case harness.ModelRoleUser:
			content, err := userContent(msg.Content)
			if err != nil {
				return nil, fmt.Errorf("openai: message %d: %w", i, err)
			}
			out = append(out, chatMessage{Role: "user", Content: content})
		case harness.ModelRoleAssistant:
			var text strings.Builder
			var calls []chatToolCall
			for _, p := range msg.Content {
				switch p.Type {
				case harness.ContentText:
					text.WriteString(p.Text)
				case harness.ContentToolCall:
					if p.ProviderExecuted {
						continue
					}
					calls = append(calls, chatToolCall{ID: p.ToolCallID, Type: "function", Function: chatFunction{Name: p.ToolName, Arguments: arguments(p.Input)}})
				}
			}
			if text.Len() == 0 && len(calls) == 0 {
				continue
			}
			out = append(out, chatMessage{Role: "assistant", Content: text.String(), ToolCalls: calls})
		case harness.ModelRoleTool:
			for _, p := range msg.Content {
				if p.Type != harness.ContentToolResult || p.ProviderExecuted {
					continue
				}
				out = append(out, chatMessage{Role: "tool", ToolCallID: p.ToolCallID, Content: resultText(p.Output)})
			}
		default:
			return nil, fmt.Errorf("openai: message %d: %w: %q", i, harness.ErrUnsupportedRole, msg.Role)
		}
	}
	return out, nil
}

// arguments is a tool call's input as the arguments string. An input that
// is a JSON string is the raw text of arguments that did not parse (a
// tool-input-error): it goes back as that text.
func arguments(in json.RawMessage) string {
	t := strings.TrimSpace(string(in))
	if t == "" || t == "null" {
		return "{}"
	}
	var raw string
	if strings.HasPrefix(t, `"`) && json.Unmarshal([]byte(t), &raw) == nil {
		return raw
	}
	return t
}

func joinText(parts []harness.ContentPart) string {
	var b strings.Builder
	for _, p := range parts {
		if p.Type == harness.ContentText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// userContent is a user message's content: a string for text alone, else
// an array of text, image_url and file parts.
func userContent(parts []harness.ContentPart) (any, error) {
	if len(parts) == 1 && parts[0].Type == harness.ContentText {
		return parts[0].Text, nil
	}
	out := make([]contentPart, 0, len(parts))
	for _, p := range parts {
		switch p.Type {
		case harness.ContentText:
			out = append(out, contentPart{Type: "text", Text: p.Text})
		case harness.ContentFile:
			switch {
			case strings.HasPrefix(p.MediaType, "image/"):
				out = append(out, contentPart{Type: "image_url", ImageURL: &imageURL{URL: p.Data}})
			case p.MediaType == "application/pdf" && strings.HasPrefix(p.Data, "data:"):
				name := p.Filename
				if name == "" {
					name = "document.pdf"
				}
				out = append(out, contentPart{Type: "file", File: &fileData{Filename: name, FileData: p.Data}})
			default:
				return nil, fmt.Errorf("%w: a %q file", ErrUnsupportedContent, p.MediaType)
			}
		}
	}
	if len(out) == 0 {
		return "", nil
	}
	return out, nil
}

// resultText is a tool result as the tool message's content.
func resultText(o *harness.ToolOutput) string {
	if o == nil {
		return ""
	}
	return o.Text()
}
