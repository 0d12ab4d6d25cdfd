package storetest

import (
	"slices"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// workIndexCases: the index of sessions with work (persistence.WorkIndexer),
// for the stores that keep one; a store without it skips them, saying so.
var workIndexCases = []testCase{
	{name: "work-index/marks-follow-the-appends", run: func(e *env) {
		w := e.workIndexer()
		if done, err := w.WorkIndexComplete(e.ctx); err != nil || !done {
			e.t.Fatalf("WorkIndexComplete of a new store = %v, %v; want true", done, err)
		}
		e.appendMarked(w, "s2", 0, true, evs("s2a", 2)...)
		e.appendMarked(w, "s1", 0, true, evs("s1a", 1)...)
		e.appendMarked(w, "s3", 0, false, evs("s3a", 1)...)
		e.wantWork(w, "s1", "s2")
		// Clearing with the append that ends the work.
		e.appendMarked(w, "s2", 2, false, evs("s2b", 1)...)
		e.wantWork(w, "s1")
		// A plain Append leaves the mark as it is.
		e.append("s1", 1, evs("s1b", 1)...)
		e.wantWork(w, "s1")
		// Paging, strictly after.
		e.appendMarked(w, "s4", 0, true, evs("s4a", 1)...)
		if got, err := w.SessionsWithWork(e.ctx, "s1", 1); err != nil || !slices.Equal(got, []string{"s4"}) {
			e.t.Fatalf("SessionsWithWork after s1, limit 1 = %q, %v; want [s4]", got, err)
		}
		if got, err := w.SessionsWithWork(e.ctx, "", 0); err != nil || len(got) != 0 {
			e.t.Fatalf("SessionsWithWork limit 0 = %q, %v", got, err)
		}
		_, err := w.SessionsWithWork(e.ctx, "", -1)
		wantErr(e.t, "SessionsWithWork with a negative limit", err, persistence.ErrInvalid)
	}},
	{name: "work-index/nothing-changes-on-a-refused-append", run: func(e *env) {
		w := e.workIndexer()
		e.appendMarked(w, "s1", 0, true, evs("a", 1)...)
		_, err := e.s.Append(e.ctx, "s1", 0, evs("b", 1), marked(false))
		wantErr(e.t, "a marked append at a stale index", err, persistence.ErrIndexConflict)
		_, err = e.s.Append(e.ctx, "s1", 1, nil, marked(false))
		wantErr(e.t, "a marked append of an empty batch", err, persistence.ErrInvalid)
		e.wantWork(w, "s1")
		// An identical resubmission replays and marks nothing.
		got, err := e.s.Append(e.ctx, "s1", 7, evs("a", 1), marked(false))
		if err != nil || len(got) != 1 || got[0].Index != 1 {
			e.t.Fatalf("resubmission = %s, %v", showAll(got), err)
		}
		e.wantWork(w, "s1")
	}},
	{name: "work-index/mark-is-fenced-by-the-index", run: func(e *env) {
		w := e.workIndexer()
		e.appendMarked(w, "s1", 0, false, evs("a", 2)...)
		wantErr(e.t, "MarkWork at a stale index", w.MarkWork(e.ctx, "s1", 1, true), persistence.ErrIndexConflict)
		e.wantWork(w)
		if err := w.MarkWork(e.ctx, "s1", 2, true); err != nil {
			e.t.Fatalf("MarkWork at the last index: %v", err)
		}
		e.wantWork(w, "s1")
		if has, err := w.HasWork(e.ctx, "s1"); err != nil || !has {
			e.t.Fatalf("HasWork = %v, %v", has, err)
		}
		if has, err := w.HasWork(e.ctx, "nobody"); err != nil || has {
			e.t.Fatalf("HasWork of an unknown session = %v, %v", has, err)
		}
		if err := w.MarkWork(e.ctx, "s1", 2, false); err != nil {
			e.t.Fatalf("MarkWork clearing: %v", err)
		}
		e.wantWork(w)
		wantErr(e.t, "MarkWork of an empty session", w.MarkWork(e.ctx, "", 0, true), persistence.ErrInvalid)
		_, err := w.HasWork(e.ctx, "")
		wantErr(e.t, "HasWork of an empty session", err, persistence.ErrInvalid)
	}},
	{name: "work-index/marks-survive-a-reopen", reopen: true, run: func(e *env) {
		w := e.workIndexer()
		e.appendMarked(w, "s1", 0, true, evs("a", 1)...)
		e.appendMarked(w, "s2", 0, true, evs("b", 1)...)
		e.appendMarked(w, "s2", 1, false, evs("c", 1)...)
		if err := w.MarkWorkIndexComplete(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		e.reopen()
		w = e.workIndexer()
		e.wantWork(w, "s1")
		if done, err := w.WorkIndexComplete(e.ctx); err != nil || !done {
			e.t.Fatalf("WorkIndexComplete after reopen = %v, %v", done, err)
		}
	}},
}

func (e *env) workIndexer() persistence.WorkIndexer {
	e.t.Helper()
	w, ok := e.s.(persistence.WorkIndexer)
	if !ok {
		e.t.Skipf("storetest: %T keeps no work index (persistence.WorkIndexer)", e.s)
	}
	return w
}

func (e *env) appendMarked(w persistence.WorkIndexer, session string, expected uint64, work bool, batch ...protocol.Event) {
	e.t.Helper()
	if _, err := e.s.Append(e.ctx, session, expected, batch, marked(work)); err != nil {
		e.t.Fatalf("Append(%q, %d, WithWork(%v)): %v", session, expected, work, err)
	}
}

func (e *env) wantWork(w persistence.WorkIndexer, sessions ...string) {
	e.t.Helper()
	got, err := w.SessionsWithWork(e.ctx, "", 100)
	if err != nil || !slices.Equal(got, sessions) && !(len(got) == 0 && len(sessions) == 0) {
		e.t.Fatalf("SessionsWithWork = %q, %v; want %q", got, err, sessions)
	}
}

// marked are the options of an append that marks the session's work.
func marked(work bool) persistence.AppendOption { return persistence.WithWork(work) }
