package storetest

import (
	"fmt"
	"math"
	"slices"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// readCases: ranged reads and their bounds.
var readCases = []testCase{
	{name: "read/range-after-and-limit", run: func(e *env) {
		all := e.append("s1", 0, evs("a", 10)...)
		for _, tc := range []struct {
			after uint64
			limit int
			want  []protocol.Event
		}{
			{0, 10, all},
			{3, 4, all[3:7]},
			{9, 5, all[9:]},
			{0, 1, all[:1]},
			{5, 1, all[5:6]},
			{2, 1 << 30, all[2:]},
			{2, math.MaxInt, all[2:]},
		} {
			got, err := e.s.Read(e.ctx, "s1", tc.after, tc.limit)
			if err != nil {
				e.t.Fatalf("Read(after %d, limit %d): %v", tc.after, tc.limit, err)
			}
			if !sameEvents(got, tc.want) {
				e.t.Fatalf("Read(after %d, limit %d) = %s, want %s", tc.after, tc.limit, showAll(got), showAll(tc.want))
			}
		}
	}},
	{name: "read/at-or-beyond-the-end-is-empty", run: func(e *env) {
		e.append("s1", 0, evs("a", 3)...)
		for _, after := range []uint64{3, 4, 1000, math.MaxUint64} {
			got, err := e.s.Read(e.ctx, "s1", after, 10)
			if err != nil || len(got) != 0 {
				e.t.Fatalf("Read(after %d) of a 3-event log = %s, %v; want empty, no error", after, showAll(got), err)
			}
		}
	}},
	{name: "read/limit-zero-is-empty", run: func(e *env) {
		e.append("s1", 0, evs("a", 3)...)
		got, err := e.s.Read(e.ctx, "s1", 0, 0)
		if err != nil || len(got) != 0 {
			e.t.Fatalf("Read(limit 0) = %s, %v; want empty, no error", showAll(got), err)
		}
	}},
	{name: "read/unknown-session-is-empty", run: func(e *env) {
		e.append("s1", 0, evs("a", 1)...)
		got, err := e.s.Read(e.ctx, "nobody", 0, 10)
		if err != nil || len(got) != 0 {
			e.t.Fatalf("Read of an unknown session = %s, %v; want empty, no error", showAll(got), err)
		}
		if n := e.lastIndex("nobody"); n != 0 {
			e.t.Fatalf("LastIndex of an unknown session = %d, want 0", n)
		}
	}},
	{name: "read/sessions-are-separate-logs", run: func(e *env) {
		// Session IDs that are prefixes of each other must not bleed into one
		// another's reads.
		names := []string{"s", "s1", "s10", "s1/x", "ß", "s\x00"}
		want := map[string][]protocol.Event{}
		for round := range 3 {
			for i, name := range names {
				got := e.append(name, uint64(round), evs(fmt.Sprintf("r%d-%d", round, i), 1)...)
				want[name] = append(want[name], got...)
			}
		}
		for _, name := range names {
			e.wantLog(name, want[name])
		}
	}},
}

// lookupCases: Lookup by event ID across sessions.
var lookupCases = []testCase{
	{name: "lookup/order-of-ids-across-sessions-skipping-missing", run: func(e *env) {
		a := e.append("s1", 0, evs("a", 2)...)
		b := e.append("s2", 0, evs("b", 1)...)
		got := e.lookup("b-1", "missing", "a-2", "", "a-1", "b-1")
		want := []protocol.Event{b[0], a[1], a[0], b[0]}
		if !sameEvents(got, want) {
			e.t.Fatalf("Lookup = %s, want %s", showAll(got), showAll(want))
		}
		if got := e.lookup(); len(got) != 0 {
			e.t.Fatalf("Lookup() = %s, want empty", showAll(got))
		}
		if got := e.lookup("missing"); len(got) != 0 {
			e.t.Fatalf("Lookup(missing) = %s, want empty", showAll(got))
		}
	}},
}

// sessionsCases: listing and paging session IDs.
var sessionsCases = []testCase{
	{name: "sessions/ascending-and-paged", run: func(e *env) {
		names := []string{"b", "a", "ab", "a\x00", "zz", "c", "ä", "a/1", "B"}
		for i, name := range names {
			e.append(name, 0, evs(fmt.Sprintf("e%d", i), 1)...)
		}
		// A session with only a snapshot has no events and is not listed.
		if err := e.s.SaveSnapshot(e.ctx, persistence.Snapshot{Session: "snapshot-only", Reducer: "r", Index: 0, State: []byte("{}")}); err != nil {
			e.t.Fatalf("SaveSnapshot: %v", err)
		}
		want := slices.Clone(names)
		slices.Sort(want)
		all, err := e.s.Sessions(e.ctx, "", 100)
		if err != nil {
			e.t.Fatalf("Sessions: %v", err)
		}
		if !slices.Equal(all, want) {
			e.t.Fatalf("Sessions(\"\", 100) = %q, want %q", all, want)
		}
		for _, page := range []int{1, 2, 4} {
			var got []string
			after := ""
			for {
				p, err := e.s.Sessions(e.ctx, after, page)
				if err != nil {
					e.t.Fatalf("Sessions(%q, %d): %v", after, page, err)
				}
				if len(p) > page {
					e.t.Fatalf("Sessions(%q, %d) returned %d", after, page, len(p))
				}
				if len(p) == 0 {
					break
				}
				got = append(got, p...)
				after = p[len(p)-1]
			}
			if !slices.Equal(got, want) {
				e.t.Fatalf("paging by %d = %q, want %q", page, got, want)
			}
		}
		// Starting after an ID that is not a session.
		got, err := e.s.Sessions(e.ctx, "aa", 3)
		if err != nil || !slices.Equal(got, []string{"ab", "b", "c"}) {
			e.t.Fatalf("Sessions(\"aa\", 3) = %q, %v; want [ab b c]", got, err)
		}
		got, err = e.s.Sessions(e.ctx, "", 0)
		if err != nil || len(got) != 0 {
			e.t.Fatalf("Sessions(limit 0) = %q, %v; want empty", got, err)
		}
	}},
	{name: "sessions/empty-store", run: func(e *env) {
		got, err := e.s.Sessions(e.ctx, "", 10)
		if err != nil || len(got) != 0 {
			e.t.Fatalf("Sessions of an empty store = %q, %v", got, err)
		}
	}},
}
