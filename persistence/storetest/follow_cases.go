package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// followCases: persistence.Follow, which uses the store's own Tail when it
// is a persistence.Follower and reads and waits otherwise. Either way a
// Tail returns every durable event after its start once, in order.
var followCases = []testCase{
	{name: "follow/history-then-live", run: func(e *env) {
		e.append("s1", 0, evs("a", 5)...)
		tail := e.follow("s1", 2)
		got := e.next(tail, 3)
		appended := make(chan error, 1)
		go func() {
			_, err := e.s.Append(e.ctx, "s1", 5, evs("b", 2))
			appended <- err
		}()
		got = append(got, e.next(tail, 2)...)
		if err := <-appended; err != nil {
			e.t.Fatal(err)
		}
		if want := e.log("s1")[2:]; !sameEvents(got, want) {
			e.t.Fatalf("the tail from index 2 returned %v, want indexes 3..7 as stored", indexes(got))
		}
	}},
	{name: "follow/a-follower-that-does-not-read-misses-nothing", run: func(e *env) {
		tail := e.follow("s1", 0)
		e.append("s1", 0, evs("first", 1)...)
		got := e.next(tail, 1) // the tail has caught up and is live
		// Many more batches than any buffer holds, while nobody reads.
		for i := 1; i <= 300; i++ {
			e.append("s1", uint64(i), ev(fmt.Sprintf("e-%d", i), "test.note", fmt.Sprintf(`{"n":%d}`, i)))
		}
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		defer cancel()
		for len(got) < 301 {
			evs, err := tail.Next(ctx)
			if err != nil {
				e.t.Fatalf("a lagging tail stopped after index %d of 301: %v", len(got), err)
			}
			got = append(got, evs...)
		}
		if !sameEvents(got, e.log("s1")) {
			e.t.Fatalf("a lagging tail returned indexes %v, want 1..301", indexes(got))
		}
	}},
	{name: "follow/followers-see-every-index-once-while-writers-race", run: func(e *env) {
		const total = 240
		var wg sync.WaitGroup
		results := make([][]protocol.Event, 3)
		tails := make([]persistence.Tail, len(results))
		for f := range tails {
			tails[f] = e.follow("race", 0)
		}
		for f := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for len(results[f]) < total {
					evs, err := tails[f].Next(e.ctx)
					if err != nil {
						e.t.Errorf("follower %d: %v", f, err)
						return
					}
					results[f] = append(results[f], evs...)
				}
			}()
		}
		raceWriters(e, "race", 4, total)
		wg.Wait()
		final := e.log("race")
		for f, got := range results {
			if !sameEvents(got, final) {
				e.t.Fatalf("follower %d returned indexes %v, want 1..%d as stored", f, indexes(got), total)
			}
		}
	}},
	{name: "follow/cancelled-then-resumed", run: func(e *env) {
		e.append("s1", 0, evs("a", 1)...)
		tail := e.follow("s1", 1)
		ctx, cancel := context.WithTimeout(e.ctx, 20*time.Millisecond)
		defer cancel()
		if got, err := tail.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
			e.t.Fatalf("Next on a caught-up tail past its deadline = %v, %v; want context.DeadlineExceeded", indexes(got), err)
		}
		e.append("s1", 1, evs("b", 1)...)
		if got := e.next(tail, 1); got[0].Index != 2 {
			e.t.Fatalf("after a cancelled Next the tail returned index %d, want 2", got[0].Index)
		}
	}},
	{name: "follow/unblocked-by-close", run: func(e *env) {
		tail := e.follow("s1", 0)
		unblockedByClose(e, "Next", func() error {
			_, err := tail.Next(e.ctx)
			return err
		})
	}},
	{name: "follow/invalid-session", run: func(e *env) {
		for _, session := range []string{"", "\xff"} {
			tail, err := persistence.Follow(e.s, session, 0)
			if tail != nil {
				tail.Close()
			}
			wantErr(e.t, fmt.Sprintf("Follow(%q)", session), err, persistence.ErrInvalid)
		}
	}},
}

// follow starts a Tail of session after after, closed with the case.
func (e *env) follow(session string, after uint64) persistence.Tail {
	e.t.Helper()
	tail, err := persistence.Follow(e.s, session, after)
	if err != nil {
		e.t.Fatalf("Follow(%q, %d): %v", session, after, err)
	}
	e.t.Cleanup(tail.Close)
	return tail
}

// next calls tail.Next until it has returned n events, failing the case on
// an error or on more events than n.
func (e *env) next(tail persistence.Tail, n int) []protocol.Event {
	e.t.Helper()
	var out []protocol.Event
	for len(out) < n {
		got, err := tail.Next(e.ctx)
		if err != nil {
			e.t.Fatalf("Next after %d of %d events: %v", len(out), n, err)
		}
		if len(got) == 0 {
			e.t.Fatalf("Next returned no event and no error after %d of %d events", len(out), n)
		}
		out = append(out, got...)
	}
	if len(out) != n {
		e.t.Fatalf("Next returned %d events, want %d", len(out), n)
	}
	return out
}

func indexes(evs []protocol.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.Index
	}
	return out
}
