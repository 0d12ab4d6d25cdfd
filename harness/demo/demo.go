// Package demo is the model a node uses when no provider key is configured,
// so that a newcomer's first run works offline. It answers every message in
// a way that shows A2 working: the answer streams word by word at a pace a
// person can follow, a question about the time calls the current_time tool
// and arithmetic calls the calculator tool (both durable A2 tool calls),
// and the continuation answers from the tool's result.
//
// The model is deterministic: the same prompt gives the same chunks. Only
// the current_time tool reads the clock.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/protocol"
)

// ModelID is the model ID the node uses for the demo model.
const ModelID = "demo"

// DefaultWordDelay is the pause before each streamed word: slow enough to
// watch the answer arrive and to steer, queue behind or stop it by hand
// while it streams (a tool answer's first step takes about three seconds),
// fast enough not to bore.
const DefaultWordDelay = 80 * time.Millisecond

// whileTool is what the first step of a tool answer says after naming the
// tool: the moment to try the commands on a streaming answer.
const whileTool = " While this step streams, try the commands: /steer sends a note that takes over after this step, a plain message waits in the inbox, /pause now holds the turn and /stop ends it where you see it."

// The names of the tools the model calls when the request offers them;
// package tools/demotools defines tools of these names (the node gives
// them to its default agent).
const (
	ToolCurrentTime = "current_time"
	ToolCalculator  = "calculator"
)

// Model is the demo model; it implements harness.Model and is safe for
// concurrent use.
type Model struct {
	delay time.Duration
}

var _ harness.Model = (*Model)(nil)

// New returns the demo model, waiting wordDelay before each word it streams
// (0 streams at once, for tests).
func New(wordDelay time.Duration) *Model {
	if wordDelay < 0 {
		wordDelay = 0
	}
	return &Model{delay: wordDelay}
}

// Stream implements harness.Model.
func (m *Model) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	return &stream{ctx: ctx, delay: m.delay, chunks: plan(req)}, nil
}

// reply is what the model does for one call: text, then optional tool
// calls.
type reply struct {
	text  string
	calls []toolCall
}

type toolCall struct {
	name  string
	input json.RawMessage
}

// decide picks the reply to a prompt. A prompt ending with tool results is
// a continuation: it is answered from the results and never calls a tool
// again, so a turn always ends.
func decide(req harness.Request) reply {
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == harness.ModelRoleTool {
		return reply{text: answerFromResults(req.Messages[n-1])}
	}
	text := req.LatestUserText()
	lower := strings.ToLower(text)
	offers := map[string]bool{}
	for _, t := range req.Tools {
		offers[t.Name] = true
	}
	if expr := findExpression(text); expr != "" && offers[ToolCalculator] {
		in, _ := json.Marshal(map[string]string{"expression": expr})
		return reply{text: "Let me calculate " + expr + " with the calculator tool." + whileTool,
			calls: []toolCall{{name: ToolCalculator, input: in}}}
	}
	if asksTime.MatchString(lower) && offers[ToolCurrentTime] {
		return reply{text: "Let me check the clock with the current_time tool." + whileTool,
			calls: []toolCall{{name: ToolCurrentTime, input: json.RawMessage(`{}`)}}}
	}
	return reply{text: chat(text, lower, offers)}
}

var (
	asksTime   = regexp.MustCompile(`\b(time|clock|date|today)\b`)
	greeting   = regexp.MustCompile(`^\s*(hi|hello|hey|hallo|bonjour|good (morning|afternoon|evening))\b`)
	expression = regexp.MustCompile(`[-+(]*\s*[0-9.]+(\s*[-+*/×÷%^()]+\s*[-+(]*\s*[0-9.]+\)*)+\)*`)
)

// findExpression returns the arithmetic in a message ("calculate 2+3",
// "what is (2 + 3) * 4?"): the longest run of numbers joined by operators,
// or "".
func findExpression(text string) string {
	best := ""
	for _, m := range expression.FindAllString(text, -1) {
		m = strings.TrimSpace(m)
		if len(m) > len(best) {
			best = m
		}
	}
	return balance(best)
}

// balance trims unmatched parentheses at the ends of an expression cut out
// of a sentence ("(as 2+3)" gives "2+3").
func balance(expr string) string {
	for {
		open, close := strings.Count(expr, "("), strings.Count(expr, ")")
		switch {
		case open > close && strings.HasPrefix(expr, "("):
			expr = strings.TrimSpace(expr[1:])
		case close > open && strings.HasSuffix(expr, ")"):
			expr = strings.TrimSpace(expr[:len(expr)-1])
		default:
			return expr
		}
	}
}

// chat answers a message that asks for no tool.
func chat(text, lower string, offers map[string]bool) string {
	var b strings.Builder
	if greeting.MatchString(lower) {
		b.WriteString("Hello! ")
	} else if q := quote(text); q != "" {
		fmt.Fprintf(&b, "You said %s. ", q)
	}
	b.WriteString("I am A2's demo model: I run offline, so this first conversation needs no API key. ")
	b.WriteString("Every word you see is a durable event in this session's log: reload the page or reconnect your client and the answer resumes where you left it, with nothing lost or repeated. ")
	if offers[ToolCurrentTime] || offers[ToolCalculator] {
		b.WriteString("Ask me \"what time is it?\" or \"calculate (2+3)*4\" to watch a tool call run as durable work. ")
	}
	b.WriteString("To talk to a real model, start the node with OPENAI_API_KEY, ANTHROPIC_API_KEY or AI_GATEWAY_API_KEY set.")
	return b.String()
}

