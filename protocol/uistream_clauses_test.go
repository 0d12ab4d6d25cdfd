// UIStream clause by clause: metadata, open parts at the finish, errors,
// cuts in the first step, reasoning IDs, provider metadata, citations, tool
// calls from every state, approvals. Written against the mutation run's
// survivors of uistream.go (docs/contributing.md).

package protocol

import (
	"encoding/json"
	"slices"
	"testing"
)

// assertRebuilds rebuilds chunks with A2's fold and compares the parts with want.
func assertRebuilds(t *testing.T, chunks []UIMessageChunk, want []Part) {
	t.Helper()
	got, _ := json.Marshal(rebuildChunks(t, chunks))
	w, _ := json.Marshal(want)
	if !equalJSON(t, got, w) {
		t.Fatalf("rebuilt\n %s\nwant\n %s", got, w)
	}
}

// feed feeds states to a new UIStream and returns its chunks (no Finish).
func feed(t *testing.T, states ...*UIMessage) []UIMessageChunk {
	t.Helper()
	u := NewUIStream("R1")
	var all []UIMessageChunk
	for i, m := range states {
		all = append(all, u.Update(m)...)
		if u.Broken() {
			t.Fatalf("state %d: broken", i)
		}
	}
	return all
}

func chunkTypes(cs []UIMessageChunk) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Type)
	}
	return out
}

var stepStart = Part{Type: PartStepStart}

// uistream.go:51:70 CONDITIONALS_NEGATION
func TestUIStreamSendsMessageMetadataOnce(t *testing.T) {
	u := NewUIStream("R1")
	m := msgOf(stepStart)
	m.Metadata = json.RawMessage(`{"model":"m1"}`)
	var meta []string
	for range 2 {
		for _, c := range u.Update(m) {
			if c.Type == ChunkMessageMetadata {
				meta = append(meta, string(c.MessageMeta))
			}
		}
	}
	if len(meta) != 1 || meta[0] != `{"model":"m1"}` {
		t.Fatalf("message-metadata chunks %q, want one carrying the metadata", meta)
	}
}

// uistream.go:110:14, 110:36, 110:65 CONDITIONALS_NEGATION. The chat route
// finishes a broken stream with Finish("error", ...): the parts still open on
// the client (here a reasoning and a text part) end.
func TestUIStreamFinishEndsOpenParts(t *testing.T) {
	open := func(first string) *UIMessage {
		return msgOf(stepStart, Part{Type: PartText, Text: first, State: "done"}, stepStart,
			Part{Type: PartReasoning, ID: "r1", Text: "hm", State: "streaming"},
			Part{Type: PartText, Text: "b", State: "streaming"})
	}
	u := NewUIStream("R1")
	all := u.Update(open("a"))
	all = append(all, u.Update(open("x"))...) // a change in an earlier step
	if !u.Broken() {
		t.Fatal("not broken")
	}
	all = append(all, u.Finish("error", "changed")...)
	assertRebuilds(t, all, []Part{stepStart, {Type: PartText, Text: "a", State: "done"}, stepStart,
		{Type: PartReasoning, ID: "r1", Text: "hm", State: "done"}, {Type: PartText, Text: "b", State: "done"}})
}

// uistream.go:119:15 CONDITIONALS_NEGATION
func TestUIStreamFinishSendsTheErrorOnlyOnFailure(t *testing.T) {
	errorOf := func(cs []UIMessageChunk) (string, bool) {
		for _, c := range cs {
			if c.Type == ChunkError {
				return c.ErrorText, true
			}
		}
		return "", false
	}
	if _, ok := errorOf(NewUIStream("R1").Finish("stop", "")); ok {
		t.Fatal("an error chunk ends a stream that did not fail")
	}
	if text, ok := errorOf(NewUIStream("R1").Finish("error", "boom")); !ok || text != "boom" {
		t.Fatalf("error chunk %q (%v), want boom", text, ok)
	}
}

// uistream.go:136:29 CONDITIONALS_BOUNDARY: a Stop's cut in the first step
// (its step-start is part 0); likewise a failed first attempt that is retried.
func TestUIStreamCutInTheFirstStep(t *testing.T) {
	last := msgOf(stepStart, Part{Type: PartText, Text: "He", State: "done"})
	all := feed(t, msgOf(stepStart, Part{Type: PartText, Text: "Hello", State: "streaming"}), last)
	assertRebuilds(t, all, last.Parts) // the mutant rebuilds [step-start, step-start, text]
	retried := msgOf(stepStart, Part{Type: PartText, Text: "Hi", State: "streaming"})
	all = feed(t, msgOf(stepStart, Part{Type: PartText, Text: "Part", State: "streaming"}), msgOf(), retried)
	assertRebuilds(t, all, retried.Parts)
}

