package actors

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/persistence"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
)

// openMem opens a Pebble store on fs (in memory), closed at the test's end.
func openMem(t *testing.T, fs vfs.FS) *pebblestore.Store {
	t.Helper()
	st, err := pebblestore.Open("data", pebblestore.Options{FS: fs, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// refused checks that every way of reaching agent's session fails with
// ErrSessionOwned naming owner.
func refused(t *testing.T, rt *Runtime, agent, session, owner string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrSessionOwned) || !strings.Contains(err.Error(), `"`+owner+`"`) {
			t.Fatalf("%s of %s/%s: %v, want ErrSessionOwned naming %q", what, agent, session, err, owner)
		}
	}
	_, err := rt.Push(ctx, agent, session, []protocol.Event{protocol.Inputs.Text("m-"+agent+"-"+session, "hi")}, false)
	check("Push", err)
	_, _, err = rt.State(ctx, agent, session)
	check("State", err)
	_, err = rt.History(ctx, agent, session, 0, 10)
	check("History", err)
	live, errc := rt.Subscribe(ctx, agent, session, 0)
	check("Subscribe", <-errc)
	if _, open := <-live; open {
		t.Fatalf("a refused subscription of %s/%s delivered an event", agent, session)
	}
}

// onlyFrom checks that session's log in st holds no input of another agent
// than owner (inputs are named m-<agent>-...).
func onlyFrom(t *testing.T, st persistence.Store, session, owner string) {
	t.Helper()
	log, err := st.Read(context.Background(), session, 0, 1000)
	if err != nil || len(log) == 0 {
		t.Fatalf("log of %s: %d events, %v", session, len(log), err)
	}
	for _, ev := range log {
		if strings.HasPrefix(ev.ID, "m-") && !strings.HasPrefix(ev.ID, "m-"+owner+"-") {
			t.Fatalf("the log of %s, owned by %s, holds %s", session, owner, ev.ID)
		}
	}
}

// Two agents on one store, one session ID: the first agent to write the
// session owns it, durably (across a restart of the runtime); the other
// agent's pushes, state reads, history and subscriptions are refused with
// ErrSessionOwned naming the owner, and write nothing. Racing first
// writes leave one owner. A log written before claims existed goes to the
// first agent that activates it. (docs/storage.md §1.1.)
func TestSessionBelongsToTheAgentThatWroteItFirst(t *testing.T) {
	fs := vfs.NewMem()
	st := openMem(t, fs)
	agents := func() []*Agent {
		return []*Agent{answering(t, "support", "from support", nil), answering(t, "sales", "from sales", nil)}
	}
	rt, err := New(st, agents(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := rt.Push(ctx, "support", "s1", []protocol.Event{protocol.Inputs.Text("m-support-1", "hi")}, false); err != nil {
		t.Fatal(err)
	}
	waitAnswers(t, rt, "support", "s1", 2, "from support")
	refused(t, rt, "sales", "s1", "support")
	// The owner goes on as before.
	if _, err := rt.Push(ctx, "support", "s1", []protocol.Event{protocol.Inputs.Text("m-support-2", "again")}, false); err != nil {
		t.Fatal(err)
	}
	waitAnswers(t, rt, "support", "s1", 4, "from support")
	onlyFrom(t, st, "s1", "support")

	// Racing first writes of a new session: one agent owns it.
	var wg sync.WaitGroup
	errs := map[string]error{}
	var mu sync.Mutex
	for _, a := range []string{"support", "sales"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := rt.Push(ctx, a, "s2", []protocol.Event{protocol.Inputs.Text("m-"+a+"-race", "hi")}, false)
			mu.Lock()
			errs[a] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	owner, other := "support", "sales"
	if errs["support"] != nil {
		owner, other = other, owner
	}
	if errs[owner] != nil || !errors.Is(errs[other], ErrSessionOwned) {
		t.Fatalf("racing first writes: %v; want one success and one ErrSessionOwned", errs)
	}
	waitAnswers(t, rt, owner, "s2", 2, "from "+owner)
	onlyFrom(t, st, "s2", owner)

	// The claims are durable: a new runtime, its agents listed the other
	// way round, refuses the same.
	rt.Close()
	rt, err = New(st, agents()[1:], Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	refused(t, rt, "sales", "s1", "support")

	// A log without a claim (written before claims existed: here, support's
	// log of s1 copied into a new store) goes to the first agent to
	// activate it, here by reading its state.
	old, err := st.Read(ctx, "s1", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	st2 := openMem(t, vfs.NewMem())
	for i := range old {
		old[i].Index, old[i].Time = 0, 0
	}
	if _, err := st2.Append(ctx, "s1", 0, old); err != nil {
		t.Fatal(err)
	}
	cs2 := &countingStore{Store: st2}
	rt2, err := New(cs2, agents(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close()
	<-rt2.Recovered()
	before := cs2.loads.Load()
	if s, _, err := rt2.State(ctx, "support", "s1"); err != nil || len(s.AI.Messages) != 4 {
		t.Fatalf("support reads its unclaimed log: %v", err)
	}
	// One activation claims it and serves the read: not a failed one
	// restarted by protoactor (mutant session.go:319, which returned
	// before keeping the state it had folded).
	if n := cs2.loads.Load() - before; n > 1 {
		t.Fatalf("the unclaimed log took %d activations, want at most 1", n)
	}
	refused(t, rt2, "sales", "s1", "support")
}

// claimLookups is the real store with a count of the lookups of sessions'
// claims.
type claimLookups struct {
	persistence.Store
	n atomic.Int64
}

func (c *claimLookups) Lookup(ctx context.Context, ids []string) ([]protocol.Event, error) {
	for _, id := range ids {
		if id == ownerEventID("s1") {
			c.n.Add(1)
		}
	}
	return c.Store.Lookup(ctx, ids)
}

// A session's claim never changes once durable, so the runtime looks it up
// once: the subscriptions, state reads and history pages that follow ask
// the store nothing about it (each would be a round trip to a shared
// store), and another agent is still refused.
func TestAClaimIsLookedUpOnce(t *testing.T) {
	st := &claimLookups{Store: openMem(t, vfs.NewMem())}
	rt, err := New(st, []*Agent{answering(t, "support", "from support", nil), answering(t, "sales", "from sales", nil)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rt.Push(ctx, "support", "s1", []protocol.Event{protocol.Inputs.Text("m-support-1", "hi")}, false); err != nil {
		t.Fatal(err)
	}
	waitAnswers(t, rt, "support", "s1", 2, "from support")
	before := st.n.Load()
	for range 5 {
		sctx, scancel := context.WithCancel(ctx)
		live, errc := rt.Subscribe(sctx, "support", "s1", 0)
		if ev, ok := <-live; !ok || ev.Index != 1 {
			t.Fatalf("the subscription's first event = %+v (open %v), want index 1", ev, ok)
		}
		scancel()
		for range live {
		}
		select {
		case err := <-errc:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
		default:
		}
		if _, err := rt.History(ctx, "support", "s1", 0, 10); err != nil {
			t.Fatal(err)
		}
	}
	if n := st.n.Load() - before; n > 1 {
		t.Fatalf("5 subscriptions and 5 history pages looked the claim up %d times after the first turn, want at most once", n)
	}
	refused(t, rt, "sales", "s1", "support")
}

// A session's claim: the first agent's stands, a second agent is told the
// session is owned (not the store's raw conflict), and the first may claim
// it again (mutant owner.go:79).
func TestClaimSession(t *testing.T) {
	f := newFixture(t, `{}`, nil)
	ctx := context.Background()
	if err := claimSession(ctx, f.store, "support", "c1"); err != nil {
		t.Fatalf("the first claim: %v", err)
	}
	err := claimSession(ctx, f.store, "sales", "c1")
	if !errors.Is(err, ErrSessionOwned) {
		t.Fatalf("another agent's claim: %v, want ErrSessionOwned", err)
	}
	if err := claimSession(ctx, f.store, "support", "c1"); err != nil && errors.Is(err, ErrSessionOwned) {
		t.Fatalf("the owner's second claim: %v", err)
	}
}
