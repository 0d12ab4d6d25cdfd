package openai

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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

// Stream is the response of one chat completions request as AI SDK UI
// message chunks: start, start-step, the text, reasoning and tool input
// chunks, finish-step, and finish with the finish reason and
// messageMetadata {"usage": {...}} when the server reported usage.
//
// Usage and FinishReason report the same values to the harness after the
// stream ended (the harness records usage on ai.generation.completed).
type Stream struct {
	core provider.Stream

	textID      string
	reasoningID string
	text        sse.UTF8Joiner
	reasoning   sse.UTF8Joiner

	tools     map[int]*toolCall
	lastIndex int
	finalized bool

	mu           sync.Mutex
	finishRaw    string
	sawFinish    bool
	usage        protocol.Usage
	hasUsage     bool
	finishReason string
}

// toolCall is one streamed tool call, keyed by its index.
type toolCall struct {
	index   int
	id      string
	name    string
	args    []byte         // every argument byte received
	pending []byte         // received before the call could start
	deltas  sse.UTF8Joiner // UTF-8-safe deltas
	started bool
}

var _ harness.ReadyStream = (*Stream)(nil)

func newStream(ctx context.Context, body io.ReadCloser, generationID string) *Stream {
	s := &Stream{tools: map[int]*toolCall{}, lastIndex: -1}
	s.core.Init(ctx, body, generationID, "openai", "the response finished", ErrStreamClosed,
		provider.Decoder{Handle: s.handle, Complete: func() bool { return s.sawFinish }, Finish: s.finish})
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
// reported any. It is complete once Next returned io.EOF.
func (s *Stream) Usage() (protocol.Usage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage, s.hasUsage
}

// FinishReason returns the AI SDK finish reason of the response ("stop",
// "length", "tool-calls", "content-filter", "error" or "other"), or ""
// before the stream finished.
func (s *Stream) FinishReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finishReason
}

// chunk is a streamed chat completion chunk, with the string fields that
// carry model output kept raw (see rawString).
type chunk struct {
	Choices []struct {
		Delta struct {
			Content          json.RawMessage `json:"content"`
			ReasoningContent json.RawMessage `json:"reasoning_content"`
			Reasoning        json.RawMessage `json:"reasoning"`
			ToolCalls        []struct {
				Index    *int   `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usageJSON      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

type usageJSON struct {
	PromptTokens        *int64 `json:"prompt_tokens"`
	CompletionTokens    *int64 `json:"completion_tokens"`
	TotalTokens         *int64 `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens *int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// handle decodes one event.
func (s *Stream) handle(ev sse.Event) error {
	data := bytes.TrimSpace(ev.Data)
	if ev.Name == "error" {
		return streamError(errorPayload(data))
	}
	if len(data) == 0 {
		return nil
	}
	if string(data) == "[DONE]" {
		s.finish()
		return nil
	}
	var c chunk
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("openai: decoding a stream chunk: %w", err)
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		return streamError(c.Error)
	}
	if c.Usage != nil {
		s.setUsage(c.Usage)
	}
	if len(c.Choices) == 0 || s.finalized {
		return nil
	}
	ch := &c.Choices[0]
	d := &ch.Delta
	reasoning, _ := sse.RawString(d.ReasoningContent)
	if len(reasoning) == 0 {
		reasoning, _ = sse.RawString(d.Reasoning)
	}
	if len(reasoning) > 0 {
		s.reasoningDelta(reasoning)
	}
	if text, _ := sse.RawString(d.Content); len(text) > 0 {
		s.textDelta(text)
	}
	for i := range d.ToolCalls {
		tc := &d.ToolCalls[i]
		args, err := sse.RawString(tc.Function.Arguments)
		if err != nil {
			// Some servers send the arguments as a JSON object.
			args = append([]byte(nil), bytes.TrimSpace(tc.Function.Arguments)...)
		}
		s.toolDelta(tc.Index, tc.ID, tc.Function.Name, args)
	}
	if ch.FinishReason != nil && *ch.FinishReason != "" {
		s.mu.Lock()
		s.finishRaw, s.sawFinish = *ch.FinishReason, true
		s.mu.Unlock()
		s.finalize()
	}
	return nil
}

// errorPayload unwraps {"error": {...}} when an error event carries it.
func errorPayload(data []byte) json.RawMessage {
	var wrapped struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &wrapped) == nil && len(wrapped.Error) > 0 {
		return wrapped.Error
	}
	return data
}

func (s *Stream) setUsage(u *usageJSON) {
	var out protocol.Usage
	if u.PromptTokens != nil {
		out.InputTokens = *u.PromptTokens
	}
	if u.CompletionTokens != nil {
		out.OutputTokens = *u.CompletionTokens
	}
	out.TotalTokens = out.InputTokens + out.OutputTokens
	if u.TotalTokens != nil {
		out.TotalTokens = *u.TotalTokens
	}
	if d := u.CompletionTokensDetails; d != nil && d.ReasoningTokens != nil {
		v := *d.ReasoningTokens
		out.ReasoningTokens = &v
	}
	if d := u.PromptTokensDetails; d != nil && d.CachedTokens != nil {
		v := *d.CachedTokens
		out.CachedInputTokens = &v
	}
	s.mu.Lock()
	s.usage, s.hasUsage = out, true
	s.mu.Unlock()
}

func (s *Stream) endText() {
	if s.textID == "" {
		return
	}
	if rest := s.text.Flush(); rest != "" {
		s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkTextDelta, ID: s.textID, Delta: rest})
	}
	s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkTextEnd, ID: s.textID})
	s.textID = ""
}

