package protocol

import (
	"encoding/json"
	"strconv"
	"testing"
)

// realisticLog builds the log of a session of `turns` turns: each turn is a
// user send, its admission, a model step that streams `chunks` text deltas
// in progress batches of 16 and calls one tool, the tool result, and a
// continuation step that answers in text. Queue edits and a steer appear
// along the way, as they would in a busy chat.
func realisticLog(turns, chunks int) []Event {
	sim := &sim{state: NewAIState()}
	for t := 0; t < turns; t++ {
		_ = sim.command(Command{Action: ActionSend, Message: &UIMessage{Role: RoleUser, Parts: []Part{{Type: PartText, Text: "please look up item " + strconv.Itoa(t)}}}}, Untrusted)
		for step := 0; step < 2; step++ {
			sim.gens++
			gen := "g" + strconv.Itoa(sim.gens)
			_ = sim.worker(Event{Type: TypeGenerationStarted, Payload: mustJSON(GenerationStarted{GenerationID: gen, RequestID: sim.state.ActiveRequestID, Attempt: 1, Model: "openai/gpt-5-mini"})})
			batch := []UIMessageChunk{{Type: ChunkStartStep}, {Type: ChunkTextStart, ID: "t"}}
			from := 0
			for c := 0; c < chunks; c++ {
				batch = append(batch, UIMessageChunk{Type: ChunkTextDelta, ID: "t", Delta: "word "})
				if len(batch) == 16 {
					_ = sim.worker(Event{Type: TypeGenerationProgress, Payload: mustJSON(GenerationProgress{GenerationID: gen, FromIndex: from, Chunks: batch})})
					from += len(batch)
					batch = nil
				}
			}
			batch = append(batch, UIMessageChunk{Type: ChunkTextEnd, ID: "t"})
			if step == 0 {
				batch = append(batch, UIMessageChunk{Type: ChunkToolInputAvailable, ToolCallID: "call" + gen, ToolName: "lookup", Input: json.RawMessage(`{"item":` + strconv.Itoa(t) + `}`)})
			}
			batch = append(batch, UIMessageChunk{Type: ChunkFinishStep})
			_ = sim.worker(Event{Type: TypeGenerationProgress, Payload: mustJSON(GenerationProgress{GenerationID: gen, FromIndex: from, Chunks: batch})})
			_ = sim.worker(Event{Type: TypeGenerationCompleted, Payload: mustJSON(GenerationCompleted{GenerationID: gen, Usage: &Usage{InputTokens: 100, OutputTokens: int64(chunks), TotalTokens: 100 + int64(chunks)}})})
			if step == 0 {
				_ = sim.worker(Event{Type: TypeToolExecCompleted, Payload: mustJSON(ToolExecutionCompleted{ToolCallID: "call" + gen, GenerationID: gen, Output: json.RawMessage(`{"price":42}`)})})
			}
		}
	}
	return sim.log
}

// BenchmarkFold folds a realistic session log from scratch and reports the
// cost per event. Record its figures in docs/benchmarks.md.
func BenchmarkFold(b *testing.B) {
	log := realisticLog(50, 256)
	var bytes int64
	for _, ev := range log {
		bytes += int64(len(ev.Payload))
	}
	b.SetBytes(bytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := NewAIState()
		for _, ev := range log {
			if err := Fold(s, ev); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	perEvent := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / float64(len(log))
	b.ReportMetric(perEvent, "ns/event")
	b.ReportMetric(float64(len(log)), "events/log")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkDecide reports the cost of deciding one command (a send) against
// sessions of growing history: Decide works on a copy of the state, whose
// cost grows with the history; DecideInPlace (the runtime's) decides on the
// state itself.
func BenchmarkDecide(b *testing.B) {
	for _, turns := range []int{10, 100, 1000} {
		log := realisticLog(turns, 16)
		for _, mode := range []string{"copy", "in-place"} {
			b.Run("turns="+strconv.Itoa(turns)+"/"+mode, func(b *testing.B) {
				s := NewAIState()
				for _, ev := range log {
					if err := Fold(s, ev); err != nil {
						b.Fatal(err)
					}
				}
				decide := Decide
				if mode == "in-place" {
					decide = DecideInPlace
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					id := "c-bench-" + strconv.Itoa(i)
					cmd := Event{ID: id, Type: TypeControlRequested, Session: "s1",
						Payload: mustJSON(Command{Action: ActionSend, Message: &UIMessage{ID: id, Role: RoleUser, Parts: []Part{{Type: PartText, Text: "hi"}}}})}
					if _, err := decide(Policy{}, s, cmd); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkStateCopy compares Clone with StepCopy (a model step's copy of
// its frontier) on the state of a long session.
func BenchmarkStateCopy(b *testing.B) {
	s := NewAIState()
	for _, ev := range realisticLog(1000, 16) {
		if err := Fold(s, ev); err != nil {
			b.Fatal(err)
		}
	}
	for _, mode := range []string{"clone", "step-copy"} {
		b.Run("turns=1000/"+mode, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if mode == "clone" {
					_ = s.Clone()
				} else {
					_ = s.StepCopy()
				}
			}
		})
	}
}
