package storetest

import (
	"bytes"
	"fmt"

	"github.com/a2-runtime/a2/persistence"
)

const (
	aiReducer  = "a2.ai.state.v27"
	appReducer = "support-desk.v1+a2.ai.state.v27"
)

// snapshotCases: snapshots by reducer name (R-CONTRACT-10).
var snapshotCases = []testCase{
	{name: "snapshot/missing-is-not-found", run: func(e *env) {
		_, found, err := e.s.LoadSnapshot(e.ctx, "s1", aiReducer)
		if err != nil || found {
			e.t.Fatalf("LoadSnapshot of nothing: found=%v, %v; want not found, no error", found, err)
		}
	}},
	{name: "snapshot/R-CONTRACT-10/other-reducer-name-is-ignored", run: func(e *env) {
		e.saveSnapshot(persistence.Snapshot{Session: "s1", Reducer: appReducer, Index: 5, State: []byte(`{"app":1}`)})
		for _, other := range []string{aiReducer, "support-desk.v2+a2.ai.state.v27", "support-desk.v1", "support-desk.v1+a2.ai.state.v2"} {
			_, found, err := e.s.LoadSnapshot(e.ctx, "s1", other)
			if err != nil || found {
				e.t.Fatalf("LoadSnapshot(%q) with only %q saved: found=%v, %v; want not found, no error", other, appReducer, found, err)
			}
		}
		e.wantSnapshot("s1", appReducer, 5, []byte(`{"app":1}`))
	}},
	{name: "snapshot/R-CONTRACT-10/reducers-kept-apart", run: func(e *env) {
		e.saveSnapshot(persistence.Snapshot{Session: "s1", Reducer: aiReducer, Index: 9, State: []byte("ai")})
		e.saveSnapshot(persistence.Snapshot{Session: "s1", Reducer: appReducer, Index: 4, State: []byte("app")})
		e.saveSnapshot(persistence.Snapshot{Session: "s2", Reducer: aiReducer, Index: 20, State: []byte("other session")})
		e.wantSnapshot("s1", aiReducer, 9, []byte("ai"))
		e.wantSnapshot("s1", appReducer, 4, []byte("app"))
		e.wantSnapshot("s2", aiReducer, 20, []byte("other session"))
	}},
	{name: "snapshot/latest-index-wins", run: func(e *env) {
		for _, idx := range []uint64{3, 7, 5, 1} {
			e.saveSnapshot(persistence.Snapshot{Session: "s1", Reducer: aiReducer, Index: idx, State: fmt.Appendf(nil, "state@%d", idx)})
		}
		e.wantSnapshot("s1", aiReducer, 7, []byte("state@7"))
		// Saving again at the same index replaces it.
		e.saveSnapshot(persistence.Snapshot{Session: "s1", Reducer: aiReducer, Index: 7, State: []byte("state@7 v2")})
		e.wantSnapshot("s1", aiReducer, 7, []byte("state@7 v2"))
		e.saveSnapshot(persistence.Snapshot{Session: "s1", Reducer: aiReducer, Index: 8, State: nil})
		e.wantSnapshot("s1", aiReducer, 8, nil)
	}},
}

func (e *env) saveSnapshot(s persistence.Snapshot) {
	e.t.Helper()
	if err := e.s.SaveSnapshot(e.ctx, s); err != nil {
		e.t.Fatalf("SaveSnapshot(%q, %q, %d): %v", s.Session, s.Reducer, s.Index, err)
	}
}

func (e *env) wantSnapshot(session, reducer string, index uint64, state []byte) {
	e.t.Helper()
	got, found, err := e.s.LoadSnapshot(e.ctx, session, reducer)
	if err != nil || !found {
		e.t.Fatalf("LoadSnapshot(%q, %q): found=%v, %v", session, reducer, found, err)
	}
	if got.Session != session || got.Reducer != reducer || got.Index != index || !bytes.Equal(got.State, state) {
		e.t.Fatalf("LoadSnapshot(%q, %q) = {%q %q %d %d bytes}, want index %d with %d bytes of state",
			session, reducer, got.Session, got.Reducer, got.Index, len(got.State), index, len(state))
	}
}
