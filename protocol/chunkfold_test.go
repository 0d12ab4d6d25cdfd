// How chunks fold into a response, clause by clause, as the AI SDK builds a
// message (docs/protocol.md §3.8, §3.8a); and the progress event fast path
// against encoding/json. Written against the mutation run's survivors
// (docs/contributing.md).

package protocol

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// foldChunksState is foldChunks returning the state, for the tools and the
// message metadata; version is the turn's execution version.
func foldChunksState(t *testing.T, version int, chunks ...string) *AIState {
	t.Helper()
	s := NewAIState()
	s.Active = &Turn{TurnID: "T1", Input: TurnInput{ID: "m1", Role: RoleUser, Generate: true}, Phase: PhaseRunning, Version: version}
	s.foldRequested("Q1", GenerationRequested{ResponseMessageID: "R1", TurnID: "T1"})
	s.foldStarted(GenerationStarted{GenerationID: "G1", RequestID: "Q1", Attempt: 1})
	raws := make([]json.RawMessage, len(chunks))
	for i, c := range chunks {
		raws[i] = json.RawMessage(c)
	}
	if err := s.foldProgress("G1", 0, raws, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

// Kills chunk.go:19:25 (both) and 19:54. §3.8 "message metadata, which is
// shallow-merged"; R-PROGRESS-06; processUIMessageStream's
// updateMessageMetadata ignores an absent messageMetadata.
func TestMessageMetadataChunksMerge(t *testing.T) {
	s := foldChunksState(t, 0,
		`{"type":"start","messageMetadata":{"a":1,"b":1}}`,
		`{"type":"message-metadata","messageMetadata":{"b":2}}`,
		`{"type":"finish","messageMetadata":null}`,
		`{"type":"finish"}`)
	got := s.message("R1").Metadata
	if len(got) == 0 || !equalJSON(t, got, []byte(`{"a":1,"b":2}`)) {
		t.Errorf("metadata %s, want {\"a\":1,\"b\":2}", got)
	}
}

// Cases for the table of TestVersion7ChunksFold (uishapes_test.go), which
// compares foldChunks's parts with want. Each names the mutants it kills.
var chunkFoldCases = []struct {
	name   string
	chunks []string
	want   string
}{
	// chunk.go:52:30 (both), 65:30 (both): as the SDK, a delta or an end
	// without providerMetadata keeps the part's (chunk.providerMetadata ??
	// part.providerMetadata); one with it replaces it.
	{"text keeps its providerMetadata through a delta and an end without one", []string{
		`{"type":"text-start","id":"t","providerMetadata":{"p":{"a":1}}}`,
		`{"type":"text-delta","id":"t","delta":"x"}`,
		`{"type":"text-end","id":"t"}`,
	}, `[{"type":"text","text":"x","state":"done","providerMetadata":{"p":{"a":1}}}]`},
	{"a delta's or an end's providerMetadata replaces the part's", []string{
		`{"type":"reasoning-start","id":"r"}`,
		`{"type":"reasoning-delta","id":"r","delta":"x","providerMetadata":{"p":{"a":2}}}`,
		`{"type":"reasoning-delta","id":"r","delta":"y"}`,
		`{"type":"reasoning-end","id":"r"}`,
		`{"type":"text-start","id":"t"}`,
		`{"type":"text-end","id":"t","providerMetadata":{"p":{"a":3}}}`,
	}, `[{"type":"reasoning","id":"r","text":"xy","state":"done","providerMetadata":{"p":{"a":2}}},{"type":"text","text":"","state":"done","providerMetadata":{"p":{"a":3}}}]`},

	// chunk.go:259:25: the mutant calls strings.Builder.Grow(64-100) and
	// panics on a first delta longer than 64 bytes.
	{"a first delta longer than 64 bytes", []string{
		`{"type":"text-start","id":"t"}`,
		`{"type":"text-delta","id":"t","delta":"` + strings.Repeat("x", 100) + `"}`,
		`{"type":"text-end","id":"t"}`,
	}, `[{"type":"text","text":"` + strings.Repeat("x", 100) + `","state":"done"}]`},

	// chunk.go:99:49 (both): R-STATE-26, an input-streaming part carries the
	// partial JSON input (the part is at index 0: no start-step).
	{"tool-input-delta drafts the part's input", []string{
		`{"type":"tool-input-start","toolCallId":"c1","toolName":"calc"}`,
		`{"type":"tool-input-delta","toolCallId":"c1","inputTextDelta":"{\"a\":1,\"b"}`,
	}, `[{"type":"tool-calc","toolCallId":"c1","state":"input-streaming","input":{"a":1}}]`},

	// chunk.go:112:21 (tool-input-available without providerExecuted keeps
	// the part's: the answer below then applies), 115:30 NEGATION, 149:41
	// (the matching part is not the last one: the mutant indexes past the
	// end and panics), 161:31 (both: an answer without providerMetadata
	// keeps callProviderMetadata). §3.8a; SDK updateToolPart and
	// tool-approval-response.
	{"a provider call keeps providerExecuted and its metadata and takes an answer that comes after other parts", []string{
		`{"type":"tool-input-start","toolCallId":"c1","toolName":"search","providerExecuted":true}`,
		`{"type":"tool-input-available","toolCallId":"c1","toolName":"search","input":{},"providerMetadata":{"p":{"a":1}}}`,
		`{"type":"tool-approval-request","approvalId":"a1","toolCallId":"c1"}`,
		`{"type":"text-start","id":"t"}`,
		`{"type":"text-end","id":"t"}`,
		`{"type":"tool-approval-response","approvalId":"a1","approved":true}`,
	}, `[{"type":"tool-search","toolCallId":"c1","state":"approval-responded","input":{},"providerExecuted":true,"callProviderMetadata":{"p":{"a":1}},"approval":{"id":"a1","approved":true}},{"type":"text","text":"","state":"done"}]`},

	// chunk.go:115:30 BOUNDARY: a repeated tool-input-available without
	// providerMetadata keeps the call's (SDK: providerMetadata != null).
	{"a repeated tool-input-available without providerMetadata keeps the call's", []string{
		`{"type":"tool-input-available","toolCallId":"c1","toolName":"search","input":{},"providerExecuted":true,"providerMetadata":{"p":{"a":1}}}`,
		`{"type":"tool-input-available","toolCallId":"c1","toolName":"search","input":{"q":"x"},"providerExecuted":true}`,
	}, `[{"type":"tool-search","toolCallId":"c1","state":"input-available","input":{"q":"x"},"providerExecuted":true,"callProviderMetadata":{"p":{"a":1}}}]`},

	// chunk.go:183:21, 186:30 (both): outputs without providerExecuted or
	// providerMetadata keep the part's.
	{"a provider call's outputs keep providerExecuted and the result's providerMetadata", []string{
		`{"type":"tool-input-available","toolCallId":"c1","toolName":"search","input":{},"providerExecuted":true}`,
		`{"type":"tool-output-available","toolCallId":"c1","output":{"n":1},"preliminary":true,"providerMetadata":{"p":{"a":1}}}`,
		`{"type":"tool-output-available","toolCallId":"c1","output":{"n":2}}`,
	}, `[{"type":"tool-search","toolCallId":"c1","state":"output-available","input":{},"output":{"n":2},"providerExecuted":true,"resultProviderMetadata":{"p":{"a":1}}}]`},

	// chunk.go:213:11: with no step-start above the base, reset-step stops
	// at the base (the mutant reads msg.Parts[-1] and panics). §3.8a.
	{"reset-step before any start-step removes the parts down to the base", []string{
		`{"type":"text-start","id":"t"}`,
		`{"type":"text-delta","id":"t","delta":"x"}`,
		`{"type":"reset-step"}`,
	}, `[]`},
}

func TestChunksFoldLikeTheAISDK(t *testing.T) {
	for _, tc := range chunkFoldCases {
		t.Run(tc.name, func(t *testing.T) {
			got := foldChunks(t, tc.chunks...)
			if !equalJSON(t, []byte(got), []byte(tc.want)) {
				t.Errorf("parts\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
}

// chunk.go:220:62: §3.8a, reset-step removes the step's parts "with their
// tool calls and approvals".
func TestResetStepRemovesItsToolCalls(t *testing.T) {
	s := foldChunksState(t, 0,
		`{"type":"start-step"}`,
		`{"type":"tool-input-available","toolCallId":"c1","toolName":"calc","input":{}}`,
		`{"type":"reset-step"}`)
	if tl, ok := s.Tools["c1"]; ok {
		t.Errorf("tools keeps c1 after reset-step: %+v", tl)
	}
}

// chunk.go:294:23: §3.8, tools[id] is created "with the turn's current
// version" (OQ-23; the version is above 0 after a Pause now).
func TestToolCallTakesTheTurnsVersion(t *testing.T) {
	s := foldChunksState(t, 2, `{"type":"tool-input-start","toolCallId":"c1","toolName":"calc"}`)
	if v := s.Tools["c1"].Version; v != 2 {
		t.Errorf("tools[c1].version %d, want the turn's 2", v)
	}
}

// chunk.go:397:40: ParsePartialJSON returns (OQ-39: when the prefix
// cannot be completed the previous draft stays) for prefixes whose last
// ',', '{' or '[' is inside a string; the mutant loops forever on them.
func TestParsePartialJSONGivesUp(t *testing.T) {
	for _, in := range []string{`{"filter[name`, `{"a{`} {
		if got, ok := ParsePartialJSON(in); ok && !json.Valid(got) {
			t.Errorf("%q: %s is not JSON", in, got)
		}
	}
}

// progressevent.go:39 (all eight columns; 36:13 too, by the last case):
// the payload is json.Marshal's whatever the field lengths; each mutant
// makes the size estimate negative and bytes.Buffer.Grow panic.
func TestNewProgressEventLongFields(t *testing.T) {
	long := strings.Repeat("x", 300)
	raw := json.RawMessage(`"` + long + `"`)
	cases := map[string][]UIMessageChunk{
		"type":           {{Type: "data-" + long}},
		"id":             {{Type: ChunkTextDelta, ID: long}},
		"delta":          {{Type: ChunkTextDelta, ID: "t", Delta: long}},
		"toolCallId":     {{Type: ChunkToolInputStart, ToolCallID: long, ToolName: "calc"}},
		"inputTextDelta": {{Type: ChunkToolInputDelta, ToolCallID: "c", InputTextDelta: long}},
		"input":          {{Type: ChunkToolInputAvailable, ToolCallID: "c", ToolName: "calc", Input: raw}},
		"output":         {{Type: ChunkToolOutput, ToolCallID: "c", Output: raw}},
		"data":           {{Type: "data-x", Data: raw}},
	}
	for name, chunks := range cases {
		p := GenerationProgress{GenerationID: "G1", Chunks: chunks}
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := NewProgressEvent("e", "c", p)
		if err != nil || !bytes.Equal(ev.Payload, want) {
			t.Errorf("long %s: payload %s, %v; want %s", name, ev.Payload, err, want)
		}
	}
	// 36:13 (N: the runtime's generation IDs are 32 bytes and its batches
	// are never empty), killed here anyway.
	p := GenerationProgress{GenerationID: long, Chunks: []UIMessageChunk{}}
	want, _ := json.Marshal(p)
	if ev, err := NewProgressEvent("e", "c", p); err != nil || !bytes.Equal(ev.Payload, want) {
		t.Errorf("long generation ID: payload %s, %v; want %s", ev.Payload, err, want)
	}
}

// progressevent.go:175:8 ("a\x80b"), 177:62 ("a\u2029b"), 202:9 NEGATION
// ("\x01"): AppendJSONString writes json.Marshal's bytes or declines.
// (FuzzDeltaChunk's seeds have "\xff" and U+2028, not a lone 0x80 or
// U+2029, and its chunk type, always printable, hides 202:9.)
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"Hello world", "", "\x01", "\x00\x1f", "é\x01", "a\x80b", "\x80", "\xff",
		"a\u2028b", "a\u2029b", "\u2029", "<&>", "\"\\\n\r\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := AppendJSONString([]byte("prefix"), s)
		if !ok {
			if string(got) != "prefix" {
				t.Fatalf("declined %q but appended: %q", s, got)
			}
			return
		}
		want, _ := json.Marshal(s)
		if !bytes.Equal(got[len("prefix"):], want) {
			t.Fatalf("%q:\n got %s\nwant %s", s, got[len("prefix"):], want)
		}
	})
}

// An ended turn's response keeps an array of parts of its own length: the
// one that grew by doubling while it streamed would keep up to twice the
// memory for as long as the session is in memory.
func TestAnEndedResponseKeepsNoSpareParts(t *testing.T) {
	s := NewAIState()
	var log []Event
	drive(t, s, &log, Inputs.Text("u1", "hi"))
	resp := s.Active.ResponseMessageID
	work(t, s, &log, TypeGenerationStarted, GenerationStarted{GenerationID: "g1", RequestID: s.ActiveRequestID, Attempt: 1})
	chunks := []UIMessageChunk{{Type: ChunkStartStep}}
	for _, id := range []string{"t1", "t2", "t3", "t4"} {
		chunks = append(chunks, UIMessageChunk{Type: ChunkTextStart, ID: id}, UIMessageChunk{Type: ChunkTextDelta, ID: id, Delta: id}, UIMessageChunk{Type: ChunkTextEnd, ID: id})
	}
	work(t, s, &log, TypeGenerationProgress, GenerationProgress{GenerationID: "g1", Chunks: chunks})
	msg := s.message(resp)
	if msg == nil || len(msg.Parts) != 5 {
		t.Fatalf("the response has %v, want 5 parts", msg)
	}
	if cap(msg.Parts) == len(msg.Parts) {
		t.Fatal("the streaming response's parts have no spare room: the test needs an array that grew by doubling")
	}
	work(t, s, &log, TypeGenerationCompleted, GenerationCompleted{GenerationID: "g1", FinishReason: "stop"})
	if s.Active != nil {
		t.Fatal("the turn did not end")
	}
	msg = s.message(resp)
	if len(msg.Parts) != 5 || cap(msg.Parts)-len(msg.Parts) >= 2 {
		t.Fatalf("the ended response has %d parts in an array of %d", len(msg.Parts), cap(msg.Parts))
	}
	if msg.Parts[4].Text != "t4" || msg.Parts[0].Type != PartStepStart {
		t.Fatalf("the parts changed: %+v", msg.Parts)
	}
}
