package storetest

import (
	"errors"
	"slices"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// lifecycleCases: close, reopen, and calls on a closed store.
var lifecycleCases = []testCase{
	{name: "reopen/acknowledged-state-survives", reopen: true, run: func(e *env) {
		want := map[string][]protocol.Event{}
		for i, session := range []string{"s1", "s2", "s3"} {
			for a := range 3 {
				got := e.append(session, uint64(len(want[session])), evs(session+"-"+string(rune('a'+a)), i+a+1)...)
				want[session] = append(want[session], got...)
			}
		}
		e.saveSnapshot(persistence.Snapshot{Session: "s1", Reducer: aiReducer, Index: 4, State: []byte("s1@4")})
		e.saveSnapshot(persistence.Snapshot{Session: "s2", Reducer: appReducer, Index: 2, State: []byte("s2@2")})
		sessions, err := e.s.Sessions(e.ctx, "", 10)
		if err != nil {
			e.t.Fatalf("Sessions: %v", err)
		}

		e.reopen()

		for session, events := range want {
			e.wantLog(session, events)
		}
		e.wantSnapshot("s1", aiReducer, 4, []byte("s1@4"))
		e.wantSnapshot("s2", appReducer, 2, []byte("s2@2"))
		got, err := e.s.Sessions(e.ctx, "", 10)
		if err != nil || !slices.Equal(got, sessions) {
			e.t.Fatalf("Sessions after reopen = %q, %v; want %q", got, err, sessions)
		}
		if l := e.lookup("s3-c-1", "s1-a-1"); !sameEvents(l, []protocol.Event{want["s3"][len(want["s3"])-5], want["s1"][0]}) {
			e.t.Fatalf("Lookup after reopen = %s", showAll(l))
		}
	}},
	{name: "reopen/appends-continue-and-fence-after-reopen", reopen: true, run: func(e *env) {
		first := e.append("s1", 0, evs("a", 3)...)
		e.reopen()
		_, err := e.s.Append(e.ctx, "s1", 0, evs("b", 1))
		wantErr(e.t, "Append at a stale index after reopen", err, persistence.ErrIndexConflict)
		next := e.append("s1", 3, evs("c", 2)...)
		e.wantLog("s1", append(first, next...))
		if n, err := e.s.Wait(e.ctx, "s1", 4); err != nil || n != 5 {
			e.t.Fatalf("Wait(after 4) after reopen = %d, %v; want 5", n, err)
		}
	}},
	{name: "reopen/R-LOG-09/replay-and-R-LOG-10/rejection-survive-reopen", reopen: true, run: func(e *env) {
		first := e.append("s1", 0, evs("a", 2)...)
		e.reopen()
		got, err := e.s.Append(e.ctx, "s1", 0, evs("a", 2))
		if err != nil || !sameEvents(got, first) {
			e.t.Fatalf("replay after reopen = %s, %v; want %s", showAll(got), err, showAll(first))
		}
		_, err = e.s.Append(e.ctx, "s2", 0, evs("a", 1))
		wantPartial(e, err)
		e.wantLog("s1", first)
	}},
	{name: "closed/every-call-fails-with-ErrClosed", run: func(e *env) {
		e.append("s1", 0, evs("a", 1)...)
		if err := e.s.Close(); err != nil {
			e.t.Fatalf("Close: %v", err)
		}
		if err := e.s.Close(); err != nil && !isClosed(err) {
			e.t.Fatalf("second Close: %v, want nil or ErrClosed", err)
		}
		ctx := e.ctx
		_, err := e.s.Append(ctx, "s1", 1, evs("b", 1))
		wantErr(e.t, "Append after Close", err, persistence.ErrClosed)
		_, err = e.s.Read(ctx, "s1", 0, 10)
		wantErr(e.t, "Read after Close", err, persistence.ErrClosed)
		_, err = e.s.Lookup(ctx, []string{"a-1"})
		wantErr(e.t, "Lookup after Close", err, persistence.ErrClosed)
		_, err = e.s.LastIndex(ctx, "s1")
		wantErr(e.t, "LastIndex after Close", err, persistence.ErrClosed)
		_, err = e.s.Wait(ctx, "s1", 0)
		wantErr(e.t, "Wait after Close", err, persistence.ErrClosed)
		_, err = e.s.Sessions(ctx, "", 10)
		wantErr(e.t, "Sessions after Close", err, persistence.ErrClosed)
		err = e.s.SaveSnapshot(ctx, persistence.Snapshot{Session: "s1", Reducer: aiReducer, Index: 1})
		wantErr(e.t, "SaveSnapshot after Close", err, persistence.ErrClosed)
		_, _, err = e.s.LoadSnapshot(ctx, "s1", aiReducer)
		wantErr(e.t, "LoadSnapshot after Close", err, persistence.ErrClosed)
	}},
}

func isClosed(err error) bool {
	return err == nil || errors.Is(err, persistence.ErrClosed)
}

// invalidCases: bad arguments are ErrInvalid and write nothing.
var invalidCases = []testCase{
	{name: "invalid/append-arguments", run: func(e *env) {
		stored := e.append("s1", 0, evs("ok", 1)...)
		other := ev("x", "t", `{}`)
		other.Session = "s2"
		for _, tc := range []struct {
			what    string
			session string
			batch   []protocol.Event
		}{
			{"empty session", "", evs("a", 1)},
			{"empty batch", "s1", nil},
			{"empty event ID", "s1", []protocol.Event{ev("", "t", `{}`)}},
			{"event naming another session", "s1", []protocol.Event{other}},
			{"ID twice in one batch", "s1", []protocol.Event{ev("d", "t", `1`), ev("d", "t", `1`)}},
			{"ID twice among valid ones", "s1", []protocol.Event{ev("e", "t", `1`), ev("f", "t", `1`), ev("e", "t", `2`)}},
			{"invalid UTF-8 in the session", "s\xff", evs("g", 1)},
			{"invalid UTF-8 in an ID", "s1", []protocol.Event{ev("h\xff", "t", `1`)}},
		} {
			_, err := e.s.Append(e.ctx, tc.session, 1, tc.batch)
			wantErr(e.t, "Append with "+tc.what, err, persistence.ErrInvalid)
		}
		e.wantLog("s1", stored)
		if got := e.lookup("a-1", "x", "d", "e", "f", "g-1"); len(got) != 0 {
			e.t.Fatalf("invalid batches stored events: %s", showAll(got))
		}
	}},
	{name: "invalid/read-and-list-arguments", run: func(e *env) {
		_, err := e.s.Read(e.ctx, "", 0, 1)
		wantErr(e.t, "Read of an empty session", err, persistence.ErrInvalid)
		_, err = e.s.Read(e.ctx, "s1", 0, -1)
		wantErr(e.t, "Read with a negative limit", err, persistence.ErrInvalid)
		_, err = e.s.LastIndex(e.ctx, "")
		wantErr(e.t, "LastIndex of an empty session", err, persistence.ErrInvalid)
		_, err = e.s.Wait(e.ctx, "", 0)
		wantErr(e.t, "Wait on an empty session", err, persistence.ErrInvalid)
		_, err = e.s.Sessions(e.ctx, "", -1)
		wantErr(e.t, "Sessions with a negative limit", err, persistence.ErrInvalid)
	}},
	{name: "invalid/snapshot-arguments", run: func(e *env) {
		err := e.s.SaveSnapshot(e.ctx, persistence.Snapshot{Session: "", Reducer: aiReducer})
		wantErr(e.t, "SaveSnapshot with an empty session", err, persistence.ErrInvalid)
		err = e.s.SaveSnapshot(e.ctx, persistence.Snapshot{Session: "s1", Reducer: ""})
		wantErr(e.t, "SaveSnapshot with an empty reducer", err, persistence.ErrInvalid)
		_, _, err = e.s.LoadSnapshot(e.ctx, "", aiReducer)
		wantErr(e.t, "LoadSnapshot with an empty session", err, persistence.ErrInvalid)
		_, _, err = e.s.LoadSnapshot(e.ctx, "s1", "")
		wantErr(e.t, "LoadSnapshot with an empty reducer", err, persistence.ErrInvalid)
	}},
}
