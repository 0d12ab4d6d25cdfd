package actors

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/persistence"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
)

// R-CONTRACT-10 R-CONTRACT-11: the reducer name is the snapshot's
// identity. A session snapshotted under plan.v1 and served again by a
// contract whose fold changed (renamed plan.v2) is rebuilt from the log by
// the new fold, not restored from the old snapshot; a snapshot under the
// current name that does not decode is rebuilt from the log as well.
func TestSnapshotIdentityIsTheReducerName(t *testing.T) {
	fs := vfs.NewMem()
	type plan struct {
		Plan    string `json:"plan"`
		Changes int    `json:"changes"`
	}
	v1 := protocol.NewReducer("plan.v1", plan{Plan: "free"}, func(p plan, ev protocol.Event) plan {
		if ev.Type == "plan.changed" {
			_ = json.Unmarshal(ev.Payload, &p)
		}
		return p
	})
	// v2 also counts the changes: a v1 snapshot holds no count.
	v2 := protocol.NewReducer("plan.v2", plan{Plan: "free"}, func(p plan, ev protocol.Event) plan {
		if ev.Type == "plan.changed" {
			_ = json.Unmarshal(ev.Payload, &p)
			p.Changes++
		}
		return p
	})
	serve := func(r protocol.AppReducer) (*Runtime, persistence.Store) {
		t.Helper()
		st, err := pebblestore.Open("data", pebblestore.Options{FS: fs, Logger: quietPebble{}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := protocol.AgentContract(protocol.ContractOptions{Name: "assistant",
			Events: map[string]protocol.Schema{"plan.changed": nil}, Reducer: r})
		if err != nil {
			t.Fatal(err)
		}
		a, err := NewAgent(AgentOptions{Contract: c, Model: harness.ModelID("script"),
			Models: func(string) (harness.Model, error) { return nil, nil }})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := New(st, []*Agent{a}, Options{SnapshotEvery: 2})
		if err != nil {
			t.Fatal(err)
		}
		return rt, st
	}
	state := func(rt *Runtime) plan {
		t.Helper()
		st, _, err := rt.State(context.Background(), "assistant", "s1")
		if err != nil {
			t.Fatal(err)
		}
		return st.App.(plan)
	}
	ctx := context.Background()

	rt, st := serve(v1)
	for i, p := range []string{"pro", "team", "pro", "enterprise"} {
		ev := protocol.Event{ID: "change-" + p + string(rune('a'+i)), Type: "plan.changed", Payload: json.RawMessage(`{"plan":"` + p + `"}`)}
		if _, err := rt.Push(ctx, "assistant", "s1", []protocol.Event{ev}, true); err != nil {
			t.Fatal(err)
		}
	}
	if got := state(rt); got.Plan != "enterprise" || got.Changes != 0 {
		t.Fatalf("v1 state %+v", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		snap, found, err := st.LoadSnapshot(ctx, "s1", "plan.v1+"+protocol.AIStateReducer)
		if err != nil {
			t.Fatal(err)
		}
		if found && snap.Index >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no plan.v1 snapshot was saved")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rt.Close()
	_ = st.Close()

	rt, st = serve(v2)
	if got := state(rt); got.Plan != "enterprise" || got.Changes != 4 {
		t.Fatalf("v2 state %+v, want the log folded by v2 (4 changes), not v1's snapshot", got)
	}
	rt.Close()
	// A v2 snapshot that does not decode, newer than anything else.
	last, err := st.LastIndex(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SaveSnapshot(ctx, persistence.Snapshot{Session: "s1", Reducer: "plan.v2+" + protocol.AIStateReducer, Index: last, State: []byte(`{"plan":`)}); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()

	rt, st = serve(v2)
	defer func() { rt.Close(); _ = st.Close() }()
	if got := state(rt); got.Plan != "enterprise" || got.Changes != 4 {
		t.Fatalf("state over a broken snapshot %+v, want the log folded again", got)
	}
}
