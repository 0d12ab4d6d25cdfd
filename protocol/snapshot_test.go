package protocol

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"testing"
)

// Snapshots: restore(snapshot at i) + fold(tail) equals fold(whole log),
// byte for byte, at every cut of generated logs; Pending agrees too, so a
// restarted runtime does exactly the work an uninterrupted one would.
// R-STATE-23 R-STOP-16 R-CONTRACT-11
func TestSnapshotRestoreEqualsReplay(t *testing.T) {
	seeds := uint64(40)
	// The mutation run (docs/contributing.md) folds fewer random sessions.
	if v, err := strconv.Atoi(os.Getenv("A2_RANDOM_SESSIONS")); err == nil && v > 0 && v < 40 {
		seeds = uint64(v)
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		s := newSim()
		r := newRand(seed)
		for i := 0; i < 120; i++ {
			if err := s.step(r); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
		full := foldAll(t, s.log)
		want, _ := MarshalState(full)
		wantWork, _ := json.Marshal(Pending(WorkPolicy{}, full))
		for cut := 0; cut <= len(s.log); cut += 1 + len(s.log)/25 {
			prefix := foldAll(t, s.log[:cut])
			snap, err := MarshalState(prefix)
			if err != nil {
				t.Fatal(err)
			}
			restored, err := UnmarshalState(snap)
			if err != nil {
				t.Fatalf("seed %d cut %d: %v", seed, cut, err)
			}
			if w1, w2 := mustJSON(Pending(WorkPolicy{}, prefix)), mustJSON(Pending(WorkPolicy{}, restored)); !bytes.Equal(w1, w2) {
				t.Fatalf("seed %d cut %d: Pending after restore differs:\n%s\n%s", seed, cut, w1, w2)
			}
			for _, ev := range s.log[cut:] {
				if err := Fold(restored, ev); err != nil {
					t.Fatalf("seed %d cut %d: %v", seed, cut, err)
				}
			}
			got, _ := MarshalState(restored)
			if !bytes.Equal(got, want) {
				t.Fatalf("seed %d (A2_SEED to replay) cut %d: restore + tail differs from the full fold", seed, cut)
			}
			if gotWork, _ := json.Marshal(Pending(WorkPolicy{}, restored)); !bytes.Equal(gotWork, wantWork) {
				t.Fatalf("seed %d cut %d: Pending differs", seed, cut)
			}
		}
	}
}

func foldAll(t testing.TB, log []Event) *AIState {
	s := NewAIState()
	for _, ev := range log {
		if err := Fold(s, ev); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// responseLog is one turn whose single model step streams n text chunks in
// progress batches of 128 (the default maxChunks).
func responseLog(n int) []Event {
	s := newSim()
	_ = s.command(Command{Action: ActionSend, Message: &UIMessage{Role: RoleUser, Parts: []Part{{Type: PartText, Text: "write a lot"}}}}, Untrusted)
	_ = s.worker(Event{Type: TypeGenerationStarted, Payload: mustJSON(GenerationStarted{GenerationID: "g1", RequestID: s.state.ActiveRequestID, Attempt: 1})})
	batch := []UIMessageChunk{{Type: ChunkStartStep}, {Type: ChunkTextStart, ID: "t"}}
	from := 0
	for i := 0; i < n; i++ {
		batch = append(batch, UIMessageChunk{Type: ChunkTextDelta, ID: "t", Delta: "tok" + strconv.Itoa(i%10) + " "})
		if len(batch) == 128 || i == n-1 {
			_ = s.worker(Event{Type: TypeGenerationProgress, Payload: mustJSON(GenerationProgress{GenerationID: "g1", FromIndex: from, Chunks: batch})})
			from += len(batch)
			batch = nil
		}
	}
	return s.log
}

// BenchmarkFoldResponse folds one streamed response of 1k, 10k and 100k
// chunks: the cost per chunk must stay flat (the fold is linear in the
// length of a response).
func BenchmarkFoldResponse(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		log := responseLog(n)
		b.Run("chunks="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				s := NewAIState()
				for _, ev := range log {
					if err := Fold(s, ev); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/chunk")
		})
	}
}

// BenchmarkSnapshotRestore compares restoring a snapshot of a 100k-event
// session with replaying its log.
func BenchmarkSnapshotRestore(b *testing.B) {
	log := realisticLog(2600, 220) // a little over 100k events
	if len(log) < 100000 {
		b.Fatalf("only %d events", len(log))
	}
	log = log[:100000]
	state := foldAll(b, log)
	snap, err := MarshalState(state)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("replay", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			foldAll(b, log)
		}
		b.ReportMetric(float64(len(log)), "events")
	})
	b.Run("restore", func(b *testing.B) {
		b.SetBytes(int64(len(snap)))
		for i := 0; i < b.N; i++ {
			if _, err := UnmarshalState(snap); err != nil {
				b.Fatal(err)
			}
		}
	})
}
