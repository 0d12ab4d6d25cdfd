package anthropic

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/a2-runtime/a2/harness"
)

// DefaultMaxTokens is max_tokens when the settings leave maxOutputTokens
// unset: the messages API requires it.
const DefaultMaxTokens = 4096

// ThinkingBudgets are the budget_tokens of extended thinking per A2
// reasoning level. "provider-default", "none" and no level send no
// thinking parameter (thinking off, the API's default).
var ThinkingBudgets = map[string]int64{
	"minimal": 1024,
	"low":     2048,
	"medium":  8192,
	"high":    16384,
	"xhigh":   32768,
}

type block = map[string]any

type message struct {
	Role    string  `json:"role"`
	Content []block `json:"content"`
}

type tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// requestBody maps a harness request to the messages body.
func (m *Model) requestBody(req harness.Request) (map[string]any, error) {
	system, messages, err := convert(req)
	if err != nil {
		return nil, err
	}
	s := req.Settings
	opts := s.ProviderOptions[m.opts.ProviderOptionsKey]

	answer := int64(DefaultMaxTokens)
	if s.MaxOutputTokens != nil {
		answer = *s.MaxOutputTokens
	}
	var thinking any
	budget := ThinkingBudgets[s.Reasoning]
	if budget > 0 {
		thinking = map[string]any{"type": "enabled", "budget_tokens": budget}
	}
	if raw, ok := opts["thinking"]; ok {
		t, b, err := thinkingOption(raw)
		if err != nil {
			return nil, err
		}
		thinking, budget = t, b
	}

	body := map[string]any{
		"model":      modelID(req.Model),
		"max_tokens": answer + budget,
		"messages":   messages,
		"stream":     true,
	}
	if len(system) > 0 {
		body["system"] = system
	}
	if thinking != nil {
		body["thinking"] = thinking
	}
	if len(req.Tools) > 0 {
		tools := make([]tool, 0, len(req.Tools))
		for _, t := range req.Tools {
			schema := t.InputSchema
			if len(schema) == 0 || string(schema) == "null" {
				schema = json.RawMessage(`{"type":"object","properties":{}}`)
			}
			tools = append(tools, tool{Name: t.Name, Description: t.Description, InputSchema: schema})
		}
		body["tools"] = tools
	}
	// Extended thinking takes no temperature or top_k, and top_p only
	// from 0.95 up: the settings are left out rather than failing the
	// request.
	if s.Temperature != nil && budget == 0 {
		body["temperature"] = *s.Temperature
	}
	if s.TopP != nil && (budget == 0 || *s.TopP >= 0.95) {
		body["top_p"] = *s.TopP
	}
	if s.TopK != nil && budget == 0 {
		body["top_k"] = *s.TopK
	}
	if len(s.StopSequences) > 0 {
		body["stop_sequences"] = s.StopSequences
	}
	if err := toolChoice(body, s.Extra["toolChoice"]); err != nil {
		return nil, err
	}
	for k, v := range opts {
		switch k {
		case "thinking":
		case "disableParallelToolUse":
			var off bool
			if json.Unmarshal(v, &off) == nil && off {
				tc, _ := body["tool_choice"].(map[string]any)
				if tc == nil {
					tc = map[string]any{"type": "auto"}
				}
				tc["disable_parallel_tool_use"] = true
				body["tool_choice"] = tc
			}
		default:
			body[k] = v
		}
	}
	return body, nil
}

// thinkingOption reads providerOptions.anthropic.thinking, accepting the
// AI SDK's budgetTokens for budget_tokens. It returns the parameter to send
// and its budget (0 unless enabled).
func thinkingOption(raw json.RawMessage) (any, int64, error) {
	var t map[string]any
	if err := json.Unmarshal(raw, &t); err != nil || t == nil {
		return nil, 0, fmt.Errorf("anthropic: providerOptions thinking must be an object: %s", raw)
	}
	if v, ok := t["budgetTokens"]; ok {
		delete(t, "budgetTokens")
		if _, set := t["budget_tokens"]; !set {
			t["budget_tokens"] = v
		}
	}
	var budget int64
	if t["type"] == "enabled" {
		if f, ok := t["budget_tokens"].(float64); ok && f > 0 {
			budget = int64(f)
		}
	}
	return t, budget, nil
}

