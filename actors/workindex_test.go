package actors

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/internal/testutil"
	"github.com/a2-runtime/a2/persistence"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
)

// loadCounter is the Pebble store (its work index included) that counts
// session loads, and can pretend its index is not complete yet.
type loadCounter struct {
	*pebblestore.Store
	loads      atomic.Int32
	incomplete bool
	marked     atomic.Bool
}

func (c *loadCounter) LoadSnapshot(ctx context.Context, session, reducer string) (persistence.Snapshot, bool, error) {
	if !protocol.IsA2ID(session) {
		c.loads.Add(1)
	}
	return c.Store.LoadSnapshot(ctx, session, reducer)
}

func (c *loadCounter) WorkIndexComplete(ctx context.Context) (bool, error) {
	if c.incomplete && !c.marked.Load() {
		return false, nil
	}
	return c.Store.WorkIndexComplete(ctx)
}

func (c *loadCounter) MarkWorkIndexComplete(ctx context.Context) error {
	c.marked.Store(true)
	return c.Store.MarkWorkIndexComplete(ctx)
}

// The start-up scan reads only the index of sessions with work: of 20 idle
// sessions and one held in the middle of its turn, a restart loads the one
// and resumes its turn. On a store whose index is not complete yet it
// reads every session, then marks the index complete.
func TestStartupScanReadsOnlyTheSessionsWithWork(t *testing.T) {
	const idle = 20
	fs := vfs.NewMem()
	sc, err := script.Parse([]byte(`{"replies":[{"match":"hold","text":"resumed after the restart","gate":"g"}],"default":{"text":"done"}}`))
	if err != nil {
		t.Fatal(err)
	}
	// The runtimes' warnings (a session the scan could not reach, say)
	// are printed if the test fails: they say why a scan did not mark
	// the index complete.
	var logs testutil.SyncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the runtimes' warnings:\n%s", logs.String())
		}
	})
	start := func(incomplete bool, place ...func(string) error) (*Runtime, *loadCounter, *script.Model) {
		st, err := pebblestore.Open("data", pebblestore.Options{FS: fs, Logger: quietPebble{}})
		if err != nil {
			t.Fatal(err)
		}
		c := &loadCounter{Store: st, incomplete: incomplete}
		a, model := scriptAgent(t, sc)
		o := Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
		if len(place) > 0 {
			o.Place = place[0]
		}
		rt, err := New(c, []*Agent{a}, o)
		if err != nil {
			t.Fatal(err)
		}
		return rt, c, model
	}
	stop := func(rt *Runtime, c *loadCounter) {
		rt.Close()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitState := func(rt *Runtime, session string, cond func(*protocol.AIState) bool) {
		t.Helper()
		for {
			st, _, err := rt.State(ctx, "assistant", session)
			if err != nil {
				t.Fatal(err)
			}
			if cond(st.AI) {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("%s never reached the state", session)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}

	rt, c, _ := start(false)
	<-rt.Recovered()
	for i := range idle {
		s := fmt.Sprintf("idle-%02d", i)
		if _, err := rt.Push(ctx, "assistant", s, []protocol.Event{protocol.Inputs.Text(s+"-m1", "hi")}, false); err != nil {
			t.Fatal(err)
		}
		waitState(rt, s, func(a *protocol.AIState) bool { return a.Active == nil && lastText(a) == "done" })
	}
	if _, err := rt.Push(ctx, "assistant", "busy", []protocol.Event{protocol.Inputs.Text("m1", "hold on")}, false); err != nil {
		t.Fatal(err)
	}
	waitState(rt, "busy", func(a *protocol.AIState) bool { return a.Status == protocol.StatusStreaming && lastText(a) != "" })
	stop(rt, c)

	// A full scan that could not reach a session (placed elsewhere, say)
	// leaves the index incomplete: that session's marks were repaired by
	// no activation (mutant recover.go:168 counted it as reached).
	{
		rt, c, _ := start(true, func(s string) error {
			if s == "idle-03" {
				return ErrMoved
			}
			return nil
		})
		select {
		case <-rt.Recovered():
		case <-ctx.Done():
			t.Fatal("the start-up scan did not end")
		}
		if c.marked.Load() {
			t.Fatal("a full scan that could not reach idle-03 marked the work index complete")
		}
		stop(rt, c)
	}
	for _, incomplete := range []bool{false, true} {
		rt, c, model := start(incomplete)
		select {
		case <-rt.Recovered():
		case <-ctx.Done():
			t.Fatal("the start-up scan did not end")
		}
		want := int32(1)
		if incomplete {
			want = idle + 1
		}
		if got := c.loads.Load(); got != want {
			t.Fatalf("index complete %v: the start-up scan loaded %d sessions, want %d", !incomplete, got, want)
		}
		if !rt.active(rt.agents["assistant"], "busy") {
			t.Fatalf("index complete %v: the session with work is not active after the scan", !incomplete)
		}
		if incomplete && !c.marked.Load() {
			t.Fatal("the full scan did not mark the work index complete")
		}
		if incomplete {
			model.Release("g")
			waitState(rt, "busy", func(a *protocol.AIState) bool {
				return a.Active == nil && lastText(a) == "resumed after the restart"
			})
		}
		stop(rt, c)
	}
}

// An index entry for a session with no work (left by a crash between a
// mark and an older build's append, or set by hand) is harmless: the
// start-up scan activates the session, which finds nothing to do, clears
// the entry and passivates.
func TestAnIndexEntryWithoutWorkIsClearedAtActivation(t *testing.T) {
	fs := vfs.NewMem()
	st, err := pebblestore.Open("data", pebblestore.Options{FS: fs, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sc, _ := script.Parse([]byte(`{"default":{"text":"done"}}`))
	a, _ := scriptAgent(t, sc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rt, err := New(st, []*Agent{a}, Options{SkipRecovery: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Push(ctx, "assistant", "idle", []protocol.Event{protocol.Inputs.Text("m1", "hi")}, false); err != nil {
		t.Fatal(err)
	}
	for {
		s, _, err := rt.State(ctx, "assistant", "idle")
		if err != nil {
			t.Fatal(err)
		}
		if s.AI.Active == nil && lastText(s.AI) == "done" {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	rt.Close()
	last, _ := st.LastIndex(ctx, "idle")
	if err := st.MarkWork(ctx, "idle", last, true); err != nil { // the stray entry
		t.Fatal(err)
	}
	rt, err = New(st, []*Agent{a}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	<-rt.Recovered()
	if has, err := st.HasWork(ctx, "idle"); err != nil || has {
		t.Fatalf("the stray entry after the start-up scan: %v %v, want cleared", has, err)
	}
	if rt.ActiveSessions() != 0 {
		t.Fatalf("%d sessions stayed active", rt.ActiveSessions())
	}
}

// The start-up scan over a log written before claims existed: on a store
// of one agent it goes to that agent (whose activation claims it) and the
// index becomes complete; on a store of two it goes to nobody, so that a
// request, not the order of a map, decides who owns it (mutant
// recover.go:196 skipped it on one agent and gave it to agents[0] on two).
func TestStartupScanOfAnUnclaimedLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := openMem(t, vfs.NewMem())
	rt, err := New(src, []*Agent{answering(t, "support", "from support", nil)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Push(ctx, "support", "s1", []protocol.Event{protocol.Inputs.Text("m1", "hi")}, false); err != nil {
		t.Fatal(err)
	}
	waitAnswers(t, rt, "support", "s1", 2, "from support")
	rt.Close()
	old, err := src.Read(ctx, "s1", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for i := range old {
		old[i].Index, old[i].Time = 0, 0
	}
	fresh := func() *loadCounter {
		st := openMem(t, vfs.NewMem())
		if _, err := st.Append(ctx, "s1", 0, old); err != nil {
			t.Fatal(err)
		}
		return &loadCounter{Store: st, incomplete: true}
	}
	for _, c := range []struct {
		agents []string
		owner  string
	}{{[]string{"support", "sales"}, ""}, {[]string{"support"}, "support"}} {
		st := fresh()
		if owner, err := sessionOwner(ctx, st, "s1"); err != nil || owner != "" {
			t.Fatalf("the copied log has an owner already: %q %v", owner, err)
		}
		var agents []*Agent
		for _, name := range c.agents {
			agents = append(agents, answering(t, name, "from "+name, nil))
		}
		rt, err := New(st, agents, Options{})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-rt.Recovered():
		case <-ctx.Done():
			t.Fatal("the start-up scan did not end")
		}
		owner, err := sessionOwner(ctx, st, "s1")
		if err != nil || owner != c.owner {
			t.Fatalf("agents %v: after the scan the unclaimed log's owner is %q (%v), want %q", c.agents, owner, err, c.owner)
		}
		if len(c.agents) == 1 && !st.marked.Load() {
			t.Fatal("one agent: the full scan did not mark the work index complete")
		}
		rt.Close()
	}
}