// uistream.go:152:12 CONDITIONALS_NEGATION
func TestUIStreamReasoningKeepsItsID(t *testing.T) {
	last := msgOf(stepStart, Part{Type: PartReasoning, ID: "r1", Text: "think", State: "done"},
		Part{Type: PartText, Text: "ok", State: "done"})
	all := feed(t, msgOf(stepStart, Part{Type: PartReasoning, ID: "r1", Text: "th", State: "streaming"}), last)
	assertRebuilds(t, all, last.Parts)
}

// uistream.go:169:33 CONDITIONALS_NEGATION: a Stop cuts before the chunk
// that brought a reasoning part's provider metadata (an empty delta with a
// signature): the metadata is taken back, not kept on the client.
func TestUIStreamTakesBackProviderMetadata(t *testing.T) {
	sig := json.RawMessage(`{"p":{"signature":"s"}}`)
	last := msgOf(stepStart, Part{Type: PartReasoning, ID: "r1", Text: "th", State: "done"})
	all := feed(t, msgOf(stepStart, Part{Type: PartReasoning, ID: "r1", Text: "th", State: "streaming", ProviderMetadata: sig}), last)
	assertRebuilds(t, all, last.Parts)
}

// uistream.go:182:69 CONDITIONALS_BOUNDARY and CONDITIONALS_NEGATION,
// 182:87 CONDITIONALS_NEGATION. UIMessageChunk.Delta is omitempty, so a delta
// with no text has no "delta" field: uiMessageChunkSchema rejects it
// (DefaultChatTransport throws) and an unvalidated readUIMessageStream
// appends "undefined" to the text. A2's fold ignores it, so rebuildChunks
// cannot see it: the chunks are checked.
func TestUIStreamNeverSendsAnEmptyDelta(t *testing.T) {
	sig := json.RawMessage(`{"p":{"id":"x"}}`)
	last := msgOf(stepStart, Part{Type: PartText, Text: "Hi", State: "done", ProviderMetadata: sig})
	all := feed(t,
		msgOf(stepStart, Part{Type: PartText, State: "streaming"}), // only its text-start so far
		msgOf(stepStart, Part{Type: PartText, Text: "Hi", State: "streaming"}),
		last, // the metadata comes with the end
	)
	for _, c := range all {
		if (c.Type == ChunkTextDelta || c.Type == ChunkReasoningDelta) && c.Delta == "" {
			t.Fatalf("%+v: a delta chunk without text", c)
		}
	}
	assertRebuilds(t, all, last.Parts)
}

// uistream.go:188:17 CONDITIONALS_NEGATION
func TestUIStreamSendsCitations(t *testing.T) {
	last := msgOf(stepStart, Part{Type: PartText, Text: "Hi", State: "done", Citations: json.RawMessage(`[{"type":"url","url":"u"}]`)})
	all := feed(t, msgOf(stepStart, Part{Type: PartText, Text: "Hi", State: "streaming"}), last)
	assertRebuilds(t, all, last.Parts)
}

func calcCall(state, output string, prelim *bool) Part {
	p := Part{Type: "tool-calc", ToolCallID: "c1", State: state, Input: json.RawMessage(`{"a":1}`), Preliminary: prelim}
	if output != "" {
		p.Output = json.RawMessage(output)
	}
	return p
}

// uistream.go:265:27 CONDITIONALS_BOUNDARY, 321:48 CONDITIONALS_NEGATION: a
// preliminary output replaced by the final one is updated in place; no
// reset-step (the fold took nothing back) and no replay of the step.
func TestUIStreamUpdatesAToolOutputInPlace(t *testing.T) {
	yes := true
	text := Part{Type: PartText, Text: "Calc.", State: "done"}
	last := msgOf(stepStart, text, calcCall(ToolOutputAvailable, `2`, nil))
	all := feed(t, msgOf(stepStart, text, calcCall(ToolInputAvailable, "", nil)),
		msgOf(stepStart, text, calcCall(ToolOutputAvailable, `1`, &yes)), last)
	if slices.Contains(chunkTypes(all), ChunkResetStep) {
		t.Fatalf("chunks %v: a reset-step for an output update", chunkTypes(all))
	}
	assertRebuilds(t, all, last.Parts)
}

// uistream.go:273:11 CONDITIONALS_NEGATION
func TestUIStreamStartsAStreamingCall(t *testing.T) {
	all := feed(t, msgOf(stepStart, Part{Type: "tool-calc", ToolCallID: "c1", State: ToolInputStreaming,
		Input: json.RawMessage(`{}`), RawInput: json.RawMessage(`"{"`)}))
	assertRebuilds(t, all, []Part{stepStart, {Type: "tool-calc", ToolCallID: "c1", State: ToolInputStreaming}})
}

