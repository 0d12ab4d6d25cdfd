// Package script is a deterministic model for tests: a JSON script decides,
// for each model call, the chunks the model streams (text and reasoning in
// chunks of a given size, tool calls with inputs, usage, finish reason, a
// provider error), with optional delays and named gates that hold the
// stream until released. docs/testing.md documents the format.
package script

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/protocol"
)

// Script is the whole script.
type Script struct {
	// Replies are matched against each model call in order: the first reply
	// whose Match is contained in the latest user text (case-insensitive),
	// or the next unmatched reply in order when none has a Match that fits.
	Replies []Reply `json:"replies"`
	// Default answers a call that no reply fits; without it such a call
	// fails with a provider error naming the text.
	Default *Reply `json:"default,omitempty"`
}

// Reply is what the model does for one call.
type Reply struct {
	// Match selects the reply by the latest user text; empty matches by
	// order.
	Match string `json:"match,omitempty"`
	// Reasoning and Text are streamed in chunks of ChunkSize runes (default:
	// one word per chunk).
	Reasoning string `json:"reasoning,omitempty"`
	Text      string `json:"text,omitempty"`
	ChunkSize int    `json:"chunkSize,omitempty"`
	// DelayMs waits before every chunk.
	DelayMs int `json:"delayMs,omitempty"`
	// Gate holds the stream after its first text chunk until released.
	Gate string `json:"gate,omitempty"`
	// ToolCalls are called after the text, in order.
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// Usage is reported at the end (default: bytes/4 of prompt and text).
	Usage *protocol.Usage `json:"usage,omitempty"`
	// FinishReason defaults to "tool-calls" with tool calls, else "stop".
	FinishReason string `json:"finishReason,omitempty"`
	// Error fails the call with a provider error after the text and the
	// tool calls.
	Error string `json:"error,omitempty"`
	// Then is the reply to the continuation after this call's tool results
	// (a reply chain); continuations without it use the script order.
	Then *Reply `json:"then,omitempty"`
}

// ToolCall is a tool call the model makes.
type ToolCall struct {
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// Parse reads a script.
func Parse(b []byte) (*Script, error) {
	var s Script
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	return &s, nil
}

// Load reads a script file.
func Load(path string) (*Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	return Parse(b)
}

// Model serves a script. It is safe for concurrent use by many sessions;
// replies are chosen per session (order counts per session).
type Model struct {
	script *Script
	mu     sync.Mutex
	used   map[string]map[int]bool // session -> reply index -> used
	next   map[string]*Reply       // session -> chained reply for the next call
	gates  map[string]chan struct{}
	calls  []harness.Request
	// unrecorded says Calls keeps nothing (StopRecording).
	unrecorded bool
	// sizes keeps, for each session, the serialized size of each message
	// of its last prompt, by position, for the default usage: a session's
	// settled messages come back in every later prompt with the same
	// content (harness.PromptCache), and marshaling the whole prompt at
	// every call made a long conversation's steps cost what its length did.
	sizes map[string][]sizeSlot
}

// sizeSlot is one message's size, known by its role and content slice (the
// slot holds the slice, so its array is not reused for other content while
// the slot lives).
type sizeSlot struct {
	first *harness.ContentPart
	n     int
	role  string
	size  int
}

// maxCalls bounds the requests a model keeps for Calls (a node serving
// the script model under load must not keep every prompt), and maxSizes
// the entries of its size cache.
const (
	maxCalls = 1024
	maxSizes = 4096 // sessions
)

// New returns a model serving s.
func New(s *Script) *Model {
	return &Model{script: s, used: map[string]map[int]bool{}, next: map[string]*Reply{}, gates: map[string]chan struct{}{}}
}

// Release opens a gate: streams held at it continue, and later ones pass.
func (m *Model) Release(gate string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch, ok := m.gates[gate]
	if !ok {
		ch = make(chan struct{})
		m.gates[gate] = ch
	}
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (m *Model) gate(name string) chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch, ok := m.gates[name]
	if !ok {
		ch = make(chan struct{})
		m.gates[name] = ch
	}
	return ch
}

// StopRecording makes the model keep no record of its requests (Calls is
// then empty): a record copies each prompt, which a node in test mode and
// a benchmark need not pay for. It returns m.
func (m *Model) StopRecording() *Model {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unrecorded, m.calls = true, nil
	return m
}

// Calls returns the requests the model received, in order: the last
// maxCalls of them (none after StopRecording).
func (m *Model) Calls() []harness.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]harness.Request(nil), m.calls...)
}

