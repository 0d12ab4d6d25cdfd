package protocol

import (
	"encoding/json"
	"fmt"
)

// CompactionOptions are the static options of automatic compaction
// (harness.compaction of A2's TypeScript API, R-COMPACT-10). The zero value is
// "omitted": automatic for supported Gateway models, with the threshold from
// the model catalog.
type CompactionOptions struct {
	// Disabled turns compaction and model-metadata discovery off; recorded
	// summaries keep shaping later prompts (OQ-29).
	Disabled bool
	// ThresholdTokens overrides the default threshold; it must be a positive
	// safe integer (R-COMPACT-11). Setting it disables discovery (R-META-07).
	ThresholdTokens int64
	// Instructions are added to A2's summary prompt (R-COMPACT-12).
	Instructions string
}

// maxSafeInteger is 2^53-1, JavaScript's largest safe integer.
const maxSafeInteger = 1<<53 - 1

// Validate checks the options at construction (R-COMPACT-15).
func (o CompactionOptions) Validate() error {
	if o.ThresholdTokens < 0 || o.ThresholdTokens > maxSafeInteger {
		return configErr("harness.compaction.thresholdTokens", "must be a positive safe integer (1 to 2^53-1), not %d", o.ThresholdTokens)
	}
	if o.Disabled && (o.ThresholdTokens != 0 || o.Instructions != "") {
		return configErr("harness.compaction", "false takes no thresholdTokens or instructions")
	}
	return nil
}

// Discovery reports whether the options ask for model-metadata lookups
// (R-META-07): only automatic compaction without an explicit threshold.
func (o CompactionOptions) Discovery() bool { return !o.Disabled && o.ThresholdTokens == 0 }

// DefaultThreshold is the default compaction threshold (R-COMPACT-18,
// OQ-24): 75% of the context window, lowered to leave room for a larger
// output allowance (maxOutputTokens, 0 when unset).
func DefaultThreshold(contextWindow, maxOutputTokens int64) int64 {
	t := contextWindow * 3 / 4
	if maxOutputTokens > 0 && contextWindow-maxOutputTokens < t {
		t = contextWindow - maxOutputTokens
		if t < 1 {
			t = 1
		}
	}
	return t
}

// EstimateBytes is the size of a prompt for the compaction estimate
// (R-COMPACT-19): the serialized UTF-8 bytes of the messages, the tool
// definitions and the instructions. Provider metadata of messages and parts
// is excluded (it still reaches the model unchanged).
func EstimateBytes(messages []TranscriptMessage, tools json.RawMessage, instructions string) int64 {
	n := int64(len(tools)) + int64(len(instructions))
	for _, m := range messages {
		n += MessageBytes(m)
	}
	return n
}

// MessageBytes is one message's share of EstimateBytes: its serialized
// size without provider metadata (0 for a message that does not
// serialize).
//
// It is counted as it is encoded, not kept, and the parts are copied (to
// leave their metadata out) only when a part has some: a step sizes every
// new message of its prompt, and the copy of the parts and the encoded
// bytes were half of what that allocated.
func MessageBytes(m TranscriptMessage) int64 {
	if hasPartMetadata(m.Parts) {
		m.Parts = append([]Part(nil), m.Parts...)
		for i := range m.Parts {
			p := &m.Parts[i]
			p.ProviderMetadata, p.CallProviderMetadata, p.ResultProviderMetadata = nil, nil, nil
		}
	}
	var n byteCount
	if err := json.NewEncoder(&n).Encode(m); err != nil {
		return 0
	}
	return int64(n) - 1 // Encode ends the value with a newline
}

func hasPartMetadata(parts []Part) bool {
	for i := range parts {
		p := &parts[i]
		if len(p.ProviderMetadata) > 0 || len(p.CallProviderMetadata) > 0 || len(p.ResultProviderMetadata) > 0 {
			return true
		}
	}
	return false
}

// byteCount is a writer that counts what is written to it.
type byteCount int64

func (c *byteCount) Write(b []byte) (int, error) {
	*c += byteCount(len(b))
	return len(b), nil
}

// TokensOf is the uncalibrated estimate: bytes divided by four, rounded up.
func TokensOf(bytes int64) int64 { return (bytes + 3) / 4 }

// Calibration is what the previous same-model completion reported: the
// prompt's size in bytes and the input tokens the provider counted
// (R-COMPACT-20). AIState.Calibration holds it.
type Calibration struct {
	Model       string `json:"model"`
	Bytes       int64  `json:"bytes"`
	InputTokens int64  `json:"inputTokens"`
}

