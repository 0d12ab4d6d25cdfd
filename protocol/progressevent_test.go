package protocol

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestNewProgressEventFoldsLikeItsPayload: a progress event built by
// NewProgressEvent carries its payload decoded for Fold; folding it must
// give the same state, byte for byte, as folding the same payload read back
// from a store, including chunks whose JSON does not decode to themselves
// (raw JSON with spaces, which encoding compacts; text that is not valid
// UTF-8, which encoding replaces). Its payload must be json.Marshal's.
func TestNewProgressEventFoldsLikeItsPayload(t *testing.T) {
	typed, plain := NewAIState(), NewAIState()
	progress := 0
	for _, ev := range realisticLog(3, 40) {
		typedEv, plainEv := ev, ev
		if ev.Type == TypeGenerationProgress {
			progress++
			var p GenerationProgress
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				t.Fatal(err)
			}
			for i := range p.Chunks {
				c := &p.Chunks[i]
				if len(c.Input) > 0 {
					c.Input = json.RawMessage(" { \"item\" :\n " + string(c.Input[len(`{"item":`):]))
				}
				if c.Type == ChunkTextDelta && i%5 == 0 {
					c.Delta += "\xff"
				}
			}
			want, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			typedEv, err = NewProgressEvent(ev.ID, ev.Cause, p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(typedEv.Payload, want) {
				t.Fatalf("progress %s: payload\n%s\nwant json.Marshal's\n%s", ev.ID, typedEv.Payload, want)
			}
			plainEv = typedEv.Plain()
		}
		if err := Fold(typed, typedEv); err != nil {
			t.Fatalf("fold the built %s: %v", ev.Type, err)
		}
		if ev.Type == TypeGenerationProgress {
			// Once folded, the chunks may be reused (as the runtime does):
			// the Plain copy decodes its payload and does not see them.
			clear(typedEv.progress.chunks)
		}
		if err := Fold(plain, plainEv); err != nil {
			t.Fatalf("fold the stored %s: %v", ev.Type, err)
		}
	}
	if progress == 0 {
		t.Fatal("the log has no progress event")
	}
	a, _ := json.Marshal(typed)
	b, _ := json.Marshal(plain)
	if !bytes.Equal(a, b) {
		t.Fatalf("folding built progress events gives\n%s\nfolding their payloads gives\n%s", a, b)
	}
	if !bytes.Contains(a, []byte("\uFFFD")) || !bytes.Contains(a, []byte(`{"item":`)) {
		t.Fatal("the mutated chunks did not reach the state; the test checks nothing")
	}
}