// uistream.go:278:16 CONDITIONALS_NEGATION, 288:11 CONDITIONALS_NEGATION,
// 305:11 CONDITIONALS_NEGATION (a nil have: the mutant panics). A call whose
// input is available; a stream that starts (resume, or the approval POST)
// from a call that already has its output.
func TestUIStreamSendsACallFromItsState(t *testing.T) {
	for _, p := range []Part{calcCall(ToolInputAvailable, "", nil), calcCall(ToolOutputAvailable, `2`, nil)} {
		m := msgOf(stepStart, p)
		assertRebuilds(t, feed(t, m), m.Parts)
	}
}

// uistream.go:294:23 CONDITIONALS_NEGATION, 299:28 CONDITIONALS_NEGATION (the
// mutant dereferences a nil Approved): the stream that ends waiting for an
// approval shows the request.
func TestUIStreamSendsTheApprovalRequest(t *testing.T) {
	req := calcCall(ToolApprovalRequested, "", nil)
	req.Approval = &ToolApproval{ID: "a1", RequestReason: "spends money"}
	u := NewUIStream("R1")
	all := u.Update(msgOf(stepStart, calcCall(ToolInputAvailable, "", nil)))
	all = append(all, u.Update(msgOf(stepStart, req))...)
	all = append(all, u.Finish("tool-calls", "")...)
	assertRebuilds(t, all, []Part{stepStart, req})
}

// uistream.go:299:44 CONDITIONALS_NEGATION (also 299:28): a stream that starts
// from an answered call sends the answer. A2's fold takes an answer from the
// stream only for a provider-executed call, so the rebuilt check uses one and
// the local call is checked on its chunks.
func TestUIStreamSendsTheApprovalAnswer(t *testing.T) {
	yes, no := true, false
	local := calcCall(ToolOutputAvailable, `2`, nil)
	local.Approval = &ToolApproval{ID: "a1", Approved: &yes}
	want := []string{ChunkStart, ChunkStartStep, ChunkToolInputAvailable, ChunkToolApproval, ChunkToolApprovalAnswer, ChunkToolOutput}
	if got := chunkTypes(feed(t, msgOf(stepStart, local))); !slices.Equal(got, want) {
		t.Fatalf("chunks %v, want %v", got, want)
	}
	denied := Part{Type: "tool-search", ToolCallID: "c2", State: ToolOutputDenied, Input: json.RawMessage(`{}`),
		ProviderExecuted: &yes, Approval: &ToolApproval{ID: "a2", Approved: &no, Reason: "policy"}}
	m := msgOf(stepStart, denied)
	assertRebuilds(t, feed(t, m), m.Parts)
}

// uistream.go:321:10, 321:26, 321:48 CONDITIONALS_NEGATION: a change no tool
// chunk can show (the model's stream sent tool-input-available again with
// another input; the fold, like the AI SDK, applies it in place) is taken
// back and sent again, not dropped.
func TestUIStreamResendsAToolChangeNoChunkShows(t *testing.T) {
	changed := calcCall(ToolInputAvailable, "", nil)
	changed.Input = json.RawMessage(`{"a":2}`)
	last := msgOf(stepStart, changed)
	all := feed(t, msgOf(stepStart, calcCall(ToolInputAvailable, "", nil)), last)
	assertRebuilds(t, all, last.Parts)
}

// uistream.go:87 (three CONDITIONALS_NEGATION mutants of the second run):
// a streaming text or reasoning part whose providerMetadata changes with no
// new text sends nothing then, and the change is not lost: the part's end
// carries it. The mutants took the new metadata as sent already, so the
// rebuilt part lacked it.
func TestUIStreamKeepsAMetadataOnlyChangeForThePartsEnd(t *testing.T) {
	sig := json.RawMessage(`{"p":{"signature":"s"}}`)
	for _, typ := range []string{PartText, PartReasoning} {
		part := func(state string, meta json.RawMessage) Part {
			p := Part{Type: typ, Text: "Hi", State: state, ProviderMetadata: meta}
			if typ == PartReasoning {
				p.ID = "r1"
			}
			return p
		}
		last := msgOf(stepStart, part("done", sig))
		u := NewUIStream("R1")
		all := u.Update(msgOf(stepStart, part("streaming", nil)))
		if mid := u.Update(msgOf(stepStart, part("streaming", sig))); len(mid) != 0 {
			t.Fatalf("%s: a metadata-only change mid-stream sent %v", typ, chunkTypes(mid))
		}
		all = append(all, u.Update(last)...)
		assertRebuilds(t, all, last.Parts)
	}
}
