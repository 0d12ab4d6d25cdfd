package storetest

import (
	"strings"
	"sync"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// idempotencyCases: identical resubmissions replay (R-LOG-09); IDs are
// unique across the store (R-LOG-01).
var idempotencyCases = []testCase{
	{name: "idempotency/R-LOG-09/identical-batch-replays-whatever-expected", run: func(e *env) {
		first := e.append("s1", 0, evs("a", 3)...)
		second := e.append("s1", 3, evs("b", 1)...)
		want := append(append([]protocol.Event(nil), first...), second...)
		// Stale, current and future expected indexes all replay.
		for _, expected := range []uint64{0, 3, 4, 999} {
			got, err := e.s.Append(e.ctx, "s1", expected, evs("a", 3))
			if err != nil {
				e.t.Fatalf("identical resubmission at expected %d: %v", expected, err)
			}
			if !sameEvents(got, first) {
				e.t.Fatalf("replay at expected %d returned %s, want the stored %s", expected, showAll(got), showAll(first))
			}
		}
		e.wantLog("s1", want)
	}},
	{name: "idempotency/R-LOG-09/replay-returns-original-index-and-time", run: func(e *env) {
		first := e.append("s1", 0, ev("x", "test.note", `{"v":1}`))
		e.append("s1", 1, evs("later", 5)...)
		resubmitted := ev("x", "test.note", `{"v":1}`)
		resubmitted.Session = "s1" // naming its own session is allowed
		got, err := e.s.Append(e.ctx, "s1", 6, []protocol.Event{resubmitted})
		if err != nil {
			e.t.Fatalf("resubmission: %v", err)
		}
		if !sameEvents(got, first) {
			e.t.Fatalf("replay returned %s, want %s", showAll(got), showAll(first))
		}
		if n := e.lastIndex("s1"); n != 6 {
			e.t.Fatalf("LastIndex after a replay = %d, want 6", n)
		}
	}},
	{name: "idempotency/R-LOG-09/equal-json-payload-replays", run: func(e *env) {
		first := e.append("s1", 0, ev("x", "test.note", `{"a":1,"b":[true,null]}`))
		got, err := e.s.Append(e.ctx, "s1", 1, []protocol.Event{ev("x", "test.note", ` { "b" : [true, null], "a" : 1 } `)})
		if err != nil {
			e.t.Fatalf("resubmission with reformatted JSON: %v", err)
		}
		if !sameEvents(got, first) {
			e.t.Fatalf("replay returned %s, want the stored bytes %s", showAll(got), showAll(first))
		}
		e.wantLog("s1", first)
	}},
	{name: "idempotency/R-LOG-09/subset-of-stored-batch-replays-in-request-order", run: func(e *env) {
		first := e.append("s1", 0, evs("a", 4)...)
		all := evs("a", 4)
		got, err := e.s.Append(e.ctx, "s1", 4, []protocol.Event{all[3], all[1]})
		if err != nil {
			e.t.Fatalf("resubmitting a subset: %v", err)
		}
		if !sameEvents(got, []protocol.Event{first[3], first[1]}) {
			e.t.Fatalf("replay returned %s, want events 4 and 2 as stored", showAll(got))
		}
		e.wantLog("s1", first)
	}},
	{name: "idempotency/R-LOG-09/replay-spans-batches", run: func(e *env) {
		a := e.append("s1", 0, ev("x", "t", `1`))
		b := e.append("s1", 1, ev("y", "t", `2`))
		got, err := e.s.Append(e.ctx, "s1", 0, []protocol.Event{ev("x", "t", `1`), ev("y", "t", `2`)})
		if err != nil {
			e.t.Fatalf("resubmitting events of two batches: %v", err)
		}
		if !sameEvents(got, append(a, b...)) {
			e.t.Fatalf("replay returned %s", showAll(got))
		}
	}},
	{name: "idempotency/R-LOG-01/ids-are-unique-across-sessions", run: func(e *env) {
		s1 := e.append("s1", 0, ev("shared", "test.note", `{}`))
		// The same ID in another session is a reuse with a different session,
		// even with identical type and payload.
		_, err := e.s.Append(e.ctx, "s2", 0, []protocol.Event{ev("shared", "test.note", `{}`)})
		wantErr(e.t, "same ID appended to another session", err, persistence.ErrPartialDuplicateBatch)
		e.wantLog("s2", nil)
		e.wantLog("s1", s1)
		// Each session replays only its own events.
		e.append("s2", 0, ev("own", "test.note", `{}`))
		if got, err := e.s.Append(e.ctx, "s2", 0, []protocol.Event{ev("own", "test.note", `{}`)}); err != nil || len(got) != 1 || got[0].Session != "s2" {
			e.t.Fatalf("replay in s2: %s, %v", showAll(got), err)
		}
	}},
	{name: "idempotency/R-LOG-01/concurrent-same-new-id-in-many-sessions-stored-once", run: func(e *env) {
		const sessions = 8
		for round := range 4 {
			id := "race-" + string(rune('a'+round))
			errs := make([]error, sessions)
			var wg sync.WaitGroup
			for i := range sessions {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = e.s.Append(e.ctx, sessionName(i), uint64(round), []protocol.Event{ev(id, "test.note", `{}`)})
				}()
			}
			wg.Wait()
			winners := 0
			for i := range sessions {
				if errs[i] == nil {
					winners++
					continue
				}
				wantErr(e.t, "session that lost the ID race", errs[i], persistence.ErrPartialDuplicateBatch)
			}
			if winners != 1 {
				e.t.Fatalf("round %d: ID %q was stored by %d sessions, want 1", round, id, winners)
			}
			got := e.lookup(id)
			if len(got) != 1 {
				e.t.Fatalf("Lookup(%q) = %s, want one event", id, showAll(got))
			}
			// Losers append a filler so every session stays at the same index
			// for the next round.
			for i := range sessions {
				if sessionName(i) != got[0].Session {
					e.append(sessionName(i), uint64(round), ev(id+"-filler-"+sessionName(i), "test.note", `{}`))
				}
			}
		}
	}},
}

