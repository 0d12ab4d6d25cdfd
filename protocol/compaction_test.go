package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// R-COMPACT-10 R-COMPACT-11 R-COMPACT-15 R-META-07: static options are
// validated at construction; false and an explicit threshold disable
// discovery.
func TestCompactionOptions(t *testing.T) {
	var ce *ConfigError
	for _, bad := range []CompactionOptions{{ThresholdTokens: -1}, {ThresholdTokens: 1 << 53}, {Disabled: true, ThresholdTokens: 5}} {
		if err := bad.Validate(); !errors.As(err, &ce) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	for _, good := range []CompactionOptions{{}, {ThresholdTokens: 1}, {ThresholdTokens: 1<<53 - 1}, {Disabled: true}, {Instructions: "Preserve exact IDs."}} {
		if err := good.Validate(); err != nil {
			t.Errorf("%+v: %v", good, err)
		}
	}
	if !(CompactionOptions{}).Discovery() || (CompactionOptions{Disabled: true}).Discovery() || (CompactionOptions{ThresholdTokens: 80000}).Discovery() {
		t.Fatal("discovery")
	}
}

// R-COMPACT-18 R-META-08: 75% of the context window, lowered for a larger
// output allowance (OQ-24).
func TestDefaultThreshold(t *testing.T) {
	for _, tc := range []struct{ window, maxOut, want int64 }{
		{400000, 0, 300000},
		{400000, 150000, 250000},
		{400000, 50000, 300000},
		{1000, 5000, 1},
		{1, 1, 0}, // OQ-24 at its degenerate edge: a one-token window
	} {
		if got := DefaultThreshold(tc.window, tc.maxOut); got != tc.want {
			t.Errorf("DefaultThreshold(%d, %d) = %d, want %d", tc.window, tc.maxOut, got, tc.want)
		}
	}
}

// R-COMPACT-19: bytes of messages, tools and instructions over four,
// without provider metadata. R-COMPACT-20 R-RETRY-10: calibration by the
// previous same-model completion until a smaller prompt, a retry, a
// compaction or a model change. R-COMPACT-21: completed generations record
// their inputTokenEstimate.
func TestEstimateAndCalibration(t *testing.T) {
	m := []TranscriptMessage{{ID: "m1", Role: RoleUser, Parts: []Part{{Type: PartText, Text: "hello"}}}}
	base := EstimateBytes(m, nil, "")
	if want := int64(len(mustJSON(m[0]))); base != want {
		t.Fatalf("estimate %d, want the message's %d serialized bytes", base, want)
	}
	withMeta := []TranscriptMessage{{ID: "m1", Role: RoleUser, Parts: []Part{{Type: PartText, Text: "hello", ProviderMetadata: json.RawMessage(`{"openai":{"x":1}}`)}}}}
	if EstimateBytes(withMeta, nil, "") != base {
		t.Fatal("provider metadata counted in the estimate")
	}
	if EstimateBytes(m, json.RawMessage(`[{"name":"t"}]`), "be brief") != base+int64(len(`[{"name":"t"}]`))+8 {
		t.Fatal("tools and instructions not counted")
	}
	if TokensOf(9) != 3 || TokensOf(8) != 2 {
		t.Fatal("TokensOf rounds up bytes/4")
	}
	prev := &Calibration{Model: "m", Bytes: 4000, InputTokens: 1500}
	if got := CalibratedTokens(4000, "m", prev); got != 1500 {
		t.Fatalf("an unchanged prompt keeps its calibration: %d", got)
	}
	if got := CalibratedTokens(4400, "m", prev); got != 1600 {
		t.Fatalf("calibrated %d", got)
	}
	if CalibratedTokens(3000, "m", prev) != 750 || CalibratedTokens(4400, "other", prev) != 1100 || CalibratedTokens(4400, "m", nil) != 1100 {
		t.Fatal("calibration must drop for a smaller prompt, another model or none")
	}

	// The fold keeps the calibration of the last completion and drops it on
	// retry and compaction.
	s := NewAIState()
	var log []Event
	drive(t, s, &log, Inputs.Text("u1", "hi"))
	work(t, s, &log, TypeGenerationStarted, GenerationStarted{GenerationID: "g1", RequestID: s.ActiveRequestID, Attempt: 1, Model: "m"})
	work(t, s, &log, TypeGenerationProgress, GenerationProgress{GenerationID: "g1", Chunks: []UIMessageChunk{{Type: ChunkToolInputAvailable, ToolCallID: "c", ToolName: "x", Input: []byte(`{}`)}}})
	work(t, s, &log, TypeGenerationCompleted, GenerationCompleted{GenerationID: "g1", InputBytes: 4000, InputTokenEstimate: 1000, Usage: &Usage{InputTokens: 1500}})
	if s.Calibration == nil || *s.Calibration != (Calibration{Model: "m", Bytes: 4000, InputTokens: 1500}) {
		t.Fatalf("calibration %+v", s.Calibration)
	}
	var completed GenerationCompleted
	for _, ev := range log {
		if ev.Type == TypeGenerationCompleted {
			_ = json.Unmarshal(ev.Payload, &completed)
		}
	}
	if completed.InputTokenEstimate != 1000 || completed.InputBytes != 4000 {
		t.Fatalf("the completion does not record its inputTokenEstimate: %+v", completed)
	}
	work(t, s, &log, TypeToolExecCompleted, ToolExecutionCompleted{ToolCallID: "c", GenerationID: "g1", Output: []byte(`1`)})
	work(t, s, &log, TypeGenerationStarted, GenerationStarted{GenerationID: "g2", RequestID: s.ActiveRequestID, Attempt: 1, Model: "m"})
	work(t, s, &log, TypeGenerationFailed, GenerationFailed{GenerationID: "g2", Message: "x"})
	drive(t, s, &log, Inputs.Retry(RetryOptions{MessageID: "u1", ResponseMessageID: s.Active.ResponseMessageID, RetryID: "r"}))
	if s.Calibration != nil {
		t.Fatal("a retry must reset calibration")
	}
}

// R-COMPACT-24 R-COMPACT-25 R-COMPACT-26 R-COMPACT-22 R-COMPACT-23: the
// decision crosses the threshold strictly, needs a known threshold, and
// defers for unsettled exchanges, unsettled A2-owned work and dead letters;
// it never touches the inbox.
func TestShouldCompact(t *testing.T) {
	s := NewAIState()
	var log []Event
	drive(t, s, &log, Inputs.Text("u1", "hi"), Inputs.Text("q1", "queued"))
	if d := ShouldCompact(s, 1200, 0, false); d.Compact {
		t.Fatal("compacted with an unknown threshold (R-COMPACT-23)")
	}
	if d := ShouldCompact(s, 1000, 1000, false); d.Compact {
		t.Fatal("the estimate must cross the threshold strictly")
	}
	if d := ShouldCompact(s, 1200, 1000, false); !d.Compact || d.InputTokens != 1200 || d.ThresholdTokens != 1000 {
		t.Fatalf("decision %+v", d)
	}
	if d := ShouldCompact(s, 1200, 1000, true); d.Compact || !strings.Contains(d.Deferred, "dead-lettered") {
		t.Fatalf("dead letter: %+v", d)
	}
	work(t, s, &log, TypeGenerationStarted, GenerationStarted{GenerationID: "g1", RequestID: s.ActiveRequestID, Attempt: 1})
	work(t, s, &log, TypeGenerationProgress, GenerationProgress{GenerationID: "g1", Chunks: []UIMessageChunk{{Type: ChunkToolInputAvailable, ToolCallID: "c1", ToolName: "x", Input: []byte(`{}`)}}})
	if d := ShouldCompact(s, 1200, 1000, false); d.Compact || !strings.Contains(d.Deferred, "c1") {
		t.Fatalf("unsettled exchange: %+v", d)
	}
	work(t, s, &log, TypeGenerationCompleted, GenerationCompleted{GenerationID: "g1"})
	work(t, s, &log, TypeToolExecClaimed, ToolExecutionClaimed{ToolCallID: "c1", GenerationID: "g1", Attempt: 1})
	// Stop the turn: c1's part settles as interrupted, but its execution
	// still runs: A2-owned work has not settled.
	drive(t, s, &log, withID(Inputs.Stop(s.Active.TurnID, nil), "stop1"))
	if d := ShouldCompact(s, 1200, 1000, false); d.Compact || !strings.Contains(d.Deferred, "tool work c1") {
		t.Fatalf("unsettled work of a stopped turn: %+v", d)
	}
	work(t, s, &log, TypeToolExecCompleted, ToolExecutionCompleted{ToolCallID: "c1", GenerationID: "g1", Output: []byte(`1`)})
	inbox := len(s.Inbox.Items)
	if d := ShouldCompact(s, 1200, 1000, false); !d.Compact {
		t.Fatalf("settled: %+v", d)
	}
	if len(s.Inbox.Items) != inbox {
		t.Fatal("compaction touched the inbox")
	}
}

func withID(ev Event, id string) Event { ev.ID = id; return ev }

// R-COMPACT-03 R-COMPACT-04 R-COMPACT-09: later requests see the summary
// and what follows the part; state.messages stays complete; the summary is
// not a typed message of the transcript.
func TestModelContext(t *testing.T) {
	done := mustJSON(CompactionData{Status: CompactionStatusCompleted, Summary: "S"})
	msgs := []TranscriptMessage{
		{ID: "u1", Role: RoleUser, Parts: []Part{{Type: PartText, Text: "old"}}},
		{ID: "r1", Role: RoleAssistant, Parts: []Part{{Type: PartText, Text: "step 1"}, {Type: PartCompaction, ID: "g2", Data: done}, {Type: PartText, Text: "step 2"}}},
		{ID: "u2", Role: RoleUser, Parts: []Part{{Type: PartText, Text: "new"}}},
	}
	summary, after := ModelContext(msgs)
	if summary != "S" || len(after) != 2 || after[0].Parts[0].Text != "step 2" || after[1].ID != "u2" {
		t.Fatalf("context %q %+v", summary, after)
	}
	if len(msgs[1].Parts) != 3 {
		t.Fatal("ModelContext changed the transcript")
	}
	// R-COMPACT-03: a compaction that opens its response (it ran before
	// the first step) counts too.
	first := []TranscriptMessage{msgs[0], {ID: "r1", Role: RoleAssistant, Parts: []Part{{Type: PartCompaction, ID: "g1", Data: done}, {Type: PartText, Text: "answer"}}}}
	if s, after := ModelContext(first); s != "S" || len(after) != 1 || after[0].ID != "r1" || after[0].Parts[0].Text != "answer" {
		t.Fatalf("compaction as the first part: %q %+v", s, after)
	}
	if s, all := ModelContext(msgs[:1]); s != "" || len(all) != 1 {
		t.Fatal("no compaction: everything")
	}
	sm := SummaryMessage("g2", "S")
	if sm.Role != SummaryRole || !strings.Contains(sm.Parts[0].Text, "S") || sm.Metadata != nil {
		t.Fatalf("summary message %+v", sm)
	}
	if !strings.Contains(SummaryInstructions, "exact identifier") {
		t.Fatal("the summary instruction must ask to preserve exact IDs (OQ-27)")
	}
}

// R-COMPACT-20: a completion that reports no input tokens keeps the
// calibration of the last one that did (it is not on the rule's list of
// what ends a calibration: a smaller prompt, a retry, a compaction, another
// model). Mutant fold.go:717:46 replaced it with an unusable {bytes, 0}.
func TestACompletionWithoutInputTokensKeepsTheCalibration(t *testing.T) {
	s := NewAIState()
	var log []Event
	drive(t, s, &log, Inputs.Text("u1", "hi"))
	work(t, s, &log, TypeGenerationStarted, GenerationStarted{GenerationID: "g1", RequestID: s.ActiveRequestID, Attempt: 1, Model: "m"})
	work(t, s, &log, TypeGenerationProgress, GenerationProgress{GenerationID: "g1", Chunks: []UIMessageChunk{{Type: ChunkToolInputAvailable, ToolCallID: "c", ToolName: "x", Input: []byte(`{}`)}}})
	work(t, s, &log, TypeGenerationCompleted, GenerationCompleted{GenerationID: "g1", InputBytes: 4000, Usage: &Usage{InputTokens: 1500}})
	work(t, s, &log, TypeToolExecCompleted, ToolExecutionCompleted{ToolCallID: "c", GenerationID: "g1", Output: []byte(`1`)})
	work(t, s, &log, TypeGenerationStarted, GenerationStarted{GenerationID: "g2", RequestID: s.ActiveRequestID, Attempt: 1, Model: "m"})
	work(t, s, &log, TypeGenerationCompleted, GenerationCompleted{GenerationID: "g2", InputBytes: 4400, Usage: &Usage{OutputTokens: 5}})
	if s.Calibration == nil || *s.Calibration != (Calibration{Model: "m", Bytes: 4000, InputTokens: 1500}) {
		t.Fatalf("calibration %+v after a completion without input tokens, want g1's {m 4000 1500}", s.Calibration)
	}
}

// A settled message can hold a tool call without a result: an assistant
// message seeded by trusted code (an imported conversation) whose call was
// never answered. The cached deferral keeps it, as the whole computation
// does, through the turns after it (R-COMPACT-24: earlier tool calls have final
// results; DeferralCache).
func TestTheCachedDeferralKeepsASettledMessagesCall(t *testing.T) {
	s := NewAIState()
	var log []Event
	var cache DeferralCache
	check := func(when string) {
		t.Helper()
		want := CompactionDeferral(s, false)
		if !strings.Contains(want, "c9") {
			t.Fatalf("%s: CompactionDeferral = %q, want it to name the imported call c9", when, want)
		}
		if got := cache.Deferral(s, false); got != want {
			t.Fatalf("%s: the cached deferral is %q, the whole computation's %q", when, got, want)
		}
	}
	drive(t, s, &log, Inputs.Seed(UIMessage{ID: "imported", Role: RoleAssistant,
		Parts: []Part{{Type: "tool-x", ToolCallID: "c9", State: ToolInputAvailable, Input: []byte(`{}`)}}}))
	if s.isActiveResponse("imported") {
		t.Fatal("the seeded message is an active response: the test needs it settled")
	}
	check("after the seed")
	drive(t, s, &log, Inputs.Text("u1", "hi"))
	check("after a user message")
	work(t, s, &log, TypeGenerationStarted, GenerationStarted{GenerationID: "g1", RequestID: s.ActiveRequestID, Attempt: 1})
	work(t, s, &log, TypeGenerationProgress, GenerationProgress{GenerationID: "g1", Chunks: []UIMessageChunk{
		{Type: ChunkTextStart, ID: "t1"}, {Type: ChunkTextDelta, ID: "t1", Delta: "hello"}, {Type: ChunkTextEnd, ID: "t1"}}})
	check("while a step streams")
	work(t, s, &log, TypeGenerationCompleted, GenerationCompleted{GenerationID: "g1", FinishReason: "stop"})
	check("after the turn")
}
