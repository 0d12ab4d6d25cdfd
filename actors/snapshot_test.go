package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/persistence"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
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
	// More events before the frontier than one page of the read (512),
	// so that the read's later pages are bounded by the frontier too
	// (mutant lane.go:813 read the second page past it).
	const before = 600
	for i := range before {
		change(fmt.Sprintf("c%d", i))
	}
	f.push("s1", protocol.Inputs.Text("m1", "hi"))
	receive(t, resolving, "the resolver")
	change("after") // after the frontier
	close(proceed)
	r := receive(t, reads, "the resolver's reads")
	if r.err != nil {
		t.Fatal(r.err)
	}
	last, err := f.store.LastIndex(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if r.atFrontier != before || r.through != before+1 || r.frontier == 0 || r.frontier >= r.last || r.last > last {
		t.Fatalf("read %+v (log at %d): want %d changes at the frontier and %d through the end", r, last, before, before+1)
	}
	f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
}

// R-CONTRACT-20: a tool reads its session at the call's boundary (the log
// through its work event). An attempt cut short by a restart is recovered
// in a fresh runtime, and its read is the same boundary, not the state
// that grew meanwhile.
func TestRecoveredToolReadsItsOriginalBoundary(t *testing.T) {
	desk := notesContract(t)
	type read struct {
		attempt, count int
		index          uint64
	}
	reads := make(chan read, 4)
	inspect := tools.Tool{Name: "inspect", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		hc, err := tools.ContextFor(ctx, desk)
		if err != nil {
			return nil, err
		}
		st, index, err := hc.State(ctx)
		if err != nil {
			return nil, err
		}
		reads <- read{attempt: hc.Attempt, count: st.App.(notes).Count, index: index}
		if hc.Attempt == 1 {
			<-ctx.Done() // the process stops under it
			return nil, ctx.Err()
		}
		return json.RawMessage(`{"seen":true}`), nil
	}}
	// With a handler, the agent's contract is a copy of desk that records
	// handler work; the tool still finds desk (protocol.Contract.Is).
	mod := func(a *AgentOptions) {
		a.Name, a.Contract, a.Tools = "", desk, []tools.Tool{inspect}
		a.Handlers = map[string]Handler{"note.added": func(context.Context, protocol.Event) error { return nil }}
	}
	f := newFixture(t, `{"replies":[{"toolCalls":[{"name":"inspect","input":{}}],"then":{"text":"done"}}]}`, mod)
	note := func(id string) {
		t.Helper()
		if _, err := f.rt.Push(context.Background(), "assistant", "s1", []protocol.Event{{ID: id, Type: "note.added", Payload: json.RawMessage(`{}`)}}, true); err != nil {
			t.Fatal(err)
		}
	}
	note("n1")
	f.push("s1", protocol.Inputs.Text("m1", "inspect"))
	first := receive(t, reads, "the first attempt's read")
	note("n2") // after the call's boundary
	f.close()
	f.open(mod)
	f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	second := receive(t, reads, "the recovered attempt's read")
	if first.attempt != 1 || second.attempt != 2 {
		t.Fatalf("attempts %d then %d, want 1 then a recovered 2", first.attempt, second.attempt)
	}
	if first.count != 1 || second.count != first.count || second.index != first.index || first.index == 0 {
		t.Fatalf("reads %+v then %+v: the recovered attempt must read the original boundary (1 note)", first, second)
	}
}

// receive waits (bounded: 10 s) for a value on ch.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// A resolver's Session.State is the whole state at the step's frontier
// (R-CONTRACT-19), although the step's own copy leaves out the maps that
// grow with the conversation (AIState.StepCopy): read at once, the session
// actor answers with a copy of its state, which is still at the frontier;
// read after a push moved the session on, the log is folded up to the
// frontier. Either way the read holds the earlier turn's usage and tool
// call, and not the message pushed after the frontier (mutants: the actor
// answers with its state whatever its index; the step's copy instead of a
// whole one).
func TestResolverReadsTheWholeStateAtTheFrontier(t *testing.T) {
	type read struct {
		st    *protocol.AIState
		index uint64
		err   error
	}
	var wait atomic.Bool
	resolving, proceed := make(chan struct{}, 1), make(chan struct{})
	reads := make(chan read, 4)
	f := newFixture(t, `{"default":{"text":"let me look","toolCalls":[{"name":"lookup","input":{"q":"x"}}],"then":{"text":"found it"}}}`, func(a *AgentOptions) {
		a.Tools = []tools.Tool{{Name: "lookup", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`{"found":true}`), nil
		}}}
		a.Model = harness.ModelFunc(func(ctx context.Context, rc harness.ResolverContext) (harness.ModelSettings, error) {
			if wait.Load() && rc.Event.Type == protocol.TypeGenerationRequested {
				resolving <- struct{}{}
				<-proceed
			}
			var r read
			r.st, r.index, r.err = rc.Session.State(ctx)
			reads <- r
			return harness.ModelSettings{Model: "script"}, nil
		})
	})
	f.push("s1", protocol.Inputs.Text("m1", "first"))
	f.waitFor("s1", "the first turn", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	for range 2 { // the first turn's two steps
		if r := receive(t, reads, "a read of the first turn"); r.err != nil {
			t.Fatal(r.err)
		}
	}
	check := func(what string, r read, notAfter uint64) {
		t.Helper()
		switch {
		case r.err != nil:
			t.Fatalf("%s: %v", what, r.err)
		case r.index == 0 || r.index >= notAfter:
			t.Fatalf("%s: index %d, want one before %d", what, r.index, notAfter)
		case len(r.st.Usage) < 2 || len(r.st.Tools) < 1 || len(r.st.TerminalGenerations) < 2:
			t.Fatalf("%s: usage %v, tools %v, terminal generations %v: not the whole state", what, r.st.Usage, r.st.Tools, r.st.TerminalGenerations)
		case len(r.st.Inbox.Items) != 0:
			t.Fatalf("%s: the inbox holds %v, pushed after the frontier", what, r.st.Inbox.Items)
		}
	}
	// Read at once: the actor is still at the frontier.
	out := f.push("s1", protocol.Inputs.Text("m2", "second"))
	now := receive(t, reads, "the read at once")
	check("the read at once", now, out[0].Index+100)
	f.waitFor("s1", "the second turn", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 4 })
	receive(t, reads, "the second turn's continuation")
	// Read after the session moved on: a message queued behind the turn.
	wait.Store(true)
	f.push("s1", protocol.Inputs.Text("m3", "third"))
	receive(t, resolving, "the resolver")
	wait.Store(false)
	late := f.push("s1", protocol.Inputs.Text("m4", "queued"))
	close(proceed)
	check("the read after a push", receive(t, reads, "the late read"), late[0].Index)
	f.waitFor("s1", "the queued turn", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 8 })
}