// toolChoice maps the AI SDK toolChoice setting (GenerationSettings.Extra).
func toolChoice(body map[string]any, raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	var name string
	if json.Unmarshal(raw, &name) == nil {
		switch name {
		case "auto":
			body["tool_choice"] = map[string]any{"type": "auto"}
		case "required":
			body["tool_choice"] = map[string]any{"type": "any"}
		case "none":
			body["tool_choice"] = map[string]any{"type": "none"}
		default:
			return fmt.Errorf("anthropic: toolChoice %q: %w", name, ErrUnsupportedContent)
		}
		return nil
	}
	var choice struct {
		Type     string `json:"type"`
		ToolName string `json:"toolName"`
	}
	if err := json.Unmarshal(raw, &choice); err != nil || choice.Type != "tool" || choice.ToolName == "" {
		return fmt.Errorf("anthropic: toolChoice %s: %w", raw, ErrUnsupportedContent)
	}
	body["tool_choice"] = map[string]any{"type": "tool", "name": choice.ToolName}
	return nil
}

// convert maps the system prompt and the model messages. System messages
// anywhere in the prompt join the top-level system; tool results travel
// in user messages; adjacent messages of one role are merged, as the API
// alternates user and assistant turns. Unsigned reasoning,
// provider-executed tool calls and their results, approval parts and
// assistant files are left out.
func convert(req harness.Request) ([]block, []message, error) {
	var system []block
	if req.System != "" {
		system = append(system, block{"type": "text", "text": req.System})
	}
	var out []message
	add := func(role string, content []block) {
		if len(content) == 0 {
			return
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Content = append(out[n-1].Content, content...)
			return
		}
		out = append(out, message{Role: role, Content: content})
	}
	for i, msg := range req.Messages {
		switch msg.Role {
		case harness.ModelRoleSystem:
			for _, p := range msg.Content {
				if p.Type == harness.ContentText && p.Text != "" {
					system = append(system, withCache(block{"type": "text", "text": p.Text}, p))
				}
			}
		case harness.ModelRoleUser:
			var content []block
			for _, p := range msg.Content {
				switch p.Type {
				case harness.ContentText:
					if p.Text != "" {
						content = append(content, withCache(block{"type": "text", "text": p.Text}, p))
					}
				case harness.ContentFile:
					b, err := fileBlock(p)
					if err != nil {
						return nil, nil, fmt.Errorf("anthropic: message %d: %w", i, err)
					}
					content = append(content, withCache(b, p))
				}
			}
			add("user", content)
		case harness.ModelRoleAssistant:
			var content []block
			for _, p := range msg.Content {
				switch p.Type {
				case harness.ContentText:
					if p.Text != "" {
						content = append(content, withCache(block{"type": "text", "text": p.Text}, p))
					}
				case harness.ContentReasoning:
					if b := thinkingBlock(p); b != nil {
						content = append(content, b)
					}
				case harness.ContentToolCall:
					if p.ProviderExecuted {
						continue
					}
					content = append(content, withCache(block{"type": "tool_use", "id": p.ToolCallID, "name": p.ToolName, "input": toolInput(p.Input)}, p))
				}
			}
			add("assistant", content)
		case harness.ModelRoleTool:
			var content []block
			for _, p := range msg.Content {
				if p.Type != harness.ContentToolResult || p.ProviderExecuted {
					continue
				}
				b := block{"type": "tool_result", "tool_use_id": p.ToolCallID, "content": resultText(p.Output)}
				if p.Output != nil && strings.HasPrefix(p.Output.Type, "error") {
					b["is_error"] = true
				}
				content = append(content, withCache(b, p))
			}
			add("user", content)
		default:
			return nil, nil, fmt.Errorf("anthropic: message %d: %w: %q", i, harness.ErrUnsupportedRole, msg.Role)
		}
	}
	return system, out, nil
}

// partOptions reads a part's providerOptions.anthropic.
func partOptions(p harness.ContentPart) map[string]json.RawMessage {
	if len(p.ProviderOptions) == 0 {
		return nil
	}
	var all map[string]map[string]json.RawMessage
	if json.Unmarshal(p.ProviderOptions, &all) != nil {
		return nil
	}
	return all["anthropic"]
}