func (m *Model) choose(req harness.Request) (*Reply, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.calls) == maxCalls {
		m.calls = append(m.calls[:0], m.calls[maxCalls/2:]...)
		clear(m.calls[maxCalls/2 : maxCalls])
	}
	if !m.unrecorded {
		// The prompt is lent for the stream's life (harness.Request): the
		// record keeps a copy.
		rec := req
		rec.Messages = slices.Clone(req.Messages)
		m.calls = append(m.calls, rec)
	}
	last := req.Messages
	continuation := len(last) > 0 && last[len(last)-1].Role == harness.ModelRoleTool
	if continuation {
		// The reply to a continuation is the Then of the reply whose tool
		// calls it answers: found from the prompt, so a fresh model (after a
		// restart) continues the same chain.
		if r := m.thenFor(req); r != nil {
			delete(m.next, req.SessionID)
			m.remember(req.SessionID, r)
			return r, nil
		}
		if r := m.next[req.SessionID]; r != nil {
			delete(m.next, req.SessionID)
			m.remember(req.SessionID, r)
			return r, nil
		}
	}
	// A session has an entry only once it used a reply of the list (a
	// node serving the default reply to many sessions keeps none).
	used := m.used[req.SessionID]
	use := func(i int) {
		if used == nil {
			used = map[int]bool{}
			m.used[req.SessionID] = used
		}
		used[i] = true
	}
	text := strings.ToLower(req.LatestUserText())
	for i := range m.script.Replies {
		r := &m.script.Replies[i]
		if !used[i] && r.Match != "" && strings.Contains(text, strings.ToLower(r.Match)) {
			use(i)
			m.remember(req.SessionID, r)
			return r, nil
		}
	}
	for i := range m.script.Replies {
		r := &m.script.Replies[i]
		if !used[i] && r.Match == "" {
			use(i)
			m.remember(req.SessionID, r)
			return r, nil
		}
	}
	if m.script.Default != nil {
		m.remember(req.SessionID, m.script.Default)
		return m.script.Default, nil
	}
	return nil, fmt.Errorf("script: no reply for %q", text)
}

// thenFor finds the reply whose tool calls the prompt's last tool results
// answer (by explicit call ID) and returns its Then.
func (m *Model) thenFor(req harness.Request) *Reply {
	answered := map[string]bool{}
	last := req.Messages[len(req.Messages)-1]
	for _, p := range last.Content {
		if p.ToolCallID != "" {
			answered[p.ToolCallID] = true
		}
	}
	search := func(r *Reply) *Reply {
		for ; r != nil; r = r.Then {
			for _, tc := range r.ToolCalls {
				if tc.ID != "" && answered[tc.ID] {
					return r.Then
				}
			}
		}
		return nil
	}
	for i := range m.script.Replies {
		if r := search(&m.script.Replies[i]); r != nil {
			return r
		}
	}
	return search(m.script.Default)
}

func (m *Model) remember(session string, r *Reply) {
	if r.Then != nil {
		m.next[session] = r.Then
	}
}

// Stream implements harness.Model.
func (m *Model) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	r, err := m.choose(req)
	if err != nil {
		return nil, err
	}
	size := func(messages []harness.ModelMessage) int { return m.promptSize(req.SessionID, messages) }
	return &stream{ctx: ctx, m: m, chunks: plan(r, req, size), reply: r}, nil
}

