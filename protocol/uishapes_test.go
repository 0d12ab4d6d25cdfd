package protocol

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// v7Chunks is one chunk of every type of the ai package's version 7
// ui-message-chunks.ts, each with every field its schema has.
var v7Chunks = []string{
	`{"type":"text-start","id":"t1","providerMetadata":{"p":{"a":1}}}`,
	`{"type":"text-delta","id":"t1","delta":"Hi","providerMetadata":{"p":{"a":2}}}`,
	`{"type":"text-end","id":"t1","citations":[{"type":"url","url":"https://example.com","title":"e"}],"providerMetadata":{"p":{"a":3}}}`,
	`{"type":"error","errorText":"boom"}`,
	`{"type":"tool-input-start","toolCallId":"c1","toolName":"calc","inputEncoding":"json","providerExecuted":true,"providerMetadata":{"p":{}},"toolMetadata":{"m":1},"dynamic":true,"title":"Calc"}`,
	`{"type":"tool-input-delta","toolCallId":"c1","inputTextDelta":"{\"a\""}`,
	`{"type":"tool-input-available","toolCallId":"c1","toolName":"calc","input":{"a":1},"providerExecuted":false,"providerMetadata":{"p":{}},"toolMetadata":{"m":1},"dynamic":true,"title":"Calc"}`,
	`{"type":"tool-input-error","toolCallId":"c1","toolName":"calc","input":"{oops","providerExecuted":false,"providerMetadata":{"p":{}},"toolMetadata":{"m":1},"dynamic":true,"errorText":"bad json","title":"Calc"}`,
	`{"type":"tool-approval-request","approvalId":"a1","toolCallId":"c1","approvalDescriptor":{"d":1},"inputSchemaInput":{"a":1},"reason":"spends money","isAutomatic":true,"signature":"sig"}`,
	`{"type":"tool-approval-response","approvalId":"a1","approved":false,"reason":"no","providerExecuted":true,"providerMetadata":{"p":{}}}`,
	`{"type":"tool-output-available","toolCallId":"c1","output":{"r":2},"providerExecuted":true,"providerMetadata":{"p":{}},"toolMetadata":{"m":1},"dynamic":true,"preliminary":true}`,
	`{"type":"tool-output-error","toolCallId":"c1","errorText":"failed","providerExecuted":true,"providerMetadata":{"p":{}},"toolMetadata":{"m":1},"dynamic":true}`,
	`{"type":"tool-output-denied","toolCallId":"c1"}`,
	`{"type":"reasoning-start","id":"r1","providerMetadata":{"p":{}}}`,
	`{"type":"reasoning-delta","id":"r1","delta":"hm","providerMetadata":{"p":{}}}`,
	`{"type":"reasoning-end","id":"r1","providerMetadata":{"p":{}}}`,
	`{"type":"custom","kind":"acme.widget","providerMetadata":{"p":{}}}`,
	`{"type":"source-url","sourceId":"s1","url":"https://example.com","title":"e","providerMetadata":{"p":{}}}`,
	`{"type":"source-document","sourceId":"s2","mediaType":"application/pdf","title":"d","filename":"d.pdf","providerMetadata":{"p":{}}}`,
	`{"type":"file","url":"data:image/png;base64,AA==","mediaType":"image/png","providerMetadata":{"p":{}}}`,
	`{"type":"reasoning-file","url":"data:image/png;base64,AA==","mediaType":"image/png","providerMetadata":{"p":{}}}`,
	`{"type":"steering-message","id":"m9","parts":[{"type":"text","text":"faster","providerMetadata":{"p":{}}},{"type":"file","mediaType":"image/png","filename":"a.png","url":"data:image/png;base64,AA==","providerReference":{"openai":"file-1"},"providerMetadata":{"p":{}}}]}`,
	`{"type":"data-weather","id":"w1","data":{"t":20},"transient":true}`,
	`{"type":"start-step"}`,
	`{"type":"finish-step"}`,
	`{"type":"reset-step"}`,
	`{"type":"start","messageId":"R1","messageMetadata":{"k":"v"}}`,
	`{"type":"finish","finishReason":"interrupted","messageMetadata":{"k":"w"}}`,
	`{"type":"abort","reason":"user"}`,
	`{"type":"message-metadata","messageMetadata":{"k":"x"}}`,
}

