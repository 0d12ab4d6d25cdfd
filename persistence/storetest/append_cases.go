package storetest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// appendCases: conditional append at an expected index.
var appendCases = []testCase{
	{name: "append/first-batch-starts-at-index-1", run: func(e *env) {
		before := time.Now().Add(-time.Minute).UnixMilli()
		batch := evs("a", 3)
		batch[1].Cause = "work-1"
		got := e.append("s1", 0, batch...)
		after := time.Now().Add(time.Minute).UnixMilli()
		for _, g := range got {
			if g.Time < before || g.Time > after {
				e.t.Fatalf("event %s has Time %d, not near the append time", g.ID, g.Time)
			}
		}
		if batch[0].Index != 0 || batch[0].Session != "" || batch[0].Time != 0 {
			e.t.Fatalf("Append modified the caller's slice: %s", show(batch[0]))
		}
		e.wantLog("s1", got)
	}},
	{name: "append/consecutive-batches-are-contiguous", run: func(e *env) {
		var want []protocol.Event
		var last uint64
		for i, n := range []int{1, 4, 2, 1, 7} {
			got := e.append("s1", last, evs(string(rune('a'+i)), n)...)
			want = append(want, got...)
			last += uint64(n)
		}
		e.wantLog("s1", want)
	}},
	{name: "append/caller-index-and-time-are-ignored", run: func(e *env) {
		b := ev("x", "test.note", `{}`)
		b.Index, b.Time, b.Session = 42, 7, "s1"
		got := e.append("s1", 0, b)
		if got[0].Index != 1 || got[0].Time == 7 {
			e.t.Fatalf("Append kept the caller's Index or Time: %s", show(got[0]))
		}
	}},
	{name: "append/expected-ahead-of-log-is-a-conflict", run: func(e *env) {
		first := e.append("s1", 0, evs("a", 2)...)
		_, err := e.s.Append(e.ctx, "s1", 5, evs("b", 1))
		wantErr(e.t, "Append at expected 5 of a log at 2", err, persistence.ErrIndexConflict)
		_, err = e.s.Append(e.ctx, "s2", 1, evs("c", 1))
		wantErr(e.t, "Append at expected 1 of an empty log", err, persistence.ErrIndexConflict)
		e.wantLog("s1", first)
		e.wantLog("s2", nil)
		if got := e.lookup("b-1", "c-1"); len(got) != 0 {
			e.t.Fatalf("rejected events are stored: %s", showAll(got))
		}
	}},
	{name: "append/cancelled-context-writes-nothing", run: func(e *env) {
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		_, err := e.s.Append(ctx, "s1", 0, evs("a", 1))
		if !errors.Is(err, context.Canceled) {
			e.t.Fatalf("Append with a cancelled context: %v, want context.Canceled", err)
		}
		e.wantLog("s1", nil)
	}},
}

// fencingCases: the expected index is the fence against a stale owner.
var fencingCases = []testCase{
	{name: "fencing/stale-expected-is-a-conflict-and-writes-nothing", run: func(e *env) {
		owner1 := e.append("s1", 0, evs("a", 2)...)
		owner2 := e.append("s1", 2, evs("b", 1)...) // the new owner moved on
		_, err := e.s.Append(e.ctx, "s1", 2, evs("stale", 3))
		wantErr(e.t, "Append by a stale owner at expected 2 of a log at 3", err, persistence.ErrIndexConflict)
		e.wantLog("s1", append(owner1, owner2...))
		if got := e.lookup("stale-1", "stale-2", "stale-3"); len(got) != 0 {
			e.t.Fatalf("fenced events are stored: %s", showAll(got))
		}
		// The stale owner catches up and continues.
		e.append("s1", 3, evs("c", 1)...)
	}},
	{name: "fencing/racing-writers-exactly-one-wins", run: func(e *env) {
		const writers = 8
		for round := range 3 {
			expected := uint64(round)
			results := make([][]protocol.Event, writers)
			errs := make([]error, writers)
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[w], errs[w] = e.s.Append(e.ctx, "s1", expected, evs(string(rune('a'+round))+string(rune('a'+w)), 1))
				}()
			}
			wg.Wait()
			winners := 0
			for w := range writers {
				if errs[w] == nil {
					winners++
					if results[w][0].Index != expected+1 {
						e.t.Fatalf("round %d: winner got index %d", round, results[w][0].Index)
					}
					continue
				}
				wantErr(e.t, "losing racer", errs[w], persistence.ErrIndexConflict)
			}
			if winners != 1 {
				e.t.Fatalf("round %d: %d writers succeeded at expected %d, want exactly 1", round, winners, expected)
			}
			if n := e.lastIndex("s1"); n != expected+1 {
				e.t.Fatalf("round %d: LastIndex %d, want %d", round, n, expected+1)
			}
		}
	}},
}
