package actors

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/internal/testutil"
	"github.com/a2-runtime/a2/persistence"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// cutOff is a runtime's view of the shared store that can lose its renewals
// (the member is cut off from the store, or frozen past its lease).
type cutOff struct {
	*pebblestore.Store
	cut atomic.Bool
	// ahead makes renewals answer an expiry an hour later, as a store
	// whose clock runs ahead of the member's would; renewals counts the
	// successful ones.
	ahead    atomic.Bool
	renewals atomic.Int64
}

func (c *cutOff) RenewLease(ctx context.Context, session, owner string, epoch uint64, ttl time.Duration) (persistence.Lease, error) {
	if c.cut.Load() {
		return persistence.Lease{}, errors.New("the store cannot be reached")
	}
	l, err := c.Store.RenewLease(ctx, session, owner, epoch, ttl)
	if err == nil {
		c.renewals.Add(1)
		if c.ahead.Load() {
			l.Expires = l.Expires.Add(time.Hour)
		}
	}
	return l, err
}

// A member counts its lease's validity on its own clock, from before the
// renewal call: a store whose clock runs ahead (here by an hour) does not
// make the member keep a session past its lease once renewals fail
// (mutant lease.go:129 kept the store's expiry).
func TestALeaseIsValidByTheMembersClock(t *testing.T) {
	st, err := pebblestore.Open("data", pebblestore.Options{FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sc, err := script.Parse([]byte(`{"default":{"text":"ok"}}`))
	if err != nil {
		t.Fatal(err)
	}
	model := script.New(sc)
	a, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script/test"), Models: func(string) (harness.Model, error) { return model, nil }})
	if err != nil {
		t.Fatal(err)
	}
	view := &cutOff{Store: st}
	view.ahead.Store(true)
	rt, err := New(view, []*Agent{a}, Options{Lease: LeaseOptions{Owner: "a", TTL: 400 * time.Millisecond, Renew: 100 * time.Millisecond}, SkipRecovery: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	passive := false
	m := protocol.UIMessage{ID: "m1", Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: "hi"}}}
	if _, err := rt.Push(ctx, "assistant", "s", []protocol.Event{protocol.Inputs.Message(m, protocol.MessageOptions{Generate: &passive})}, false); err != nil {
		t.Fatal(err)
	}
	for view.renewals.Load() < 2 { // renewed with the store's hour-later expiry
		if ctx.Err() != nil {
			t.Fatal("the lease was not renewed twice within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	view.cut.Store(true)
	for rt.IsActive("s") {
		if ctx.Err() != nil {
			t.Fatal("the member kept the session after its renewals failed: it took the store's expiry, an hour later")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Two runtimes on one store, each with its own lease owner. While A holds a
// session's lease, B is refused with ErrLeaseHeld. When A cannot renew, its
// lease expires: A stops the session at once, and the tool call it was
// running sees the abort with the superseded cause; B then takes the
// session over at a higher epoch and finishes the turn; and whatever A
// still appends at its old epoch is refused by the store.
func TestLeaseFencesAndAbortsTheMemberThatLostIt(t *testing.T) {
	st, err := pebblestore.Open("data", pebblestore.Options{FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var aborted atomic.Value
	started := make(chan struct{}, 4)
	slow := tools.Tool{Name: "slow", Description: "waits", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			aborted.Store(context.Cause(ctx))
			return nil, ctx.Err()
		case <-time.After(1500 * time.Millisecond):
			return json.RawMessage(`"done"`), nil
		}
	}}
	sc, err := script.Parse([]byte(`{"replies":[{"match":"go","toolCalls":[{"name":"slow","input":{}}]}],"default":{"text":"finished"}}`))
	if err != nil {
		t.Fatal(err)
	}
	lease := LeaseOptions{TTL: 400 * time.Millisecond, Renew: 100 * time.Millisecond}
	start := func(owner string, store persistence.Store) *Runtime {
		model := script.New(sc)
		a, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script/test"), Tools: []tools.Tool{slow},
			Models: func(string) (harness.Model, error) { return model, nil }})
		if err != nil {
			t.Fatal(err)
		}
		o := lease
		o.Owner = owner
		rt, err := New(store, []*Agent{a}, Options{Lease: o, SkipRecovery: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rt.Close)
		return rt
	}
	viewA := &cutOff{Store: st}
	a := start("a", viewA)
	b := start("b", st)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := a.Push(ctx, "assistant", "s", []protocol.Event{protocol.Inputs.Text("m1", "go")}, false); err != nil {
		t.Fatal(err)
	}
	<-started // A runs the tool call
	if _, err := b.Push(ctx, "assistant", "s", []protocol.Event{protocol.Inputs.Text("m2", "me too")}, false); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("B's push while A holds the lease: %v, want ErrLeaseHeld", err)
	}
	held, _, err := st.ReadLease(ctx, "s")
	if err != nil || held.Owner != "a" {
		t.Fatalf("the lease: %+v %v", held, err)
	}

	viewA.cut.Store(true)
	for a.IsActive("s") {
		if ctx.Err() != nil {
			t.Fatal("A kept the session after its lease expired")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The tool's goroutine sees the cancellation on its own schedule, after
	// or before the actor is gone: wait for it (bounded by ctx).
	for aborted.Load() == nil && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	if cause, _ := aborted.Load().(error); !errors.Is(cause, errLeaseLost) {
		t.Fatalf("A's tool call ended with %v, want the lease's loss", cause)
	}
	// B takes the session over when the lease expires, and the turn
	// completes there (the lost tool call runs again, its attempt
	// superseded).
	for {
		_, err := b.Push(ctx, "assistant", "s", []protocol.Event{protocol.Inputs.Text("m3", "are you there?")}, false)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrLeaseHeld) || ctx.Err() != nil {
			t.Fatalf("B's push after A's lease expired: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	now, _, err := st.ReadLease(ctx, "s")
	if err != nil || now.Owner != "b" || now.Epoch <= held.Epoch {
		t.Fatalf("the lease after the takeover: %+v %v (was %+v)", now, err, held)
	}
	for {
		s, _, err := b.State(ctx, "assistant", "s")
		if err != nil {
			t.Fatal(err)
		}
		if s.AI.Active == nil && len(s.AI.Inbox.Items) == 0 && lastText(s.AI) == "finished" {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the turn did not complete on B")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A wakes up and writes at its old epoch: the store refuses it.
	last, _ := st.LastIndex(ctx, "s")
	_, err = st.AppendWith(ctx, "s", last, []protocol.Event{{ID: "from-a", Type: "app.note", Payload: []byte(`{}`)}}, persistence.AppendOptions{Epoch: held.Epoch})
	if !errors.Is(err, persistence.ErrLeaseLost) {
		t.Fatalf("an append at A's epoch after the takeover: %v, want ErrLeaseLost", err)
	}
}

// refusingLeases is a store whose lease writes fail.
type refusingLeases struct {
	*pebblestore.Store
	refuse atomic.Bool
}

func (r *refusingLeases) AcquireLease(ctx context.Context, session, owner string, ttl time.Duration) (persistence.Lease, error) {
	if r.refuse.Load() {
		return persistence.Lease{}, errors.New("the store refused the lease write")
	}
	return r.Store.AcquireLease(ctx, session, owner, ttl)
}

// A store that refuses the lease write refuses the activation, with a
// clear error and a log line, and nothing is appended; once the store takes
// the lease again, the same push is served.
func TestAStoreThatRefusesTheLeaseRefusesTheActivation(t *testing.T) {
	st, err := pebblestore.Open("data", pebblestore.Options{FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	store := &refusingLeases{Store: st}
	store.refuse.Store(true)
	sc, _ := script.Parse([]byte(`{"default":{"text":"served"}}`))
	a, _ := scriptAgent(t, sc)
	var logs testutil.SyncBuffer
	rt, err := New(store, []*Agent{a}, Options{Lease: LeaseOptions{Owner: "a"}, SkipRecovery: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	push := []protocol.Event{protocol.Inputs.Text("m1", "hi")}
	_, err = rt.Push(ctx, "assistant", "s", push, false)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "refused the lease write") {
		t.Fatalf("push while the store refuses the lease: %v, want ErrUnavailable naming the refusal", err)
	}
	if last, _ := st.LastIndex(ctx, "s"); last != 0 {
		t.Fatalf("the log is at %d after the refused activation, want 0", last)
	}
	if !strings.Contains(logs.String(), "refused the lease write") {
		t.Fatalf("no log line says why: %s", logs.String())
	}
	store.refuse.Store(false)
	for {
		_, err := rt.Push(ctx, "assistant", "s", push, false)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the push was never served once the store took leases again: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l, found, err := st.ReadLease(ctx, "s"); err != nil || !found || l.Owner != "a" {
		t.Fatalf("the lease after the activation: %+v %v %v", l, found, err)
	}
}

// The lease options' defaults, as docs/cluster.md says: a TTL of 2 s, and
// a renewal every quarter of it unless a shorter one is set.
func TestLeaseOptionsDefaults(t *testing.T) {
	for _, tc := range []struct{ ttl, renew, wantTTL, wantRenew time.Duration }{
		{0, 0, 2 * time.Second, 500 * time.Millisecond},
		{400 * time.Millisecond, 0, 400 * time.Millisecond, 100 * time.Millisecond},
		{400 * time.Millisecond, 50 * time.Millisecond, 400 * time.Millisecond, 50 * time.Millisecond},
		{400 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond, 100 * time.Millisecond},
		{400 * time.Millisecond, time.Second, 400 * time.Millisecond, 100 * time.Millisecond},
	} {
		got := LeaseOptions{TTL: tc.ttl, Renew: tc.renew}.withDefaults()
		if got.TTL != tc.wantTTL || got.Renew != tc.wantRenew {
			t.Errorf("TTL %s, Renew %s: got %s/%s, want %s/%s", tc.ttl, tc.renew, got.TTL, got.Renew, tc.wantTTL, tc.wantRenew)
		}
	}
}

// docs/cluster.md Leases: a session gives its lease up when it stops, so
// that the next owner takes it at once, not after the TTL.
func TestAStoppedSessionGivesItsLeaseUp(t *testing.T) {
	st, err := pebblestore.Open("data", pebblestore.Options{FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	start := func(owner string) *Runtime {
		sc, _ := script.Parse([]byte(`{"default":{"text":"ok"}}`))
		model := script.New(sc)
		a, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script/test"),
			Models: func(string) (harness.Model, error) { return model, nil }})
		if err != nil {
			t.Fatal(err)
		}
		// A TTL far longer than the test: only a release lets b in.
		rt, err := New(st, []*Agent{a}, Options{Lease: LeaseOptions{Owner: owner, TTL: time.Minute, Renew: time.Second}, SkipRecovery: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rt.Close)
		return rt
	}
	a, b := start("a"), start("b")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := a.Push(ctx, "assistant", "s", []protocol.Event{protocol.Inputs.Text("m1", "hi")}, false); err != nil {
		t.Fatal(err)
	}
	if l, ok, err := st.ReadLease(ctx, "s"); err != nil || !ok || l.Owner != "a" {
		t.Fatalf("lease %+v %v %v, want a's", l, ok, err)
	}
	if err := a.Release(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	defer cancelShort()
	if _, err := b.Push(short, "assistant", "s", []protocol.Event{protocol.Inputs.Text("m2", "hello")}, false); err != nil {
		t.Fatalf("the next owner was refused after the release: %v", err)
	}
	if l, _, err := st.ReadLease(ctx, "s"); err != nil || l.Owner != "b" {
		t.Fatalf("lease %+v %v, want b's", l, err)
	}
}