// A session snapshots after SnapshotBytes bytes of payloads even when
// SnapshotEvery is far off (mutant session.go:773).
func TestSnapshotAfterSnapshotBytes(t *testing.T) {
	snapshotted := func(opts Options) bool {
		t.Helper()
		f := newFixtureWith(t, `{"default":{"text":"an answer long enough to carry a few hundred bytes of payload in its progress events, word after word after word"}}`, opts)
		f.push("s1", protocol.Inputs.Text("m1", "hi"))
		f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
		// The snapshot is saved off the actor's goroutine: wait for it
		// (bounded).
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, found, err := f.store.LoadSnapshot(context.Background(), "s1", f.agent.contract.ReducerName())
			if err != nil {
				t.Fatal(err)
			}
			if found || time.Now().After(deadline) {
				return found
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if !snapshotted(Options{SnapshotEvery: 1 << 20, SnapshotBytes: 200}) {
		t.Fatal("no snapshot after more than SnapshotBytes of payloads")
	}
}

// replay restores the snapshot at an activation (upTo 0) and for a
// boundary read at or after the snapshot, and ignores one taken after the
// boundary (mutants session.go:381, 383 twice).
func TestReplayRestoresTheSnapshotItMay(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, nil)
	f.push("s1", protocol.Inputs.Text("m1", "hi"))
	f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	ctx := context.Background()
	c := f.agent.contract
	st, last, err := f.rt.State(ctx, "assistant", "s1")
	if err != nil {
		t.Fatal(err)
	}
	// A snapshot at the log's end that says something the log does not:
	// whoever restores it shows the marker.
	st.AI.Messages = append(st.AI.Messages, protocol.TranscriptMessage{ID: "from-the-snapshot", Role: protocol.RoleUser,
		Parts: []protocol.Part{{Type: protocol.PartText, Text: "marker"}}})
	b, err := st.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.SaveSnapshot(ctx, persistence.Snapshot{Session: "s1", Reducer: c.ReducerName(), Index: last, State: b}); err != nil {
		t.Fatal(err)
	}
	restored := func(upTo uint64) (bool, uint64) {
		t.Helper()
		got, at, err := replay(ctx, f.store, c, "s1", upTo, func(msg string, err error) { t.Errorf("%s: %v", msg, err) }, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range got.AI.Messages {
			if m.ID == "from-the-snapshot" {
				return true, at
			}
		}
		return false, at
	}
	if ok, at := restored(0); !ok || at != last {
		t.Fatalf("an activation did not restore the snapshot (restored %v, at %d of %d)", ok, at, last)
	}
	if ok, _ := restored(last); !ok {
		t.Fatal("a boundary read at the snapshot's index did not restore it")
	}
	if ok, at := restored(last - 1); ok || at != last-1 {
		t.Fatalf("a boundary read before the snapshot restored it (restored %v, at %d)", ok, at)
	}
}

// A snapshot is due after SnapshotEvery events or SnapshotBytes bytes, and
// only once the payloads since the last one add up to its size (mutants:
// each clause of snapshotDue dropped or inverted).
func TestSnapshotDue(t *testing.T) {
	o := Options{SnapshotEvery: 1000, SnapshotBytes: 4 << 20}
	for _, c := range []struct {
		events, bytes, last int
		want                bool
	}{
		{999, 100, 0, false},                // neither count nor bytes
		{1000, 100, 0, true},                // the count, first snapshot
		{10, 4 << 20, 0, true},              // the bytes
		{1000, 300 << 10, 600 << 10, false}, // the count, but less log than the last snapshot
		{1000, 600 << 10, 600 << 10, true},  // the count and as much log as the last snapshot
		{10, 4 << 20, 5 << 20, false},       // the bytes, but a larger state
		{10, 5 << 20, 5 << 20, true},
	} {
		if got := snapshotDue(o, c.events, c.bytes, c.last); got != c.want {
			t.Errorf("snapshotDue(%d events, %d bytes, last %d) = %v, want %v", c.events, c.bytes, c.last, got, c.want)
		}
	}
}