func sessionName(i int) string { return "session-" + string(rune('a'+i)) }

// partialDuplicateCases: reuse with different content, type or session, and
// batches mixing stored and new events, fail whole (R-LOG-10, OQ-36).
var partialDuplicateCases = []testCase{
	{name: "partial-duplicate/R-LOG-10/different-payload", run: func(e *env) {
		rejectsReuse(e, ev("x", "test.note", `{"v":1}`), "s1", ev("x", "test.note", `{"v":2}`))
	}},
	{name: "partial-duplicate/R-LOG-10/different-type", run: func(e *env) {
		rejectsReuse(e, ev("x", "test.note", `{"v":1}`), "s1", ev("x", "test.other", `{"v":1}`))
	}},
	{name: "partial-duplicate/R-LOG-10/different-session", run: func(e *env) {
		rejectsReuse(e, ev("x", "test.note", `{"v":1}`), "s2", ev("x", "test.note", `{"v":1}`))
	}},
	{name: "partial-duplicate/R-LOG-10/stored-then-new", run: func(e *env) {
		stored := e.append("s1", 0, evs("a", 2)...)
		mixed := append(evs("a", 1), ev("new", "test.note", `{}`))
		_, err := e.s.Append(e.ctx, "s1", 2, mixed)
		wantPartial(e, err)
		e.wantLog("s1", stored)
		if got := e.lookup("new"); len(got) != 0 {
			e.t.Fatalf("the new event of a rejected batch is stored: %s", showAll(got))
		}
	}},
	{name: "partial-duplicate/R-LOG-10/new-then-stored", run: func(e *env) {
		stored := e.append("s1", 0, evs("a", 2)...)
		mixed := []protocol.Event{ev("new", "test.note", `{}`), evs("a", 2)[1]}
		_, err := e.s.Append(e.ctx, "s1", 2, mixed)
		wantPartial(e, err)
		e.wantLog("s1", stored)
		if got := e.lookup("new"); len(got) != 0 {
			e.t.Fatalf("the new event of a rejected batch is stored: %s", showAll(got))
		}
	}},
	{name: "partial-duplicate/R-LOG-10/one-conflict-among-identical-duplicates", run: func(e *env) {
		stored := e.append("s1", 0, evs("a", 3)...)
		batch := evs("a", 3)
		batch[2].Payload = []byte(`{"changed":true}`)
		_, err := e.s.Append(e.ctx, "s1", 3, batch)
		wantPartial(e, err)
		e.wantLog("s1", stored)
	}},
	{name: "partial-duplicate/R-LOG-10/checked-before-the-index", run: func(e *env) {
		stored := e.append("s1", 0, ev("x", "test.note", `{"v":1}`))
		// A conflicting reuse is PARTIAL_DUPLICATE_BATCH whether the expected
		// index is right or stale, so a caller learns the real problem.
		for _, expected := range []uint64{0, 1, 7} {
			_, err := e.s.Append(e.ctx, "s1", expected, []protocol.Event{ev("x", "test.note", `{"v":2}`)})
			wantPartial(e, err)
		}
		e.wantLog("s1", stored)
	}},
}

// rejectsReuse stores first in s1, then appends reuse to session and expects
// PARTIAL_DUPLICATE_BATCH with both logs unchanged.
func rejectsReuse(e *env, first protocol.Event, session string, reuse protocol.Event) {
	e.t.Helper()
	stored := e.append("s1", 0, first)
	var before []protocol.Event
	if session != "s1" {
		before = e.append(session, 0, ev("other", "test.note", `{}`))
	}
	_, err := e.s.Append(e.ctx, session, e.lastIndex(session), []protocol.Event{reuse})
	wantPartial(e, err)
	e.wantLog("s1", stored)
	if session != "s1" {
		e.wantLog(session, before)
	}
	got := e.lookup(first.ID)
	if len(got) != 1 || !sameEvent(got[0], stored[0]) {
		e.t.Fatalf("Lookup(%q) after a rejected reuse = %s, want the original %s", first.ID, showAll(got), show(stored[0]))
	}
}

func wantPartial(e *env, err error) {
	e.t.Helper()
	wantErr(e.t, "conflicting reuse of an event ID", err, persistence.ErrPartialDuplicateBatch)
	if !strings.Contains(err.Error(), "PARTIAL_DUPLICATE_BATCH") {
		e.t.Fatalf("error %q does not carry the code PARTIAL_DUPLICATE_BATCH", err)
	}
}