func (s *Stream) endReasoning() {
	if s.reasoningID == "" {
		return
	}
	if rest := s.reasoning.Flush(); rest != "" {
		s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkReasoningDelta, ID: s.reasoningID, Delta: rest})
	}
	s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkReasoningEnd, ID: s.reasoningID})
	s.reasoningID = ""
}

func (s *Stream) reasoningDelta(b []byte) {
	s.endText()
	if s.reasoningID == "" {
		s.reasoningID = s.core.NewID("r")
		s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkReasoningStart, ID: s.reasoningID})
	}
	if d := s.reasoning.Push(b); d != "" {
		s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkReasoningDelta, ID: s.reasoningID, Delta: d})
	}
}

func (s *Stream) textDelta(b []byte) {
	s.endReasoning()
	if s.textID == "" {
		s.textID = s.core.NewID("t")
		s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkTextStart, ID: s.textID})
	}
	if d := s.text.Push(b); d != "" {
		s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkTextDelta, ID: s.textID, Delta: d})
	}
}

// toolDelta applies one tool call fragment. Calls are keyed by index; a
// server that sends no index gets one per new call ID.
func (s *Stream) toolDelta(index *int, id, name string, args []byte) {
	var idx int
	switch {
	case index != nil:
		idx = *index
	case id != "" && (s.lastIndex < 0 || (s.tools[s.lastIndex].id != "" && s.tools[s.lastIndex].id != id)):
		idx = s.lastIndex + 1
	case s.lastIndex >= 0:
		idx = s.lastIndex
	}
	tc := s.tools[idx]
	if tc == nil {
		tc = &toolCall{index: idx}
		s.tools[idx] = tc
	}
	if idx > s.lastIndex {
		s.lastIndex = idx
	}
	if tc.id == "" && id != "" {
		tc.id = id
	}
	if tc.name == "" && name != "" {
		tc.name = name
	}
	tc.args = append(tc.args, args...)
	if !tc.started {
		tc.pending = append(tc.pending, args...)
		if tc.name == "" {
			return
		}
		s.startTool(tc)
		args, tc.pending = tc.pending, nil
	}
	if d := tc.deltas.Push(args); d != "" {
		s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkToolInputDelta, ToolCallID: tc.id, InputTextDelta: d})
	}
}

func (s *Stream) startTool(tc *toolCall) {
	s.endText()
	s.endReasoning()
	if tc.id == "" {
		tc.id = randomCallID()
	}
	tc.started = true
	s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkToolInputStart, ToolCallID: tc.id, ToolName: tc.name})
}

// randomCallID names a call the server sent without an ID; tool call IDs
// key the session's tools, so they must not repeat.
func randomCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// finalize closes the open parts and completes the tool calls in index
// order: tool-input-available with the parsed input, or tool-input-error
// when the arguments are not JSON.
func (s *Stream) finalize() {
	if s.finalized {
		return
	}
	s.finalized = true
	s.endReasoning()
	s.endText()
	indexes := make([]int, 0, len(s.tools))
	for i := range s.tools {
		indexes = append(indexes, i)
	}
	sort.Ints(indexes)
	for _, i := range indexes {
		tc := s.tools[i]
		if !tc.started {
			if tc.name == "" {
				continue // a fragment of nothing: no name ever came
			}
			s.startTool(tc)
		}
		if rest := tc.deltas.Flush(); rest != "" {
			s.core.Emit(protocol.UIMessageChunk{Type: protocol.ChunkToolInputDelta, ToolCallID: tc.id, InputTextDelta: rest})
		}
		s.core.Emit(toolInputChunk(tc.id, tc.name, tc.args))
	}
}

// toolInputChunk is the final chunk of a tool call's input.
func toolInputChunk(id, name string, args []byte) protocol.UIMessageChunk {
	text := strings.ToValidUTF8(string(args), "\uFFFD")
	trimmed := strings.TrimSpace(text)
	if trimmed == "" {
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

// finish ends the step and the message.
func (s *Stream) finish() {
	if s.core.Ended() {
		return
	}
	s.finalize()
	s.mu.Lock()
	s.finishReason = mapFinishReason(s.finishRaw)
	reason, u := s.finishReason, s.usage
	usage := &u
	if !s.hasUsage {
		usage = nil
	}
	s.mu.Unlock()
	s.core.End(reason, usage)
}

// mapFinishReason maps a chat completions finish_reason to the AI SDK's.
func mapFinishReason(r string) string {
	switch r {
	case "stop":
		return "stop"
	case "length":
		return "length"
	case "tool_calls", "function_call":
		return "tool-calls"
	case "content_filter":
		return "content-filter"
	case "error":
		return "error"
	}
	return "other"
}