// v7Parts is one part of every type of the ai package's version 7
// ui-messages.ts, with every field, and a tool part in every state.
var v7Parts = []string{
	`{"type":"text","text":"Hi","state":"done","citations":[{"type":"url","url":"https://example.com"}],"providerMetadata":{"p":{}}}`,
	`{"type":"custom","kind":"acme.widget","providerMetadata":{"p":{}}}`,
	`{"type":"reasoning","id":"r1","text":"hm","state":"streaming","providerMetadata":{"p":{}}}`,
	`{"type":"source-url","sourceId":"s1","url":"https://example.com","title":"e","providerMetadata":{"p":{}}}`,
	`{"type":"source-document","sourceId":"s2","mediaType":"application/pdf","title":"d","filename":"d.pdf","providerMetadata":{"p":{}}}`,
	`{"type":"file","mediaType":"image/png","filename":"a.png","url":"data:image/png;base64,AA==","providerReference":{"openai":"file-1"},"providerMetadata":{"p":{}}}`,
	`{"type":"reasoning-file","mediaType":"image/png","url":"data:image/png;base64,AA==","providerMetadata":{"p":{}}}`,
	`{"type":"steering-message","id":"m9","parts":[{"type":"text","text":"faster"},{"type":"file","mediaType":"image/png","url":"data:image/png;base64,AA=="}]}`,
	`{"type":"step-start"}`,
	`{"type":"data-weather","id":"w1","data":{"t":20}}`,
	`{"type":"tool-calc","toolCallId":"c1","title":"Calc","toolMetadata":{"m":1},"state":"input-streaming","providerExecuted":true,"callProviderMetadata":{"p":{}},"input":{"a":1},"rawInput":"{\"a\":1","inputEncoding":"json"}`,
	`{"type":"tool-calc","toolCallId":"c1","state":"approval-requested","input":{"a":1},"approval":{"id":"a1","descriptor":{"d":1},"requestReason":"spends money","isAutomatic":true,"signature":"sig","inputSchemaInput":{"a":1}}}`,
	`{"type":"tool-calc","toolCallId":"c1","state":"approval-responded","input":{"a":1},"approval":{"id":"a1","approved":true,"reason":"fine","requestReason":"spends money"}}`,
	`{"type":"tool-calc","toolCallId":"c1","state":"output-available","input":{"a":1},"output":{"r":2},"resultProviderMetadata":{"p":{}},"preliminary":true,"approval":{"id":"a1","approved":true}}`,
	`{"type":"tool-calc","toolCallId":"c1","state":"output-error","input":"{oops","rawInput":"{oops","errorText":"bad"}`,
	`{"type":"tool-calc","toolCallId":"c1","state":"output-denied","input":{"a":1},"approval":{"id":"a1","approved":false,"reason":"no"}}`,
	`{"type":"dynamic-tool","toolName":"calc","toolCallId":"c2","state":"input-available","input":{"a":1}}`,
}

// equalJSON compares two JSON texts as values.
func equalJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// TestVersion7ShapesRoundTrip decodes every version 7 chunk and part and
// encodes it again: nothing is lost.
func TestVersion7ShapesRoundTrip(t *testing.T) {
	for _, in := range v7Chunks {
		var c UIMessageChunk
		if err := json.Unmarshal([]byte(in), &c); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if !equalJSON(t, []byte(in), out) {
			t.Errorf("chunk lost a field:\n in: %s\nout: %s", in, out)
		}
	}
	for _, in := range v7Parts {
		var p Part
		if err := json.Unmarshal([]byte(in), &p); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if !equalJSON(t, []byte(in), out) {
			t.Errorf("part lost a field:\n in: %s\nout: %s", in, out)
		}
	}
}

