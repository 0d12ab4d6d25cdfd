package storetest

import (
	"errors"
	"time"

	"github.com/a2-runtime/a2/persistence"
)

// leaseCases: session leases and the appends they fence
// (persistence.Leaser), for the stores that keep them.
var leaseCases = []testCase{
	{name: "lease/epochs-only-grow-and-another-owner-waits", run: func(e *env) {
		l := e.leaser()
		a, err := l.AcquireLease(e.ctx, "s1", "a", time.Minute)
		if err != nil || a.Epoch != 1 || a.Owner != "a" {
			e.t.Fatalf("first AcquireLease = %+v, %v; want epoch 1 for a", a, err)
		}
		_, err = l.AcquireLease(e.ctx, "s1", "b", time.Minute)
		var held *persistence.LeaseHeldError
		if !errors.As(err, &held) || !errors.Is(err, persistence.ErrLeaseHeld) || held.Lease.Owner != "a" || held.Lease.Epoch != 1 {
			e.t.Fatalf("AcquireLease by b of a's lease = %v; want a LeaseHeldError naming a at epoch 1", err)
		}
		again, err := l.AcquireLease(e.ctx, "s1", "a", time.Minute)
		if err != nil || again.Epoch != 2 {
			e.t.Fatalf("AcquireLease by a again = %+v, %v; want epoch 2", again, err)
		}
		if cur, found, err := l.ReadLease(e.ctx, "s1"); err != nil || !found || cur.Epoch != 2 || cur.Owner != "a" || !cur.Expires.After(time.Now()) {
			e.t.Fatalf("ReadLease = %+v, %v, %v", cur, found, err)
		}
		if _, found, err := l.ReadLease(e.ctx, "never"); err != nil || found {
			e.t.Fatalf("ReadLease of a session never leased = %v, %v", found, err)
		}
		// Released, another owner takes it at once, at a higher epoch.
		if err := l.ReleaseLease(e.ctx, "s1", "a", 2); err != nil {
			e.t.Fatal(err)
		}
		b, err := l.AcquireLease(e.ctx, "s1", "b", time.Minute)
		if err != nil || b.Epoch != 3 || b.Owner != "b" {
			e.t.Fatalf("AcquireLease by b after the release = %+v, %v; want epoch 3", b, err)
		}
		// A release at an old epoch leaves the lease alone.
		if err := l.ReleaseLease(e.ctx, "s1", "a", 2); err != nil {
			e.t.Fatal(err)
		}
		if _, err := l.AcquireLease(e.ctx, "s1", "a", time.Minute); !errors.Is(err, persistence.ErrLeaseHeld) {
			e.t.Fatalf("AcquireLease by a after a stale release = %v; want ErrLeaseHeld", err)
		}
	}},
	{name: "lease/an-expired-lease-is-taken-over-and-its-renewal-refused", run: func(e *env) {
		l := e.leaser()
		a, err := l.AcquireLease(e.ctx, "s1", "a", 50*time.Millisecond)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := l.RenewLease(e.ctx, "s1", "a", a.Epoch, 50*time.Millisecond); err != nil {
			e.t.Fatalf("RenewLease by its holder: %v", err)
		}
		var b persistence.Lease
		for deadline := time.Now().Add(10 * time.Second); ; {
			if b, err = l.AcquireLease(e.ctx, "s1", "b", time.Minute); err == nil {
				break
			}
			if !errors.Is(err, persistence.ErrLeaseHeld) || time.Now().After(deadline) {
				e.t.Fatalf("AcquireLease of an expiring lease: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if b.Epoch != a.Epoch+1 {
			e.t.Fatalf("the taken-over lease is at epoch %d, want %d", b.Epoch, a.Epoch+1)
		}
		_, err = l.RenewLease(e.ctx, "s1", "a", a.Epoch, time.Minute)
		wantErr(e.t, "RenewLease of a lease taken over", err, persistence.ErrLeaseLost)
	}},
	{name: "lease/appends-are-fenced-by-the-epoch", run: func(e *env) {
		l := e.leaser()
		a, err := l.AcquireLease(e.ctx, "s1", "a", time.Minute)
		if err != nil {
			e.t.Fatal(err)
		}
		w := e.s.(persistence.OptionsAppender)
		first, err := w.AppendWith(e.ctx, "s1", 0, evs("a", 2), persistence.AppendOptions{Epoch: a.Epoch})
		if err != nil {
			e.t.Fatalf("an append at the lease's epoch: %v", err)
		}
		if err := l.ReleaseLease(e.ctx, "s1", "a", a.Epoch); err != nil {
			e.t.Fatal(err)
		}
		b, err := l.AcquireLease(e.ctx, "s1", "b", time.Minute)
		if err != nil {
			e.t.Fatal(err)
		}
		_, err = w.AppendWith(e.ctx, "s1", 2, evs("stale", 1), persistence.AppendOptions{Epoch: a.Epoch})
		wantErr(e.t, "an append at the epoch before", err, persistence.ErrLeaseLost)
		e.wantLog("s1", first)
		// A resubmission of what the old epoch wrote still replays.
		if got, err := w.AppendWith(e.ctx, "s1", 0, evs("a", 2), persistence.AppendOptions{Epoch: a.Epoch}); err != nil || len(got) != 2 {
			e.t.Fatalf("a resubmission at the old epoch = %s, %v; want the stored events", showAll(got), err)
		}
		next, err := w.AppendWith(e.ctx, "s1", 2, evs("b", 1), persistence.AppendOptions{Epoch: b.Epoch})
		if err != nil {
			e.t.Fatalf("an append at the new epoch: %v", err)
		}
		e.wantLog("s1", append(first, next...))
		_, err = w.AppendWith(e.ctx, "never-leased", 0, evs("c", 1), persistence.AppendOptions{Epoch: 1})
		wantErr(e.t, "a fenced append of a session never leased", err, persistence.ErrLeaseLost)
	}},
	{name: "lease/bad-arguments", run: func(e *env) {
		l := e.leaser()
		_, err := l.AcquireLease(e.ctx, "", "a", time.Minute)
		wantErr(e.t, "AcquireLease of an empty session", err, persistence.ErrInvalid)
		_, err = l.AcquireLease(e.ctx, "s1", "", time.Minute)
		wantErr(e.t, "AcquireLease without an owner", err, persistence.ErrInvalid)
		_, err = l.AcquireLease(e.ctx, "s1", "a", 0)
		wantErr(e.t, "AcquireLease for no time", err, persistence.ErrInvalid)
		_, err = l.RenewLease(e.ctx, "s1", "a", 1, -time.Second)
		wantErr(e.t, "RenewLease for a negative time", err, persistence.ErrInvalid)
		if _, found, _ := l.ReadLease(e.ctx, "s1"); found {
			e.t.Fatal("a refused AcquireLease left a lease")
		}
	}},
}

func (e *env) leaser() persistence.Leaser {
	e.t.Helper()
	l, ok := e.s.(persistence.Leaser)
	if !ok {
		e.t.Skipf("storetest: %T keeps no session leases (persistence.Leaser)", e.s)
	}
	return l
}