// CalibratedTokens estimates a prompt of `bytes` for `model` (OQ-25): the
// previous same-model completion's reported input tokens plus the growth
// since, bytes/4; else the raw estimate. A smaller prompt, a retry, a
// compaction or another model drops the calibration.
func CalibratedTokens(bytes int64, model string, prev *Calibration) int64 {
	if prev == nil || prev.Model != model || bytes < prev.Bytes || prev.InputTokens <= 0 {
		return TokensOf(bytes)
	}
	return prev.InputTokens + TokensOf(bytes-prev.Bytes)
}

// CompactionDecision is the outcome of ShouldCompact.
type CompactionDecision struct {
	Compact bool
	// Deferred says why a compaction that the size calls for waits (the step
	// then runs uncompacted, OQ-26); empty when none.
	Deferred        string
	InputTokens     int64
	ThresholdTokens int64
}

// ShouldCompact decides whether the step about to run compacts first
// (R-COMPACT-24..26, OQ-25, OQ-26). inputTokens is the calibrated estimate
// of its prompt; threshold the configured or default threshold, 0 when
// unknown (before the catalog lookup lands no session compacts,
// R-COMPACT-23). Compaction happens when the estimate crosses the threshold
// (strictly) and defers while an earlier tool exchange has no final result,
// while A2-owned tool work of any turn has not settled (including stopped
// or superseded turns), and while dead-lettered tool work awaits repair.
func ShouldCompact(s *AIState, inputTokens, threshold int64, deadLettered bool) CompactionDecision {
	if threshold <= 0 || inputTokens <= threshold {
		return CompactionDecision{InputTokens: inputTokens, ThresholdTokens: threshold}
	}
	return CompactionDecide(inputTokens, threshold, CompactionDeferral(s, deadLettered))
}

// CompactionDecide is ShouldCompact with what defers a compaction already
// known (CompactionDeferral, "" for nothing): a model step has it from the
// state at its start.
func CompactionDecide(inputTokens, threshold int64, deferral string) CompactionDecision {
	d := CompactionDecision{InputTokens: inputTokens, ThresholdTokens: threshold}
	if threshold <= 0 || inputTokens <= threshold {
		return d
	}
	d.Deferred = deferral
	d.Compact = d.Deferred == ""
	return d
}

// CompactionDeferral names what defers any compaction now, custom policies
// included, or "": a summary must never split a tool call from its result
// nor race A2-owned tool work (R-COMPACT-24..26).
func CompactionDeferral(s *AIState, deadLettered bool) string {
	return deferral(deadLettered, s.unsettledExchange, s.unsettledWork)
}

// deferral is the reason a compaction defers, from whether dead-lettered
// work awaits repair and, asked in this order and only when needed, a tool
// call without a final result and unsettled tool work ("" for none).
func deferral(deadLettered bool, exchange, work func() string) string {
	if deadLettered {
		return "dead-lettered tool work awaits repair"
	}
	if id := exchange(); id != "" {
		return "tool call " + id + " has no final result"
	}
	if id := work(); id != "" {
		return "tool work " + id + " has not settled"
	}
	return ""
}

// unsettledExchange returns a tool call of the transcript without a final
// result, or "".
func (s *AIState) unsettledExchange() string {
	for i := range s.Messages {
		if id := unsettledCall(&s.Messages[i]); id != "" {
			return id
		}
	}
	return ""
}

// unsettledCall returns a tool call of m without a final result, or "".
func unsettledCall(m *TranscriptMessage) string {
	for _, p := range m.Parts {
		if !p.IsToolPart() {
			continue
		}
		switch p.State {
		case ToolOutputAvailable:
			if p.Preliminary != nil && *p.Preliminary {
				return p.ToolCallID
			}
		case ToolOutputError, ToolOutputDenied:
		default:
			return p.ToolCallID
		}
	}
	return ""
}

// unsettledWork returns a tool call whose A2-owned execution has not
// settled, in any turn, or "": the first by ID, from the writer's index
// when s keeps one.
func (s *AIState) unsettledWork() string {
	if x := s.index(); x != nil {
		first := ""
		for id := range x.unsettled {
			if first == "" || id < first {
				first = id
			}
		}
		return first
	}
	for _, id := range sortedKeys(s.Tools) {
		if toolWorkUnsettled(s.Tools[id]) {
			return id
		}
	}
	return ""
}