// foldChunks folds one turn whose single step streams chunks, and returns
// the response's parts as JSON.
func foldChunks(t *testing.T, chunks ...string) string {
	t.Helper()
	out, err := json.Marshal(foldChunksState(t, 0, chunks...).message("R1").Parts)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestVersion7ChunksFold checks how the fold builds a message from the
// chunks that are new in version 7, as processUIMessageStream does.
func TestVersion7ChunksFold(t *testing.T) {
	cases := []struct {
		name   string
		chunks []string
		want   string
	}{
		{"finish-step leaves a part open; its end closes it", []string{
			`{"type":"start-step"}`, `{"type":"text-start","id":"t"}`, `{"type":"text-delta","id":"t","delta":"a"}`,
			`{"type":"finish-step"}`, `{"type":"text-delta","id":"t","delta":"b"}`, `{"type":"text-end","id":"t"}`,
		}, `[{"type":"step-start"},{"type":"text","text":"ab","state":"done"}]`},
		{"text-end carries citations", []string{
			`{"type":"text-start","id":"t"}`, `{"type":"text-end","id":"t","citations":[{"type":"url","url":"u"}]}`,
		}, `[{"type":"text","text":"","state":"done","citations":[{"type":"url","url":"u"}]}]`},
		{"reset-step removes the step's parts and keeps its step-start", []string{
			`{"type":"start-step"}`, `{"type":"text-start","id":"t"}`, `{"type":"text-delta","id":"t","delta":"old"}`,
			`{"type":"tool-input-available","toolCallId":"c1","toolName":"calc","input":{}}`,
			`{"type":"reset-step"}`, `{"type":"text-start","id":"t"}`, `{"type":"text-delta","id":"t","delta":"new"}`, `{"type":"text-end","id":"t"}`,
		}, `[{"type":"step-start"},{"type":"text","text":"new","state":"done"}]`},
		{"custom, reasoning-file and steering-message parts", []string{
			`{"type":"custom","kind":"acme.x"}`, `{"type":"reasoning-file","url":"u","mediaType":"image/png"}`,
			`{"type":"steering-message","id":"m2","parts":[{"type":"text","text":"hurry"}]}`,
		}, `[{"type":"custom","kind":"acme.x"},{"type":"reasoning-file","url":"u","mediaType":"image/png"},{"type":"steering-message","id":"m2","parts":[{"type":"text","text":"hurry"}]}]`},
		{"tool-input-error keeps its input in input", []string{
			`{"type":"tool-input-start","toolCallId":"c1","toolName":"calc"}`,
			`{"type":"tool-input-error","toolCallId":"c1","toolName":"calc","input":"{oops","errorText":"bad json"}`,
		}, `[{"type":"tool-calc","toolCallId":"c1","input":"{oops","errorText":"bad json","state":"output-error"}]`},
		{"an approval request keeps its reason, automatic flag and schema input", []string{
			`{"type":"tool-input-available","toolCallId":"c1","toolName":"calc","input":{"a":1}}`,
			`{"type":"tool-approval-request","approvalId":"a1","toolCallId":"c1","reason":"costly","isAutomatic":true,"inputSchemaInput":{"a":1}}`,
		}, `[{"type":"tool-calc","state":"approval-requested","toolCallId":"c1","input":{"a":1},"approval":{"id":"a1","requestReason":"costly","isAutomatic":true,"inputSchemaInput":{"a":1}}}]`},
		{"a model's approval answer does not approve a local call", []string{
			`{"type":"tool-input-available","toolCallId":"c1","toolName":"calc","input":{}}`,
			`{"type":"tool-approval-request","approvalId":"a1","toolCallId":"c1"}`,
			`{"type":"tool-approval-response","approvalId":"a1","approved":true}`,
		}, `[{"type":"tool-calc","state":"approval-requested","toolCallId":"c1","input":{},"approval":{"id":"a1"}}]`},
		{"a provider-executed call takes the provider's approval answer", []string{
			`{"type":"tool-input-available","toolCallId":"c1","toolName":"search","input":{},"providerExecuted":true}`,
			`{"type":"tool-approval-request","approvalId":"a1","toolCallId":"c1"}`,
			`{"type":"tool-approval-response","approvalId":"a1","approved":false,"reason":"policy"}`,
		}, `[{"type":"tool-search","state":"approval-responded","toolCallId":"c1","input":{},"providerExecuted":true,"approval":{"id":"a1","approved":false,"reason":"policy"}}]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := foldChunks(t, tc.chunks...)
			if !equalJSON(t, []byte(got), []byte(tc.want)) {
				t.Errorf("parts\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
}

// TestFoldsVersion6Log folds a log a node wrote with the version 6 shapes
// (compat/v6_log.jsonl: a turn with reasoning, a tool call, an unknown tool
// and a continuation, then a failed turn) and compares its messages with
// compat/v6_messages.json. The one difference from what version 6 folded:
// the unknown tool's input is in input, not rawInput.
func TestFoldsVersion6Log(t *testing.T) {
	f, err := os.Open("compat/v6_log.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := NewAIState()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		if err := Fold(s, ev); err != nil {
			t.Fatalf("event %d (%s): %v", ev.Index, ev.Type, err)
		}
		n++
	}
	if n != 22 {
		t.Fatalf("folded %d events, want the 22 of the log", n)
	}
	got, err := json.Marshal(s.Messages)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("compat/v6_messages.json")
	if err != nil {
		t.Fatal(err)
	}
	if !equalJSON(t, got, want) {
		t.Errorf("messages\n got: %s\nwant: %s", got, strings.TrimSpace(string(want)))
	}
	if s.Status != StatusFailed {
		t.Errorf("status %q, want failed", s.Status)
	}
}

// TestNoPartLeftStreaming: after a Stop, a failure or a completed step, no
// text or reasoning part of the response is left streaming, though the
// model never sent their end chunks.
func TestNoPartLeftStreaming(t *testing.T) {
	open := []string{`{"type":"start-step"}`, `{"type":"reasoning-start","id":"r"}`, `{"type":"reasoning-delta","id":"r","delta":"x"}`,
		`{"type":"text-start","id":"t"}`, `{"type":"text-delta","id":"t","delta":"partial"}`}
	ends := map[string]func(s *AIState){
		"stop":      func(s *AIState) { s.foldInterrupted(MessageInterrupted{MessageID: "R1", GenerationID: "G1"}) },
		"failure":   func(s *AIState) { s.foldFailed(GenerationFailed{GenerationID: "G1", Message: "overloaded"}) },
		"completed": func(s *AIState) { s.foldCompleted(GenerationCompleted{GenerationID: "G1"}) },
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			s := NewAIState()
			s.Active = &Turn{TurnID: "T1", Input: TurnInput{ID: "m1", Role: RoleUser, Generate: true}, Phase: PhaseRunning}
			s.foldRequested("Q1", GenerationRequested{ResponseMessageID: "R1", TurnID: "T1"})
			s.foldStarted(GenerationStarted{GenerationID: "G1", RequestID: "Q1", Attempt: 1})
			raws := make([]json.RawMessage, len(open))
			for i, c := range open {
				raws[i] = json.RawMessage(c)
			}
			if err := s.foldProgress("G1", 0, raws, nil); err != nil {
				t.Fatal(err)
			}
			end(s)
			msg := s.message("R1")
			if len(msg.Parts) != 3 {
				t.Fatalf("parts %+v, want step-start, reasoning, text", msg.Parts)
			}
			for _, p := range msg.Parts[1:] {
				if p.State != "done" {
					t.Errorf("%s part %q is %q after the %s, want done", p.Type, p.Text, p.State, name)
				}
			}
		})
	}
}
