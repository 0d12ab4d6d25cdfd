package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/internal/provider"
	"github.com/a2-runtime/a2/harness/internal/sse"
	"github.com/a2-runtime/a2/protocol"
)

// Stream is the response of one messages request as AI SDK UI message
// chunks: start, start-step, a text, reasoning or tool input part per
// content block, finish-step, and finish with the finish reason and
// messageMetadata {"usage": {...}}.
//
// A thinking block ends with reasoning-end carrying providerMetadata
// {"anthropic": {"signature": ...}} (or {"redactedData": ...} for a
// redacted block), which the transcript keeps so the block can be sent
// back on the next step.
//
// Usage and FinishReason report the same values to the harness after the
// stream ended.
type Stream struct {
	core provider.Stream

	blocks  map[int]*contentBlock
	sawStop bool

	mu           sync.Mutex
	stopReason   string
	usage        usageJSON
	hasUsage     bool
	finishReason string
}

// Block kinds.
const (
	kindText = iota + 1
	kindThinking
	kindRedacted
	kindTool
)

// contentBlock is one open content block, keyed by its index.
type contentBlock struct {
	kind      int
	id        string // chunk ID, or the tool call ID
	name      string
	text      sse.UTF8Joiner
	args      []byte
	initial   json.RawMessage
	signature strings.Builder
	redacted  string
}

var _ harness.ReadyStream = (*Stream)(nil)

func newStream(ctx context.Context, body io.ReadCloser, generationID string) *Stream {
	s := &Stream{blocks: map[int]*contentBlock{}}
	s.core.Init(ctx, body, generationID, "anthropic", "message_stop", ErrStreamClosed,
		provider.Decoder{Handle: s.handle, Complete: func() bool { return s.sawStop }, Finish: s.finish})
	return s
}

// Close releases the connection. It is safe to call more than once and
// while Next blocks; Next then returns ErrStreamClosed.
func (s *Stream) Close() error { return s.core.Close() }

// Next returns the next chunk; io.EOF after finish; the context's error
// when ctx was cancelled; an *APIError for an error the server streamed;
// an error wrapping io.ErrUnexpectedEOF when the connection ended before
// the response did.
func (s *Stream) Next() (protocol.UIMessageChunk, error) { return s.core.Next() }

// Ready implements harness.ReadyStream: true only when Next returns at
// once (it decodes buffered events until one yields a chunk).
func (s *Stream) Ready() bool { return s.core.Ready() }

// Usage returns the token usage the server reported, and whether it
// reported any: inputTokens counts every prompt token (input_tokens plus
// cache writes and cache reads), cachedInputTokens the cache reads. It is
// complete once Next returned io.EOF.
func (s *Stream) Usage() (protocol.Usage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage.toUsage(), s.hasUsage
}

// FinishReason returns the AI SDK finish reason of the response ("stop",
// "length", "tool-calls", "content-filter" or "other"), or "" before the
// stream finished.
func (s *Stream) FinishReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finishReason
}