// DeferralCache is CompactionDeferral for the model steps of one session:
// the tool call each settled message leaves without a final result is kept
// (MessageCache), so a step looks at the parts of the messages that are
// new or still written to only; the unsettled tool work comes from the
// writer's index. Its zero value is empty; it is not safe for concurrent
// use.
type DeferralCache struct {
	calls MessageCache[string]
}

// Deferral returns CompactionDeferral(s, deadLettered).
func (c *DeferralCache) Deferral(s *AIState, deadLettered bool) string {
	return deferral(deadLettered, func() string {
		settled := func(id string) bool { return !s.isActiveResponse(id) }
		_ = c.calls.Update(s.Messages, settled, func(m *TranscriptMessage) (string, error) { return unsettledCall(m), nil })
		for i := range c.calls.Len() {
			if id := c.calls.At(i); id != "" {
				return id
			}
		}
		return ""
	}, s.unsettledWork)
}

// toolWorkUnsettled reports whether a tool call's A2-owned execution has
// not settled.
func toolWorkUnsettled(t ToolActivity) bool {
	return t.Running || t.Status == ToolStatusRequested || t.Status == ToolStatusRunning
}

// SummaryRole is the role of the summary message in model context (OQ-27).
const SummaryRole = RoleUser

// ModelContext returns what later model requests see (R-COMPACT-03): after
// the latest completed compaction, its summary and everything after its
// part; without one, every message. state.messages itself stays complete
// (R-COMPACT-04); data parts, the compaction part among them, are skipped
// when messages become model messages (R-COMPACT-34). A failed or
// interrupted compaction changes nothing: the previous context stays
// (R-COMPACT-06).
func ModelContext(messages []TranscriptMessage) (summary string, after []TranscriptMessage) {
	for i := len(messages) - 1; i >= 0; i-- {
		if m := latestSummary(&messages[i]); m.part >= 0 {
			return m.summary, contextAfter(messages, i, m.part)
		}
	}
	return "", messages
}

// summaryMark is where a message holds its latest completed compaction
// part (part -1: none) and that part's summary.
type summaryMark struct {
	part    int
	summary string
}

func latestSummary(m *TranscriptMessage) summaryMark {
	for k := len(m.Parts) - 1; k >= 0; k-- {
		if m.Parts[k].Type != PartCompaction {
			continue
		}
		var d CompactionData
		if json.Unmarshal(m.Parts[k].Data, &d) != nil || d.Status != CompactionStatusCompleted {
			continue
		}
		return summaryMark{part: k, summary: d.Summary}
	}
	return summaryMark{part: -1}
}

// contextAfter is what follows part k of message i: the rest of that
// message, when it has any, and every later message.
func contextAfter(messages []TranscriptMessage, i, k int) []TranscriptMessage {
	var after []TranscriptMessage
	rest := messages[i]
	rest.Parts = rest.Parts[k+1:]
	if len(rest.Parts) > 0 {
		after = append(after, rest)
	}
	return append(after, messages[i+1:]...)
}

// ContextCache is ModelContext for the model steps of one session: where
// each settled message holds a completed compaction part is kept
// (MessageCache), so a step looks at the parts of the messages that are new
// or still written to only. Its zero value is empty; it is not safe for
// concurrent use.
type ContextCache struct {
	marks MessageCache[summaryMark]
}

// ModelContext returns ModelContext(messages); settled says whether a
// message may be kept (false for the active response).
func (c *ContextCache) ModelContext(messages []TranscriptMessage, settled func(id string) bool) (summary string, after []TranscriptMessage) {
	_ = c.marks.Update(messages, settled, func(m *TranscriptMessage) (summaryMark, error) { return latestSummary(m), nil })
	for i := c.marks.Len() - 1; i >= 0; i-- {
		if m := c.marks.At(i); m.part >= 0 {
			return m.summary, contextAfter(messages, i, m.part)
		}
	}
	return "", messages
}

// SummaryMessage is the message that carries a summary into model context
// (OQ-27): a user message, marked as a summary of the earlier conversation.
func SummaryMessage(generationID, summary string) UIMessage {
	return UIMessage{ID: "summary-" + generationID, Role: SummaryRole, Parts: []Part{{Type: PartText,
		Text: fmt.Sprintf("[Summary of the earlier conversation]\n%s", summary)}}}
}

// SummaryInstructions is A2's built-in summary instruction; configured
// instructions are appended to it (OQ-27).
const SummaryInstructions = "Summarize the conversation so far so that it can continue from the summary alone. " +
	"Preserve the pending request, decisions made, open questions, and every exact identifier (IDs, names, paths, numbers). " +
	"Answer with the summary only; do not call tools."