// promptSize is len(json.Marshal(messages)), from the sizes of the
// session's last prompt where its messages are the same.
func (m *Model) promptSize(session string, messages []harness.ModelMessage) int {
	if messages == nil {
		return len("null")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sizes == nil || len(m.sizes) >= maxSizes {
		m.sizes = map[string][]sizeSlot{}
	}
	slots := m.sizes[session]
	if len(slots) > len(messages) {
		clear(slots[len(messages):])
		slots = slots[:len(messages)]
	}
	n := len("[]") + max(len(messages)-1, 0) // the brackets and commas
	for i := range messages {
		msg := &messages[i]
		var k sizeSlot
		if len(msg.Content) > 0 {
			k = sizeSlot{first: &msg.Content[0], n: len(msg.Content), role: msg.Role}
		}
		if i < len(slots) && k.first != nil && slots[i].first == k.first && slots[i].n == k.n && slots[i].role == k.role {
			n += slots[i].size
			continue
		}
		b, _ := json.Marshal(msg)
		k.size = len(b)
		if i < len(slots) {
			slots[i] = k
		} else {
			slots = append(slots, k)
		}
		n += len(b)
	}
	m.sizes[session] = slots
	return n
}

// ProviderError is the error of a scripted provider failure.
type ProviderError struct{ Message string }

func (e *ProviderError) Error() string { return "the provider failed: " + e.Message }

type planned struct {
	chunk protocol.UIMessageChunk
	gate  string
	err   error
}

// plan lays out the chunks of a reply. It sizes its slice once and fills
// each chunk in place: a chunk is a large struct, and a lane's goroutine
// starts with a small stack (a chunk literal per call grew it every step).
func plan(r *Reply, req harness.Request, promptSize func([]harness.ModelMessage) int) []planned {
	var reasoning, text []string
	if r.Reasoning != "" {
		reasoning = split(r.Reasoning, r.ChunkSize)
	}
	if r.Text != "" {
		text = split(r.Text, r.ChunkSize)
	}
	out := plannedOf(2 + len(reasoning) + 2 + len(text) + 2 + 1 + 3*len(r.ToolCalls) + 2)
	add := func(typ string) *protocol.UIMessageChunk {
		out = append(out, planned{})
		c := &out[len(out)-1].chunk
		c.Type = typ
		return c
	}
	add(protocol.ChunkStart)
	add(protocol.ChunkStartStep)
	if r.Reasoning != "" {
		add(protocol.ChunkReasoningStart).ID = "r0"
		for _, piece := range reasoning {
			c := add(protocol.ChunkReasoningDelta)
			c.ID, c.Delta = "r0", piece
		}
		add(protocol.ChunkReasoningEnd).ID = "r0"
	}
	if r.Text != "" {
		add(protocol.ChunkTextStart).ID = "t0"
		for i, piece := range text {
			c := add(protocol.ChunkTextDelta)
			c.ID, c.Delta = "t0", piece
			if i == 0 && r.Gate != "" {
				out = append(out, planned{gate: r.Gate})
			}
		}
		add(protocol.ChunkTextEnd).ID = "t0"
	} else if r.Gate != "" {
		out = append(out, planned{gate: r.Gate})
	}
	for i, tc := range r.ToolCalls {
		id := tc.ID
		if id == "" {
			id = "call-" + req.GenerationID + "-" + strconv.Itoa(i)
		}
		input := tc.Input
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		c := add(protocol.ChunkToolInputStart)
		c.ToolCallID, c.ToolName = id, tc.Name
		c = add(protocol.ChunkToolInputDelta)
		c.ToolCallID, c.InputTextDelta = id, string(input)
		c = add(protocol.ChunkToolInputAvailable)
		c.ToolCallID, c.ToolName, c.Input = id, tc.Name, input
	}
	if r.Error != "" {
		out = append(out, planned{err: &ProviderError{Message: r.Error}})
		return out
	}
	finish := r.FinishReason
	if finish == "" {
		finish = "stop"
		if len(r.ToolCalls) > 0 {
			finish = "tool-calls"
		}
	}
	usage := r.Usage
	if usage == nil {
		in := int64(promptSize(req.Messages)+len(req.System)+3) / 4
		outTok := int64(len(r.Text)+len(r.Reasoning)+3) / 4
		usage = &protocol.Usage{InputTokens: in, OutputTokens: outTok, TotalTokens: in + outTok}
	}
	meta, _ := json.Marshal(map[string]any{"usage": usage})
	add(protocol.ChunkFinishStep)
	c := add(protocol.ChunkFinish)
	c.FinishReason, c.MessageMeta = finish, meta
	return out
}

// split cuts text into pieces of n runes, or into words (with their
// trailing space) when n is 0.
func split(text string, n int) []string {
	if n <= 0 {
		return strings.SplitAfter(text, " ")
	}
	var out []string
	r := []rune(text)
	for len(r) > 0 {
		k := n
		if k > len(r) {
			k = len(r)
		}
		out = append(out, string(r[:k]))
		r = r[k:]
	}
	return out
}

type stream struct {
	ctx    context.Context
	m      *Model
	chunks []planned
	reply  *Reply
	pos    int
	closed bool
}

// Next implements harness.Stream.
func (s *stream) Next() (protocol.UIMessageChunk, error) {
	for {
		if s.closed {
			return protocol.UIMessageChunk{}, errors.New("script: stream closed")
		}
		if err := s.ctx.Err(); err != nil {
			return protocol.UIMessageChunk{}, context.Cause(s.ctx)
		}
		if s.pos >= len(s.chunks) {
			return protocol.UIMessageChunk{}, io.EOF
		}
		p := &s.chunks[s.pos]
		s.pos++
		if p.gate != "" {
			select {
			case <-s.m.gate(p.gate):
			case <-s.ctx.Done():
				return protocol.UIMessageChunk{}, context.Cause(s.ctx)
			}
			continue
		}
		if p.err != nil {
			return protocol.UIMessageChunk{}, p.err
		}
		if s.reply.DelayMs > 0 {
			t := time.NewTimer(time.Duration(s.reply.DelayMs) * time.Millisecond)
			select {
			case <-t.C:
			case <-s.ctx.Done():
				t.Stop()
				return protocol.UIMessageChunk{}, context.Cause(s.ctx)
			}
		}
		return p.chunk, nil
	}
}

// Ready implements harness.ReadyStream: the next chunk comes without a
// delay and is not held by a gate that is still closed.
func (s *stream) Ready() bool {
	if s.closed || s.pos >= len(s.chunks) || s.reply.DelayMs > 0 {
		return false
	}
	if g := s.chunks[s.pos].gate; g != "" {
		select {
		case <-s.m.gate(g):
		default:
			return false
		}
	}
	return true
}

// Close implements harness.Stream. The plan goes back to the pool: Next
// hands out copies of its chunks, and nothing reads it after Close.
func (s *stream) Close() error {
	if !s.closed {
		s.closed = true
		clear(s.chunks)
		p := s.chunks[:0]
		plans.Put(&p)
		s.chunks = nil
	}
	return nil
}

// plans recycles the plans of closed streams: a plan is a few hundred
// bytes a chunk (protocol.UIMessageChunk is a large struct), and a fresh
// one per call was a tenth of what a benchmark's node allocated, which a
// provider's client, building each chunk as it reads it, does not
// allocate twice.
var plans sync.Pool // of *[]planned

// plannedOf returns an empty plan with room for n chunks.
func plannedOf(n int) []planned {
	if p, ok := plans.Get().(*[]planned); ok && cap(*p) >= n {
		return (*p)[:0]
	}
	return make([]planned, 0, n)
}

// UsageOf reads the usage a stream reported on its finish chunk.
func UsageOf(c protocol.UIMessageChunk) *protocol.Usage {
	if c.Type != protocol.ChunkFinish || len(c.MessageMeta) == 0 {
		return nil
	}
	var m struct {
		Usage *protocol.Usage `json:"usage"`
	}
	if json.Unmarshal(c.MessageMeta, &m) != nil {
		return nil
	}
	return m.Usage
}