// withCache copies a part's cache control (providerOptions.anthropic
// cacheControl, the AI SDK name, or cache_control) onto its block.
func withCache(b block, p harness.ContentPart) block {
	opts := partOptions(p)
	for _, k := range []string{"cacheControl", "cache_control"} {
		if v, ok := opts[k]; ok && len(v) > 0 && string(v) != "null" {
			b["cache_control"] = v
			break
		}
	}
	return b
}

// thinkingBlock returns a reasoning part as a thinking block when it
// carries the signature Anthropic issued (providerOptions.anthropic
// signature), or a redacted_thinking block for redactedData. Reasoning
// without either cannot be sent back and returns nil.
func thinkingBlock(p harness.ContentPart) block {
	opts := partOptions(p)
	var s string
	if json.Unmarshal(opts["redactedData"], &s) == nil && s != "" {
		return block{"type": "redacted_thinking", "data": s}
	}
	if json.Unmarshal(opts["signature"], &s) == nil && s != "" {
		return block{"type": "thinking", "thinking": p.Text, "signature": s}
	}
	return nil
}

// toolInput is a tool call's input as the object tool_use requires: an
// input that is not an object (the raw text of invalid arguments) is sent
// as {}.
func toolInput(in json.RawMessage) json.RawMessage {
	t := strings.TrimSpace(string(in))
	if strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		return json.RawMessage(t)
	}
	return json.RawMessage("{}")
}

func resultText(o *harness.ToolOutput) string {
	if o == nil {
		return ""
	}
	return o.Text()
}

// fileBlock maps a user file: images to image blocks, PDFs to document
// blocks (base64 from a data: URL, else by URL), plain text to a text
// document.
func fileBlock(p harness.ContentPart) (block, error) {
	mediaType, data, isData, err := parseDataURL(p.Data)
	if err != nil {
		return nil, err
	}
	if p.MediaType != "" {
		mediaType = p.MediaType
	}
	var source map[string]any
	switch {
	case isData:
		source = map[string]any{"type": "base64", "media_type": mediaType, "data": base64.StdEncoding.EncodeToString(data)}
	case strings.HasPrefix(p.Data, "https://") || strings.HasPrefix(p.Data, "http://"):
		source = map[string]any{"type": "url", "url": p.Data}
	default:
		return nil, fmt.Errorf("%w: a file that is neither a data: nor an http(s) URL", ErrUnsupportedContent)
	}
	switch {
	case strings.HasPrefix(mediaType, "image/"):
		return block{"type": "image", "source": source}, nil
	case mediaType == "application/pdf":
		b := block{"type": "document", "source": source}
		if p.Filename != "" {
			b["title"] = p.Filename
		}
		return b, nil
	case mediaType == "text/plain" && isData:
		b := block{"type": "document", "source": map[string]any{"type": "text", "media_type": "text/plain", "data": string(data)}}
		if p.Filename != "" {
			b["title"] = p.Filename
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w: a %q file", ErrUnsupportedContent, mediaType)
}

// parseDataURL decodes a data: URL (RFC 2397). isData is false for any
// other URL.
func parseDataURL(u string) (mediaType string, data []byte, isData bool, err error) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return "", nil, false, nil
	}
	meta, payload, ok := strings.Cut(rest, ",")
	if !ok {
		return "", nil, true, fmt.Errorf("%w: a malformed data: URL", ErrUnsupportedContent)
	}
	params := strings.Split(meta, ";")
	mediaType = strings.TrimSpace(params[0])
	isBase64 := false
	for _, p := range params[1:] {
		if strings.EqualFold(strings.TrimSpace(p), "base64") {
			isBase64 = true
		}
	}
	if isBase64 {
		data, err = base64.StdEncoding.DecodeString(payload)
		if err != nil {
			data, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(payload, "="))
		}
		if err != nil {
			return "", nil, true, fmt.Errorf("%w: a data: URL with bad base64: %w", ErrUnsupportedContent, err)
		}
		return mediaType, data, true, nil
	}
	s, err := url.PathUnescape(payload)
	if err != nil {
		return "", nil, true, fmt.Errorf("%w: a malformed data: URL: %w", ErrUnsupportedContent, err)
	}
	return mediaType, []byte(s), true, nil
}
