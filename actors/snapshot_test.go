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

// R-CONTRACT-19: a resolver reads the session through a reducer that is
// not its contract's: folded over the log up to the captured frontier by
// default, so an event appended while it runs is not seen, and up to a
// later index when it passes through.
func TestResolverReadsAnotherReducer(t *testing.T) {
	changes := protocol.NewReducer("changes.v1", 0, func(n int, ev protocol.Event) int {
		if ev.Type == "plan.changed" {
			n++
		}
		return n
	})
	type read struct {
		atFrontier, through int
		frontier, last      uint64
		err                 error
	}
	resolving, proceed := make(chan struct{}), make(chan struct{})
	reads := make(chan read, 1)
	f := newFixture(t, `{"default":{"text":"ok"}}`, func(a *AgentOptions) {
		a.Events = map[string]protocol.Schema{"plan.changed": nil}
		a.Model = harness.ModelFunc(func(ctx context.Context, rc harness.ResolverContext) (harness.ModelSettings, error) {
			close(resolving)
			<-proceed
			var r read
			var v any
			if v, r.frontier, r.err = rc.Session.Reducer(ctx, changes, 0); r.err == nil {
				r.atFrontier = v.(int)
				if v, r.last, r.err = rc.Session.Reducer(ctx, changes, 1<<40); r.err == nil {
					r.through = v.(int)
				}
			}
			reads <- r
			return harness.ModelSettings{Model: "script"}, nil
		})
	})
	change := func(id string) {
		t.Helper()
		if _, err := f.rt.Push(context.Background(), "assistant", "s1", []protocol.Event{{ID: id, Type: "plan.changed", Payload: json.RawMessage(`{}`)}}, true); err != nil {
			t.Fatal(err)
		}
	}
	change("c1")
	change("c2")
	f.push("s1", protocol.Inputs.Text("m1", "hi"))
	<-resolving
	change("c3") // after the frontier
	close(proceed)
	r := <-reads
	if r.err != nil {
		t.Fatal(r.err)
	}
	last, err := f.store.LastIndex(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if r.atFrontier != 2 || r.through != 3 || r.frontier == 0 || r.frontier >= r.last || r.last > last {
		t.Fatalf("read %+v (log at %d): want 2 changes at the frontier and 3 through the end", r, last)
	}
	f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
}
