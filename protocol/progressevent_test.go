package protocol

import (
	"bytes"
	"encoding/json"
	"reflect"
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

// FuzzDeltaChunk: appendDeltaChunk, when it takes a chunk, writes exactly
// json.Marshal's bytes for it; when it does not, it appends nothing.
func FuzzDeltaChunk(f *testing.F) {
	for _, s := range []string{"Hello", "line\nbreak", `"quoted" \ back`, "<b>&amp;</b>", "tab\there\r", "héllo wörld ✓",
		"\x00\x1f", "\xff", "a\u2028b", "", "t1796054852202342578 "} {
		f.Add(ChunkTextDelta, "t0", s)
	}
	f.Add(ChunkReasoningDelta, "", "thinking")
	f.Add("text-<start>", "id\"x", "")
	f.Fuzz(func(t *testing.T, typ, id, delta string) {
		c := UIMessageChunk{Type: typ, ID: id, Delta: delta}
		prefix := []byte("prefix")
		got, ok := appendDeltaChunk(prefix, &c)
		if !ok {
			if string(got) != "prefix" {
				t.Fatalf("declined %+v but appended: %q", c, got)
			}
			return
		}
		want, err := json.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[len(prefix):], want) {
			t.Fatalf("chunk %+v:\n got %s\nwant %s", c, got[len(prefix):], want)
		}
	})
}

// TestOnlyTypeIDDeltaSeesEveryField: setting any field of UIMessageChunk
// other than Type, ID and Delta takes the chunk off appendDeltaChunk's fast
// path, so that a field added to UIMessageChunk cannot be dropped from a
// payload by it.
func TestOnlyTypeIDDeltaSeesEveryField(t *testing.T) {
	base := UIMessageChunk{Type: ChunkTextDelta, ID: "t", Delta: "d"}
	if !onlyTypeIDDelta(&base) {
		t.Fatal("a plain text delta is not taken")
	}
	yes := true
	rt := reflect.TypeOf(base)
	for i := range rt.NumField() {
		name := rt.Field(i).Name
		if name == "Type" || name == "ID" || name == "Delta" {
			continue
		}
		c := base
		f := reflect.ValueOf(&c).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Pointer:
			f.Set(reflect.ValueOf(&yes))
		case reflect.Slice:
			if f.Type().Elem().Kind() == reflect.Uint8 {
				f.SetBytes([]byte(`{}`))
			} else {
				f.Set(reflect.MakeSlice(f.Type(), 1, 1))
			}
		default:
			t.Fatalf("field %s of kind %s: teach this test to set it", name, f.Kind())
		}
		if onlyTypeIDDelta(&c) {
			t.Errorf("a chunk with %s set is taken as a plain delta", name)
		}
	}
}

// BenchmarkNewProgressEvent builds a progress event of 10 text deltas (one
// network read of a provider's stream), through appendDeltaChunk and, as
// the baseline in the same run, through encoding/json alone.
func BenchmarkNewProgressEvent(b *testing.B) {
	chunks := make([]UIMessageChunk, 10)
	for i := range chunks {
		chunks[i] = UIMessageChunk{Type: ChunkTextDelta, ID: "t0", Delta: " the quick brown fox"}
	}
	p := GenerationProgress{GenerationID: "a2.ai:0123456789abcdef", FromIndex: 42, Chunks: chunks}
	b.Run("NewProgressEvent", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := NewProgressEvent("a2.ai:p", "a2.ai:c", p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