// quote returns text in quotes, shortened to 80 characters on one line.
func quote(text string) string {
	text = strings.Join(strings.Fields(text), " ")
	if text == "" {
		return ""
	}
	if r := []rune(text); len(r) > 80 {
		text = string(r[:77]) + "..."
	}
	return "\u201c" + text + "\u201d"
}

// formatNumber prints a result without a needless fraction: 5, not 5.0;
// 0.1, not 0.1000000001.
func formatNumber(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', 12, 64)
}

// answerFromResults answers a continuation from the tool results of the
// prompt's last message.
func answerFromResults(m harness.ModelMessage) string {
	var out []string
	for _, p := range m.Content {
		if p.Type != harness.ContentToolResult || p.Output == nil {
			continue
		}
		if p.Output.Type == "error-text" || p.Output.Type == "error-json" {
			out = append(out, fmt.Sprintf("The %s tool failed: %s.", p.ToolName, strings.TrimSuffix(p.Output.Text(), ".")))
			continue
		}
		switch p.ToolName {
		case ToolCurrentTime:
			var r struct{ Time, Timezone string } // {"time", "timezone"}, see tools/demotools
			if json.Unmarshal(p.Output.Value, &r) == nil {
				if t, err := time.Parse(time.RFC3339, r.Time); err == nil {
					out = append(out, fmt.Sprintf("It is %s (%s) on %s, according to the current_time tool.",
						t.Format("15:04"), r.Timezone, t.Format("Monday 2 January 2006")))
					continue
				}
			}
		case ToolCalculator:
			var r struct { // {"expression", "result"}
				Expression string
				Result     float64
			}
			if json.Unmarshal(p.Output.Value, &r) == nil {
				out = append(out, fmt.Sprintf("%s = %s, according to the calculator tool.", r.Expression, formatNumber(r.Result)))
				continue
			}
		}
		out = append(out, fmt.Sprintf("The %s tool answered %s.", p.ToolName, p.Output.Text()))
	}
	if len(out) == 0 {
		return "The tool call finished without a result I can read."
	}
	return strings.Join(out, " ") + " That tool call was recorded in the session log like everything else."
}

// plan lays out the chunks of the reply to req.
func plan(req harness.Request) []protocol.UIMessageChunk {
	r := decide(req)
	out := []protocol.UIMessageChunk{{Type: protocol.ChunkStart}, {Type: protocol.ChunkStartStep},
		{Type: protocol.ChunkTextStart, ID: "t0"}}
	for _, w := range strings.SplitAfter(r.text, " ") {
		out = append(out, protocol.UIMessageChunk{Type: protocol.ChunkTextDelta, ID: "t0", Delta: w})
	}
	out = append(out, protocol.UIMessageChunk{Type: protocol.ChunkTextEnd, ID: "t0"})
	for i, c := range r.calls {
		id := fmt.Sprintf("call-%s-%d", req.GenerationID, i)
		out = append(out,
			protocol.UIMessageChunk{Type: protocol.ChunkToolInputStart, ToolCallID: id, ToolName: c.name},
			protocol.UIMessageChunk{Type: protocol.ChunkToolInputDelta, ToolCallID: id, InputTextDelta: string(c.input)},
			protocol.UIMessageChunk{Type: protocol.ChunkToolInputAvailable, ToolCallID: id, ToolName: c.name, Input: c.input})
	}
	finish := "stop"
	if len(r.calls) > 0 {
		finish = "tool-calls"
	}
	prompt, _ := json.Marshal(req.Messages)
	in := int64(len(prompt)+len(req.System)+3) / 4
	outTok := int64(len(r.text)+3) / 4
	meta, _ := json.Marshal(map[string]any{"usage": protocol.Usage{InputTokens: in, OutputTokens: outTok, TotalTokens: in + outTok}})
	return append(out, protocol.UIMessageChunk{Type: protocol.ChunkFinishStep},
		protocol.UIMessageChunk{Type: protocol.ChunkFinish, FinishReason: finish, MessageMeta: meta})
}

type stream struct {
	ctx    context.Context
	delay  time.Duration
	chunks []protocol.UIMessageChunk
	pos    int
	closed bool
}

// Next implements harness.Stream: it waits the word delay before each
// text delta, and ends with the context's cause when cancelled.
func (s *stream) Next() (protocol.UIMessageChunk, error) {
	if s.closed {
		return protocol.UIMessageChunk{}, io.ErrClosedPipe
	}
	if s.ctx.Err() != nil {
		return protocol.UIMessageChunk{}, context.Cause(s.ctx)
	}
	if s.pos >= len(s.chunks) {
		return protocol.UIMessageChunk{}, io.EOF
	}
	c := s.chunks[s.pos]
	s.pos++
	if c.Type == protocol.ChunkTextDelta && s.delay > 0 {
		t := time.NewTimer(s.delay)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return protocol.UIMessageChunk{}, context.Cause(s.ctx)
		}
	}
	return c, nil
}

// Close implements harness.Stream.
func (s *stream) Close() error { s.closed = true; return nil }
