package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// leaseView is a runtime's view of the shared (Pebble) store that counts
// its lease calls, and can cut the member off from the store (its
// renewals fail), hang its renewals (a call that never returns, whatever
// its context: a process frozen in the middle of one), or refuse its
// sessions' acquisitions.
type leaseView struct {
	*pebblestore.Store
	cut     atomic.Bool
	refuse  atomic.Bool
	hanging atomic.Bool
	hang    chan struct{} // RenewMember waits for it while hanging is set

	renewals, memberReleases, acquires, releases atomic.Int64
}

func newLeaseView(st *pebblestore.Store) *leaseView {
	return &leaseView{Store: st, hang: make(chan struct{})}
}

func (v *leaseView) RenewMember(ctx context.Context, member string, ttl time.Duration) error {
	v.renewals.Add(1)
	if v.hanging.Load() {
		<-v.hang
	}
	if v.cut.Load() {
		return errors.New("the store cannot be reached")
	}
	return v.Store.RenewMember(ctx, member, ttl)
}

func (v *leaseView) ReleaseMember(ctx context.Context, member string) error {
	v.memberReleases.Add(1)
	return v.Store.ReleaseMember(ctx, member)
}

func (v *leaseView) AcquireLease(ctx context.Context, session, owner string) (persistence.Lease, error) {
	v.acquires.Add(1)
	if v.refuse.Load() {
		return persistence.Lease{}, errors.New("the store refused the lease write")
	}
	return v.Store.AcquireLease(ctx, session, owner)
}

func (v *leaseView) ReleaseLease(ctx context.Context, session, owner string, epoch uint64) error {
	v.releases.Add(1)
	return v.Store.ReleaseLease(ctx, session, owner, epoch)
}

