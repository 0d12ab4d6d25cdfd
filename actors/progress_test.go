// How a lane's chunks become progress events: ready chunks share one,
// maxDelayMs holds a batch, opening chunks are written at once, and
// recycled chunk buffers are cleared.

package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/a2-runtime/a2/protocol"
)

// R-PROGRESS-02: chunks a model step has at hand together (a stream that
// says it is ready: here a script reply without delay) reach the session
// in one message, so they share the next progress event instead of the
// first riding alone; a batch still holds at most maxChunks.
func TestReadyChunksShareAProgressEvent(t *testing.T) {
	progress := func(words int) []int {
		text := strings.TrimSpace(strings.Repeat("word ", words)) // one delta per word
		f := newFixture(t, `{"replies":[{"text":"`+text+`"}]}`, nil)
		return f.progressSizes("s1")
	}
	// start, start-step, text-start, 40 deltas, text-end, finish-step, finish
	if got := progress(40); len(got) != 1 || got[0] != 46 {
		t.Fatalf("a 46-chunk step at hand was written as progress events of %v chunks, want one of 46", got)
	}
	got := progress(300)
	total := 0
	for _, n := range got {
		total += n
		if n > protocol.DefaultMaxChunks {
			t.Fatalf("a progress event holds %d chunks, over maxChunks", n)
		}
	}
	if total != 306 || len(got) != 3 {
		t.Fatalf("a 306-chunk step at hand was written as progress events of %v chunks, want 128, 128, 50", got)
	}
}

// R-PROGRESS-02 R-PROGRESS-03: with maxDelayMs, chunks collect into fewer
// progress events; without it a batch is written as soon as the previous
// write finishes.
func TestProgressBatchingWithDelay(t *testing.T) {
	text := strings.Repeat("word ", 200)
	count := func(delay int) (events, chunks int) {
		f := newFixture(t, `{"replies":[{"text":"`+text+`","delayMs":1}]}`, func(a *AgentOptions) { a.Progress.MaxDelayMs = delay })
		for _, n := range f.progressSizes("s1") {
			events++
			chunks += n
			if n > protocol.DefaultMaxChunks {
				t.Fatalf("a progress event holds %d chunks", n)
			}
		}
		return events, chunks
	}
	e0, c0 := count(0)
	e50, c50 := count(50)
	t.Logf("maxDelayMs 0: %d events for %d chunks; maxDelayMs 50: %d events for %d chunks", e0, c0, e50, c50)
	if c0 != c50 || c0 < 200 {
		t.Fatalf("chunks lost: %d vs %d", c0, c50)
	}
	if e50 >= e0 {
		t.Fatalf("maxDelayMs did not reduce progress events: %d vs %d", e50, e0)
	}
	// A delay longer than the step: content waits for a boundary chunk, a
	// full batch or the step's end, whatever the pace of the deltas (a
	// streaming lane is no boundary: mutant session.go:518).
	eLong, cLong := count(60_000)
	if cLong != c0 || eLong*10 > e0 {
		t.Fatalf("maxDelayMs 60000: %d progress events for %d chunks, against %d with no delay", eLong, cLong, e0)
	}
}

// The lanes' recycled chunk batches hold on to nothing once recycled:
// writtenBufs extends each batch over what the session's appends wrote
// into its spare capacity (or, once the appends moved to an array of their
// own, over its whole capacity), and recycleChunkBufs clears that.
func TestRecycledChunkBatchesAreCleared(t *testing.T) {
	chunk := func(d string) protocol.UIMessageChunk {
		return protocol.UIMessageChunk{Type: protocol.ChunkTextDelta, ID: "t", Delta: d}
	}
	for _, tc := range []struct {
		name   string
		first  int // capacity of the first batch
		later  int // chunks handed over after it, in batches of one
		inside bool
	}{
		{"one hand-over", 16, 0, true},
		{"appended in place", 16, 5, true},
		{"appended past the first batch's capacity", 4, 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := append(make([]protocol.UIMessageChunk, 0, tc.first), chunk("a"))
			bufs := [][]protocol.UIMessageChunk{first}
			chunks := first // as onLane does: the first hand-over, then appends
			for i := range tc.later {
				b := []protocol.UIMessageChunk{chunk(fmt.Sprint(i))}
				bufs = append(bufs, b)
				chunks = append(chunks, b...)
			}
			if inside := &chunks[0] == &first[0]; inside != tc.inside {
				t.Fatalf("the concatenation lies in the first batch: %v, want %v", inside, tc.inside)
			}
			whole := first[:cap(first)] // the first batch's array, to inspect
			recycleChunkBufs(writtenBufs(chunks, bufs))
			for i, c := range whole {
				if c.Type != "" || c.ID != "" || c.Delta != "" {
					t.Fatalf("element %d of the first batch's array after recycling: %+v, want cleared", i, c)
				}
			}
		})
	}
}

// progressSizes sends "go" to session, waits for the answer, and returns
// the number of chunks of each progress event of the log, in order.
func (f *fixture) progressSizes(session string) (sizes []int) {
	f.t.Helper()
	f.push(session, protocol.Inputs.Text("m-"+session, "go"))
	f.waitFor(session, "done", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	evs, err := f.store.Read(context.Background(), session, 0, 10000)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == protocol.TypeGenerationProgress {
			var p protocol.GenerationProgress
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				f.t.Fatal(err)
			}
			sizes = append(sizes, len(p.Chunks))
		}
	}
	return sizes
}