// event is any message stream event; the fields of each type are
// optional.
type event struct {
	Type    string `json:"type"`
	Message *struct {
		Usage *usageJSON `json:"usage"`
	} `json:"message"`
	Index        *int `json:"index"`
	ContentBlock *struct {
		Type      string          `json:"type"`
		Text      json.RawMessage `json:"text"`
		Thinking  json.RawMessage `json:"thinking"`
		Signature string          `json:"signature"`
		Data      string          `json:"data"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
	} `json:"content_block"`
	Delta *struct {
		Type        string          `json:"type"`
		Text        json.RawMessage `json:"text"`
		Thinking    json.RawMessage `json:"thinking"`
		Signature   string          `json:"signature"`
		PartialJSON json.RawMessage `json:"partial_json"`
		StopReason  string          `json:"stop_reason"`
	} `json:"delta"`
	Usage *usageJSON `json:"usage"`
}

// usageJSON is the usage object of message_start and message_delta; the
// counts in message_delta are cumulative.
type usageJSON struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
}

// merge takes the counts u reports.
func (u *usageJSON) merge(v *usageJSON) {
	if v.InputTokens != nil {
		u.InputTokens = v.InputTokens
	}
	if v.OutputTokens != nil {
		u.OutputTokens = v.OutputTokens
	}
	if v.CacheCreationInputTokens != nil {
		u.CacheCreationInputTokens = v.CacheCreationInputTokens
	}
	if v.CacheReadInputTokens != nil {
		u.CacheReadInputTokens = v.CacheReadInputTokens
	}
}

func (u usageJSON) toUsage() protocol.Usage {
	val := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	out := protocol.Usage{
		InputTokens:  val(u.InputTokens) + val(u.CacheCreationInputTokens) + val(u.CacheReadInputTokens),
		OutputTokens: val(u.OutputTokens),
	}
	out.TotalTokens = out.InputTokens + out.OutputTokens
	if u.CacheReadInputTokens != nil {
		v := *u.CacheReadInputTokens
		out.CachedInputTokens = &v
	}
	return out
}

func (s *Stream) setUsage(u *usageJSON) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.usage.merge(u)
	s.hasUsage = true
}

// handle decodes one event.
func (s *Stream) handle(sev sse.Event) error {
	data := bytes.TrimSpace(sev.Data)
	if len(data) == 0 {
		return nil
	}
	var ev event
	if err := json.Unmarshal(data, &ev); err != nil {
		if sev.Name == "error" {
			return streamError(data)
		}
		return fmt.Errorf("anthropic: decoding a stream event: %w", err)
	}
	typ := ev.Type
	if typ == "" {
		typ = sev.Name
	}
	switch typ {
	case "message_start":
		if ev.Message != nil && ev.Message.Usage != nil {
			s.setUsage(ev.Message.Usage)
		}
	case "content_block_start":
		if ev.Index != nil && ev.ContentBlock != nil {
			s.startBlock(*ev.Index, ev)
		}
	case "content_block_delta":
		if ev.Index != nil && ev.Delta != nil {
			s.blockDelta(*ev.Index, ev)
		}
	case "content_block_stop":
		if ev.Index != nil {
			s.stopBlock(*ev.Index)
		}
	case "message_delta":
		if ev.Delta != nil && ev.Delta.StopReason != "" {
			s.mu.Lock()
			s.stopReason = ev.Delta.StopReason
			s.mu.Unlock()
			s.sawStop = true
		}
		if ev.Usage != nil {
			s.setUsage(ev.Usage)
		}
	case "message_stop":
		s.finish()
	case "error":
		return streamError(data)
	}
	// ping and event types added later are ignored.
	return nil
}

func (s *Stream) startBlock(index int, ev event) {
	if old := s.blocks[index]; old != nil {
		s.stopBlock(index)
	}
	cb := ev.ContentBlock
	b := &contentBlock{}
	switch cb.Type {
	case "text":
		b.kind, b.id = kindText, s.core.NewID("t")
		s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkTextStart, ID: b.id})
		s.blocks[index] = b
		s.textDelta(b, cb.Text)
	case "thinking":
		b.kind, b.id = kindThinking, s.core.NewID("r")
		b.signature.WriteString(cb.Signature)
		s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkReasoningStart, ID: b.id})
		s.blocks[index] = b
		s.reasoningDelta(b, cb.Thinking)
	case "redacted_thinking":
		b.kind, b.id, b.redacted = kindRedacted, s.core.NewID("r"), cb.Data
		s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkReasoningStart, ID: b.id})
		s.blocks[index] = b
	case "tool_use":
		b.kind, b.id, b.name, b.initial = kindTool, cb.ID, cb.Name, cb.Input
		if b.id == "" {
			b.id = s.core.NewID("toolu_")
		}
		s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkToolInputStart, ToolCallID: b.id, ToolName: b.name})
		s.blocks[index] = b
	}
	// Server tool blocks (server_tool_use, web_search_tool_result, ...)
	// are not mapped: A2 runs the tools it offers itself.
}

func (s *Stream) textDelta(b *contentBlock, raw json.RawMessage) {
	if t, _ := sse.RawString(raw); len(t) > 0 {
		if d := b.text.Push(t); d != "" {
			s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkTextDelta, ID: b.id, Delta: d})
		}
	}
}

func (s *Stream) reasoningDelta(b *contentBlock, raw json.RawMessage) {
	if t, _ := sse.RawString(raw); len(t) > 0 {
		if d := b.text.Push(t); d != "" {
			s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkReasoningDelta, ID: b.id, Delta: d})
		}
	}
}

func (s *Stream) blockDelta(index int, ev event) {
	b := s.blocks[index]
	if b == nil {
		return
	}
	d := ev.Delta
	switch {
	case d.Type == "text_delta" && b.kind == kindText:
		s.textDelta(b, d.Text)
	case d.Type == "thinking_delta" && b.kind == kindThinking:
		s.reasoningDelta(b, d.Thinking)
	case d.Type == "signature_delta" && b.kind == kindThinking:
		b.signature.WriteString(d.Signature)
	case d.Type == "input_json_delta" && b.kind == kindTool:
		part, err := sse.RawString(d.PartialJSON)
		if err != nil {
			return
		}
		b.args = append(b.args, part...)
		if t := b.text.Push(part); t != "" {
			s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkToolInputDelta, ToolCallID: b.id, InputTextDelta: t})
		}
	}
}

func (s *Stream) stopBlock(index int) {
	b := s.blocks[index]
	if b == nil {
		return
	}
	delete(s.blocks, index)
	rest := b.text.Flush()
	switch b.kind {
	case kindText:
		if rest != "" {
			s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkTextDelta, ID: b.id, Delta: rest})
		}
		s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkTextEnd, ID: b.id})
	case kindThinking:
		if rest != "" {
			s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkReasoningDelta, ID: b.id, Delta: rest})
		}
		end := protocol.UIMessageChunk{Type: protocol.ChunkReasoningEnd, ID: b.id}
		if sig := b.signature.String(); sig != "" {
			end.ProviderMetadata = anthropicMetadata("signature", sig)
		}
		s.core.Emit(end)
	case kindRedacted:
		s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkReasoningEnd, ID: b.id, ProviderMetadata: anthropicMetadata("redactedData", b.redacted)})
	case kindTool:
		if rest != "" {
			s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkToolInputDelta, ToolCallID: b.id, InputTextDelta: rest})
		}
		args := b.args
		if len(bytes.TrimSpace(args)) == 0 {
			args = b.initial
		}
		s.core.Emit(toolInputChunk(b.id, b.name, args))
	}
}

func anthropicMetadata(key, value string) json.RawMessage {
	raw, err := json.Marshal(map[string]map[string]string{"anthropic": {key: value}})
	if err != nil {
		return nil
	}
	return raw
}

// toolInputChunk is the final chunk of a tool call's input:
// tool-input-available with the parsed input, or tool-input-error when the
// streamed JSON does not parse.
func toolInputChunk(id, name string, args []byte) protocol.UIMessageChunk {
	text := strings.ToValidUTF8(string(args), "\uFFFD")
	trimmed := strings.TrimSpace(text)
	if trimmed == "" || trimmed == "null" {
		return protocol.UIMessageChunk{Type: protocol.ChunkToolInputAvailable, ToolCallID: id, ToolName: name, Input: json.RawMessage("{}")}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(trimmed)); err != nil {
		raw, _ := json.Marshal(text)
		return protocol.UIMessageChunk{Type: protocol.ChunkToolInputError, ToolCallID: id, ToolName: name, Input: raw,
			ErrorText: fmt.Sprintf("the tool input is not valid JSON: %v", err)}
	}
	return protocol.UIMessageChunk{Type: protocol.ChunkToolInputAvailable, ToolCallID: id, ToolName: name, Input: compact.Bytes()}
}

// finish closes blocks left open, ends the step and the message.
func (s *Stream) finish() {
	if s.core.Ended() {
		return
	}
	open := make([]int, 0, len(s.blocks))
	for i := range s.blocks {
		open = append(open, i)
	}
	sort.Ints(open)
	for _, i := range open {
		s.stopBlock(i)
	}
	s.mu.Lock()
	s.finishReason = mapStopReason(s.stopReason)
	reason, usage := s.finishReason, s.usage.toUsage()
	has := s.hasUsage
	s.mu.Unlock()
	if has {
		s.core.End(reason, &usage)
	} else {
		s.core.End(reason, nil)
	}
}

// mapStopReason maps a stop_reason to the AI SDK finish reason.
func mapStopReason(r string) string {
	switch r {
	case "end_turn", "stop_sequence":
		return "stop"
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool-calls"
	case "refusal":
		return "content-filter"
	}
	return "other"
}