// eventually waits (bounded by ctx) until ok holds, and fails with what
// otherwise.
func eventually(t *testing.T, ctx context.Context, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		if ctx.Err() != nil {
			t.Fatal(what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Liveness is the member's, not each session's: with 50 active sessions
// (and two more of agents with stores of their own, one of them the
// runtime's store again), each store sees one RenewMember per renewal
// interval, and no session lease write while the sessions stay active:
// only each activation's AcquireLease and, at Close, each stop's
// ReleaseLease, then the member's ReleaseMember.
func TestOneMemberLeaseServesEverySession(t *testing.T) {
	st, st2 := openMem(t, vfs.NewMem()), openMem(t, vfs.NewMem())
	view, view2 := newLeaseView(st), newLeaseView(st2)
	sc, err := script.Parse([]byte(`{"default":{"text":"ok"}}`))
	if err != nil {
		t.Fatal(err)
	}
	model := script.New(sc)
	agent := func(name string, store persistence.Store) *Agent {
		a, err := NewAgent(AgentOptions{Name: name, Model: harness.ModelID("script/test"), Store: store,
			Models: func(string) (harness.Model, error) { return model, nil }})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	// A TTL far longer than the renewals: the sessions never lapse here,
	// even on a loaded machine.
	const renew = 100 * time.Millisecond
	rt, err := New(view, []*Agent{agent("assistant", nil), agent("other", view2), agent("same", view)},
		Options{Lease: LeaseOptions{Owner: "a", TTL: 5 * time.Second, Renew: renew}, SkipRecovery: true})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			rt.Close()
		}
	}()
	if view.renewals.Load() < 1 || view2.renewals.Load() < 1 {
		t.Fatalf("New returned before renewing the member's lease in both stores (%d, %d renewals)", view.renewals.Load(), view2.renewals.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	passive := false
	push := func(agent, session string) {
		m := protocol.UIMessage{ID: "m-" + session, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: "hi"}}}
		if _, err := rt.Push(ctx, agent, session, []protocol.Event{protocol.Inputs.Message(m, protocol.MessageOptions{Generate: &passive})}, false); err != nil {
			t.Fatal(err)
		}
	}
	const n = 50
	for i := range n {
		push("assistant", fmt.Sprintf("s%d", i))
	}
	push("other", "o")
	push("same", "x")
	if got := len(rt.Active()); got != n+2 {
		t.Fatalf("%d active sessions, want %d", got, n+2)
	}
	if a, a2 := view.acquires.Load(), view2.acquires.Load(); a != n+1 || a2 != 1 {
		t.Fatalf("%d and %d acquisitions, want one per activation: %d and 1", a, a2, n+1)
	}

	acquired, released, released2 := view.acquires.Load(), view.releases.Load(), view2.releases.Load()
	r0, r20, t0 := view.renewals.Load(), view2.renewals.Load(), time.Now()
	eventually(t, ctx, "the member's lease was not renewed 10 times within 20 s", func() bool { return view.renewals.Load()-r0 >= 10 })
	r1, r21, elapsed := view.renewals.Load(), view2.renewals.Load(), time.Since(t0)
	// One renewal per interval at most, plus the one in flight at t0 and
	// a tick's slack: not one per session, nor two for a store named twice.
	most := int64(elapsed/renew) + 2
	if r1-r0 > most || r21-r20 > most {
		t.Fatalf("%d and %d renewals in %s, want at most %d each (one per %s)", r1-r0, r21-r20, elapsed, most, renew)
	}
	if r21-r20 < 1 {
		t.Fatalf("the other agent's store saw no renewal in %s", elapsed)
	}
	if a, r, r2 := view.acquires.Load(), view.releases.Load(), view2.releases.Load(); a != acquired || r != released || r2 != released2 {
		t.Fatalf("lease writes while the sessions were active: acquisitions %d->%d, releases %d->%d and %d->%d", acquired, a, released, r, released2, r2)
	}
	if got := len(rt.Active()); got != n+2 {
		t.Fatalf("%d active sessions after the renewals, want %d", got, n+2)
	}

	rt.Close()
	closed = true
	if r, r2 := view.releases.Load(), view2.releases.Load(); r != n+1 || r2 != 1 {
		t.Fatalf("%d and %d session releases at Close, want %d and 1", r, r2, n+1)
	}
	if m, m2 := view.memberReleases.Load(), view2.memberReleases.Load(); m != 1 || m2 != 1 {
		t.Fatalf("%d and %d member releases at Close, want 1 each", m, m2)
	}
	if l, found, err := st.ReadLease(ctx, "s0"); err != nil || !found || l.Owner != "" {
		t.Fatalf("s0's ownership after Close: %+v %v %v, want released", l, found, err)
	}
}

// A runtime whose first renewal fails does not start: it would serve
// sessions on a lease it does not hold.
func TestNewFailsWithoutTheMembersLease(t *testing.T) {
	view := newLeaseView(openMem(t, vfs.NewMem()))
	view.cut.Store(true)
	sc, _ := script.Parse([]byte(`{"default":{"text":"ok"}}`))
	a, _ := scriptAgent(t, sc)
	rt, err := New(view, []*Agent{a}, Options{Lease: LeaseOptions{Owner: "a"}, SkipRecovery: true})
	if err == nil {
		rt.Close()
		t.Fatal("New succeeded without renewing the member's lease")
	}
	if !strings.Contains(err.Error(), "cannot be reached") {
		t.Fatalf("New's error %v does not say why", err)
	}
}

// Two runtimes on one store, each its own member. While A renews its
// lease, B is refused A's session with ErrLeaseHeld. When A is cut off
// from the store, its lease lapses: A stops the session at once (the tool
// call it was running is cancelled with the superseded cause) and
// activates nothing until it renews again; B then takes the session at a
// higher epoch and finishes the turn; and whatever A still appends at its
// old epoch is refused by the store. Once A reaches the store again, it
// serves again.
func TestAMemberWhoseLeaseLapsedIsFencedAndStopped(t *testing.T) {
	st := openMem(t, vfs.NewMem())
	var aborted atomic.Value
	started := make(chan struct{}, 4)
	proceed := make(chan struct{})
	slow := tools.Tool{Name: "slow", Description: "waits", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			aborted.Store(context.Cause(ctx))
			return nil, ctx.Err()
		case <-proceed:
			return json.RawMessage(`"done"`), nil
		}
	}}
	sc, err := script.Parse([]byte(`{"replies":[{"match":"go","toolCalls":[{"name":"slow","input":{}}]}],"default":{"text":"finished"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.SyncBuffer // both runtimes', printed if the test fails
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the runtimes' logs:\n%s", logs.String())
		}
	})
	start := func(owner string, store persistence.Store, ttl time.Duration) *Runtime {
		model := script.New(sc)
		a, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script/test"), Tools: []tools.Tool{slow},
			Models: func(string) (harness.Model, error) { return model, nil }})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := New(store, []*Agent{a}, Options{Lease: LeaseOptions{Owner: owner, TTL: ttl, Renew: 100 * time.Millisecond}, SkipRecovery: true,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("runtime", owner)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rt.Close)
		return rt
	}
	viewA := newLeaseView(st)
	a := start("a", viewA, time.Second)
	b := start("b", st, 5*time.Second) // B's lease never lapses here, even on a loaded machine
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := a.Push(ctx, "assistant", "s", []protocol.Event{protocol.Inputs.Text("m1", "go")}, false); err != nil {
		t.Fatal(err)
	}
	<-started // A runs the tool call
	if _, err := b.Push(ctx, "assistant", "s", []protocol.Event{protocol.Inputs.Text("m2", "me too")}, false); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("B's push while A renews its lease: %v, want ErrLeaseHeld", err)
	}
	held, _, err := st.ReadLease(ctx, "s")
	if err != nil || held.Owner != "a" {
		t.Fatalf("the lease: %+v %v", held, err)
	}

	viewA.cut.Store(true)
	eventually(t, ctx, "A kept the session after its lease lapsed", func() bool { return !a.IsActive("s") })
	// The tool's goroutine sees the cancellation on its own schedule.
	eventually(t, ctx, "A's tool call was not cancelled", func() bool { return aborted.Load() != nil })
	if cause, _ := aborted.Load().(error); !errors.Is(cause, errLeaseLost) {
		t.Fatalf("A's tool call ended with %v, want the lease's loss", cause)
	}
	if s := a.LeaseStatus(); s.State != LeaseLapsed || s.Member != "a" {
		t.Fatalf("A's lease status while cut off: %+v, want lapsed", s)
	}
	if _, err := a.Push(ctx, "assistant", "t", []protocol.Event{protocol.Inputs.Text("t1", "hi")}, false); !errors.Is(err, ErrNotServing) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a push to A while its lease has lapsed: %v, want ErrNotServing (ErrUnavailable)", err)
	}
	// B takes the session over once A's lease has ended in the store, and
	// the turn completes there (the lost tool call runs again, its
	// attempt superseded).
	for {
		_, err := b.Push(ctx, "assistant", "s", []protocol.Event{protocol.Inputs.Text("m3", "are you there?")}, false)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrLeaseHeld) || ctx.Err() != nil {
			l, _, lerr := st.ReadLease(context.Background(), "s")
			t.Fatalf("B's push after A's lease lapsed: %v (the lease %+v %v; A %+v, B %+v)", err, l, lerr, a.LeaseStatus(), b.LeaseStatus())
		}
		time.Sleep(20 * time.Millisecond)
	}
	now, _, err := st.ReadLease(ctx, "s")
	if err != nil || now.Owner != "b" || now.Epoch <= held.Epoch {
		t.Fatalf("the lease after the takeover: %+v %v (was %+v)", now, err, held)
	}
	close(proceed)
	eventually(t, ctx, "the turn did not complete on B", func() bool {
		s, _, err := b.State(ctx, "assistant", "s")
		return err == nil && s.AI.Active == nil && len(s.AI.Inbox.Items) == 0 && lastText(s.AI) == "finished"
	})
	// A wakes up and writes at its old epoch: the store refuses it.
	last, _ := st.LastIndex(ctx, "s")
	_, err = st.Append(ctx, "s", last, []protocol.Event{{ID: "from-a", Type: "app.note", Payload: []byte(`{}`)}}, persistence.WithEpoch(held.Epoch))
	if !errors.Is(err, persistence.ErrLeaseLost) {
		t.Fatalf("an append at A's epoch after the takeover: %v, want ErrLeaseLost", err)
	}
	// A reaches the store again: it serves again (another session; this
	// one is B's).
	viewA.cut.Store(false)
	eventually(t, ctx, "A did not serve again once its renewals succeeded", func() bool { return a.LeaseStatus().State == LeaseServing })
	if _, err := a.Push(ctx, "assistant", "t", []protocol.Event{protocol.Inputs.Text("t1", "hi")}, false); err != nil {
		t.Fatalf("a push to A once it renews again: %v", err)
	}
	if _, err := a.Push(ctx, "assistant", "s", []protocol.Event{protocol.Inputs.Text("m4", "mine?")}, false); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("A's push to B's session: %v, want ErrLeaseHeld", err)
	}
}

// A renewal that never returns (a process frozen in the middle of one)
// does not keep the member serving: the timer at the lease's end stops its
// sessions, without waiting for the renewal. When the renewal returns, the
// member serves again.
func TestAHungRenewalStillLapsesTheLease(t *testing.T) {
	view := newLeaseView(openMem(t, vfs.NewMem()))
	sc, _ := script.Parse([]byte(`{"default":{"text":"ok"}}`))
	a, _ := scriptAgent(t, sc)
	rt, err := New(view, []*Agent{a}, Options{Lease: LeaseOptions{Owner: "a", TTL: 400 * time.Millisecond, Renew: 100 * time.Millisecond}, SkipRecovery: true})
	if err != nil {
		t.Fatal(err)
	}
	hung := true
	defer func() {
		if hung {
			close(view.hang)
		}
		rt.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rt.Push(ctx, "assistant", "s", []protocol.Event{protocol.Inputs.Text("m1", "hi")}, false); err != nil {
		t.Fatal(err)
	}
	view.hanging.Store(true)
	eventually(t, ctx, "the member kept its session while its renewal hung past its lease", func() bool { return !rt.IsActive("s") })
	if s := rt.LeaseStatus(); s.State != LeaseLapsed {
		t.Fatalf("the lease status while the renewal hangs: %+v, want lapsed", s)
	}
	if _, err := rt.Push(ctx, "assistant", "s", []protocol.Event{protocol.Inputs.Text("m2", "hi")}, false); !errors.Is(err, ErrNotServing) {
		t.Fatalf("a push while the lease has lapsed: %v, want ErrNotServing", err)
	}
	view.hanging.Store(false)
	close(view.hang)
	hung = false
	eventually(t, ctx, "the member did not serve again once its renewals returned", func() bool { return rt.LeaseStatus().State == LeaseServing })
	if _, err := rt.Push(ctx, "assistant", "s", []protocol.Event{protocol.Inputs.Text("m2", "hi")}, false); err != nil {
		t.Fatalf("a push once the lease is renewed: %v", err)
	}
}

// stallingModel answers nothing: it waits for its call's end and records
// the cause.
type stallingModel struct {
	started chan struct{}
	cause   atomic.Value
}

func (m *stallingModel) Stream(ctx context.Context, _ harness.Request) (harness.Stream, error) {
	select {
	case m.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	m.cause.Store(context.Cause(ctx))
	return nil, context.Cause(ctx)
}

// A member that steps down (it lost sight of a majority, say) stops its
// sessions at once (a running model step is cancelled with the superseded
// cause), gives its lease up so that another member takes its sessions
// without waiting for the lease to lapse (a lease far longer than the
// test), and activates nothing until it steps up; then it serves again.
func TestStepDownGivesTheMemberLeaseUpAtOnce(t *testing.T) {
	st := openMem(t, vfs.NewMem())
	stalling := &stallingModel{started: make(chan struct{}, 1)}
	sc, _ := script.Parse([]byte(`{"default":{"text":"finished"}}`))
	start := func(owner string, model harness.Model) (*Runtime, *testutil.SyncBuffer) {
		a, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script/test"),
			Models: func(string) (harness.Model, error) { return model, nil }})
		if err != nil {
			t.Fatal(err)
		}
		var logs testutil.SyncBuffer
		rt, err := New(st, []*Agent{a}, Options{Lease: LeaseOptions{Owner: owner, TTL: time.Minute}, SkipRecovery: true,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rt.Close)
		return rt, &logs
	}
	a, logsA := start("a", stalling)
	b, _ := start("b", script.New(sc))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := a.Push(ctx, "assistant", "s", []protocol.Event{protocol.Inputs.Text("m1", "go")}, false); err != nil {
		t.Fatal(err)
	}
	<-stalling.started // A's model step runs
	if l, _, err := st.ReadLease(ctx, "s"); err != nil || l.Owner != "a" || !l.Expires.After(time.Now()) {
		t.Fatalf("the lease before the step-down: %+v %v, want a's, its member lease running", l, err)
	}

	a.StepDown("lost sight of the majority")
	if a.IsActive("s") {
		t.Fatal("A's session is still active after StepDown returned")
	}
	eventually(t, ctx, "A's model step was not cancelled", func() bool { return stalling.cause.Load() != nil })
	if cause, _ := stalling.cause.Load().(error); !errors.Is(cause, errLeaseLost) {
		t.Fatalf("A's model step ended with %v, want the lease's loss", cause)
	}
	if s := a.LeaseStatus(); s.State != LeaseSteppedDown || s.Reason != "lost sight of the majority" {
		t.Fatalf("A's lease status after StepDown: %+v", s)
	}
	if !strings.Contains(logsA.String(), "steps down") || !strings.Contains(logsA.String(), "member=a") {
		t.Fatalf("no log line of the step-down names the member: %s", logsA.String())
	}
	if _, err := a.Push(ctx, "assistant", "t", []protocol.Event{protocol.Inputs.Text("t1", "hi")}, false); !errors.Is(err, ErrNotServing) {
		t.Fatalf("a push to A while stepped down: %v, want ErrNotServing", err)
	}
	// B takes the session at once: A's lease, a minute long, was given up.
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	defer cancelShort()
	if _, err := b.Push(short, "assistant", "s", []protocol.Event{protocol.Inputs.Text("m2", "hello")}, false); err != nil {
		t.Fatalf("B's push after A stepped down: %v", err)
	}
	if l, _, err := st.ReadLease(ctx, "s"); err != nil || l.Owner != "b" {
		t.Fatalf("the lease after the takeover: %+v %v, want b's", l, err)
	}
	eventually(t, ctx, "the turn did not complete on B", func() bool {
		s, _, err := b.State(ctx, "assistant", "s")
		return err == nil && s.AI.Active == nil && len(s.AI.Inbox.Items) == 0 && lastText(s.AI) == "finished"
	})

	if err := a.StepUp(); err != nil {
		t.Fatal(err)
	}
	if s := a.LeaseStatus(); s.State != LeaseServing || !s.ValidUntil.After(time.Now()) {
		t.Fatalf("A's lease status after StepUp: %+v", s)
	}
	passive := false
	m := protocol.UIMessage{ID: "t1", Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: "hi"}}}
	if _, err := a.Push(ctx, "assistant", "t", []protocol.Event{protocol.Inputs.Message(m, protocol.MessageOptions{Generate: &passive})}, false); err != nil {
		t.Fatalf("a push to A after StepUp: %v", err)
	}
	if _, err := a.Push(ctx, "assistant", "s", []protocol.Event{protocol.Inputs.Text("m3", "mine?")}, false); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("A's push to B's session after StepUp: %v, want ErrLeaseHeld", err)
	}
}

// A store that refuses the lease write refuses the activation, with a
// clear error and a log line, and nothing is appended; once the store takes
// the lease again, the same push is served.
func TestAStoreThatRefusesTheLeaseRefusesTheActivation(t *testing.T) {
	st := openMem(t, vfs.NewMem())
	store := newLeaseView(st)
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

// The lease options' defaults, as docs/cluster.md says: a TTL of 1 s, and
// a renewal every quarter of it unless a shorter one is set.
func TestLeaseOptionsDefaults(t *testing.T) {
	for _, tc := range []struct{ ttl, renew, wantTTL, wantRenew time.Duration }{
		{0, 0, time.Second, 250 * time.Millisecond},
		{-time.Second, -time.Second, time.Second, 250 * time.Millisecond},
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
	// A runtime applies them.
	rt, err := New(openMem(t, vfs.NewMem()), nil, Options{Lease: LeaseOptions{Owner: "a"}, SkipRecovery: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if o := rt.opts.Lease; o.TTL != time.Second || o.Renew != 250*time.Millisecond {
		t.Fatalf("the runtime's lease options: %+v, want a TTL of 1s renewed every 250ms", o)
	}
}

// docs/cluster.md Leases: a session gives its ownership up when it stops,
// so that the next owner takes it at once, not once the member's lease
// lapses.
func TestAStoppedSessionGivesItsLeaseUp(t *testing.T) {
	st := openMem(t, vfs.NewMem())
	start := func(owner string) *Runtime {
		sc, _ := script.Parse([]byte(`{"default":{"text":"ok"}}`))
		a, _ := scriptAgent(t, sc)
		// A TTL far longer than the test: only a release lets b in.
		rt, err := New(st, []*Agent{a}, Options{Lease: LeaseOptions{Owner: owner, TTL: time.Minute}, SkipRecovery: true})
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
