package storetest

import (
	"errors"
	"time"

	"github.com/a2-runtime/a2/persistence"
)

// leaseTTL is the member lease of the cases that need one to stay live;
// leaseSlack bounds how far the store's clock may be from the test's.
const (
	leaseTTL   = time.Minute
	leaseSlack = 10 * time.Second
)

// leaseCases: member leases, session ownership epochs and the appends they
// fence (persistence.Leaser), for the stores that keep them.
var leaseCases = []testCase{
	{name: "lease/epochs-only-grow-and-a-live-owner-keeps-its-session", run: func(e *env) {
		l := e.leaser()
		e.renewMember("a", leaseTTL)
		e.renewMember("b", leaseTTL)
		a := e.acquire("s1", "a")
		if a.Epoch != 1 || a.Owner != "a" {
			e.t.Fatalf("first AcquireLease = %+v; want epoch 1 for a", a)
		}
		e.wantLeaseEnd("a's lease, as AcquireLease returns it", a.Expires, leaseTTL)
		// Another member waits while a's member lease is live.
		_, err := l.AcquireLease(e.ctx, "s1", "b")
		held := e.wantHeld("AcquireLease by b of a's session", err, "a", 1)
		if !held.Lease.Expires.Equal(a.Expires) {
			e.t.Fatalf("the LeaseHeldError says a's lease ends at %s, AcquireLease said %s", held.Lease.Expires, a.Expires)
		}
		e.wantLease("s1 after b was refused", "s1", "a", 1)
		// The same member again: a higher epoch.
		again := e.acquire("s1", "a")
		if again.Epoch != 2 || again.Owner != "a" {
			e.t.Fatalf("AcquireLease by a again = %+v; want epoch 2 for a", again)
		}
		cur := e.wantLease("s1 acquired again", "s1", "a", 2)
		if !cur.Expires.Equal(a.Expires) {
			e.t.Fatalf("ReadLease says a's lease ends at %s, AcquireLease said %s", cur.Expires, a.Expires)
		}
		third := e.acquire("s1", "a")
		if third.Epoch != 3 {
			e.t.Fatalf("AcquireLease by a a third time = %+v; want epoch 3", third)
		}
		_, err = l.AcquireLease(e.ctx, "s1", "b")
		e.wantHeld("AcquireLease by b of a's session at epoch 3", err, "a", 3)
		// A renewal moves the lease's end, and what the store reports.
		e.renewMember("a", 2*leaseTTL)
		cur = e.wantLease("s1 after a renewed", "s1", "a", 3)
		e.wantLeaseEnd("a's renewed lease", cur.Expires, 2*leaseTTL)
		if !cur.Expires.After(a.Expires) {
			e.t.Fatalf("a's renewed lease ends at %s, not after %s", cur.Expires, a.Expires)
		}
		if _, found, err := l.ReadLease(e.ctx, "never"); err != nil || found {
			e.t.Fatalf("ReadLease of a session never owned = %v, %v; want not found", found, err)
		}
	}},
	{name: "lease/a-release-hands-over-at-once-and-a-stale-release-is-a-no-op", run: func(e *env) {
		l := e.leaser()
		e.renewMember("a", leaseTTL)
		e.renewMember("b", leaseTTL)
		a := e.acquire("s1", "a")
		if err := l.ReleaseLease(e.ctx, "s1", "a", a.Epoch); err != nil {
			e.t.Fatalf("ReleaseLease by its owner: %v", err)
		}
		if cur := e.wantLease("s1 released", "s1", "", a.Epoch); !cur.Expires.IsZero() {
			e.t.Fatalf("ReadLease of a released session says its lease ends at %s, want zero", cur.Expires)
		}
		b := e.acquire("s1", "b")
		if b.Epoch != a.Epoch+1 || b.Owner != "b" {
			e.t.Fatalf("AcquireLease by b after the release = %+v; want epoch %d for b", b, a.Epoch+1)
		}
		// A release at an old epoch, or by a member that does not own the
		// session, leaves it alone.
		if err := l.ReleaseLease(e.ctx, "s1", "a", a.Epoch); err != nil {
			e.t.Fatalf("a stale ReleaseLease: %v, want nil", err)
		}
		if err := l.ReleaseLease(e.ctx, "s1", "a", b.Epoch); err != nil {
			e.t.Fatalf("ReleaseLease by a member that does not own the session: %v, want nil", err)
		}
		if err := l.ReleaseLease(e.ctx, "never", "a", 1); err != nil {
			e.t.Fatalf("ReleaseLease of a session never owned: %v, want nil", err)
		}
		if _, found, err := l.ReadLease(e.ctx, "never"); err != nil || found {
			e.t.Fatalf("ReadLease of a session never owned, after a release of it = %v, %v; want not found", found, err)
		}
		e.wantLease("s1 after stale releases", "s1", "b", b.Epoch)
		_, err := l.AcquireLease(e.ctx, "s1", "a")
		e.wantHeld("AcquireLease by a after the stale releases", err, "b", b.Epoch)
		// Released again, the epoch stays: the next is higher still.
		if err := l.ReleaseLease(e.ctx, "s1", "b", b.Epoch); err != nil {
			e.t.Fatal(err)
		}
		again := e.acquire("s1", "a")
		if again.Epoch != b.Epoch+1 {
			e.t.Fatalf("AcquireLease by a after b's release = %+v; want epoch %d", again, b.Epoch+1)
		}
		// The owner's own release of an earlier epoch (an activation it has
		// since superseded) leaves the session alone too.
		latest := e.acquire("s1", "a")
		if err := l.ReleaseLease(e.ctx, "s1", "a", again.Epoch); err != nil {
			e.t.Fatalf("ReleaseLease by the owner at its earlier epoch: %v, want nil", err)
		}
		e.wantLease("s1 after its owner released an earlier epoch", "s1", "a", latest.Epoch)
		_, err = l.AcquireLease(e.ctx, "s1", "b")
		e.wantHeld("AcquireLease by b after a released an earlier epoch", err, "a", latest.Epoch)
	}},
	{name: "lease/a-lapsed-member-lease-lets-another-member-take-over", run: func(e *env) {
		l := e.leaser()
		e.renewMember("a", 50*time.Millisecond)
		a := e.acquire("s1", "a")
		e.renewMember("b", leaseTTL)
		var b persistence.Lease
		for deadline := time.Now().Add(10 * time.Second); ; {
			var err error
			if b, err = l.AcquireLease(e.ctx, "s1", "b"); err == nil {
				break
			}
			e.wantHeld("AcquireLease by b while a's lease may be live", err, "a", a.Epoch)
			if time.Now().After(deadline) {
				e.t.Fatalf("a's 50ms lease had not lapsed after 10s: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if b.Epoch != a.Epoch+1 || b.Owner != "b" {
			e.t.Fatalf("the session taken over = %+v; want epoch %d for b", b, a.Epoch+1)
		}
		// a wakes up and renews: the session stays b's, and a waits.
		e.renewMember("a", leaseTTL)
		e.wantLease("s1 after a renewed", "s1", "b", b.Epoch)
		_, err := l.AcquireLease(e.ctx, "s1", "a")
		e.wantHeld("AcquireLease by a after the takeover", err, "b", b.Epoch)
	}},
	{name: "lease/a-released-member-lease-frees-its-sessions-at-once", run: func(e *env) {
		l := e.leaser()
		e.renewMember("a", leaseTTL)
		e.renewMember("b", leaseTTL)
		a1, a2 := e.acquire("s1", "a"), e.acquire("s2", "a")
		_, err := l.AcquireLease(e.ctx, "s1", "b")
		e.wantHeld("AcquireLease by b before a released its lease", err, "a", a1.Epoch)
		if err := l.ReleaseMember(e.ctx, "a"); err != nil {
			e.t.Fatalf("ReleaseMember: %v", err)
		}
		// The sessions stay a's, at their epochs, until taken; a's lease
		// has ended (no end, or one not after now).
		if cur := e.wantLease("s1 of a released member", "s1", "a", a1.Epoch); !cur.Expires.IsZero() && cur.Expires.After(time.Now().Add(leaseSlack)) {
			e.t.Fatalf("ReadLease after ReleaseMember says a's lease ends at %s", cur.Expires)
		}
		if err := l.ReleaseMember(e.ctx, "a"); err != nil {
			e.t.Fatalf("ReleaseMember of a member without a lease: %v, want nil", err)
		}
		if b1 := e.acquire("s1", "b"); b1.Epoch != a1.Epoch+1 {
			e.t.Fatalf("AcquireLease of s1 by b after ReleaseMember(a) = %+v; want epoch %d", b1, a1.Epoch+1)
		}
		if b2 := e.acquire("s2", "b"); b2.Epoch != a2.Epoch+1 {
			e.t.Fatalf("AcquireLease of s2 by b after ReleaseMember(a) = %+v; want epoch %d", b2, a2.Epoch+1)
		}
		// ReleaseMember ends a's lease, not b's.
		_, err = l.AcquireLease(e.ctx, "s1", "a")
		e.wantHeld("AcquireLease by a of b's session", err, "b", a1.Epoch+1)
	}},
	{name: "lease/a-session-of-a-member-that-never-held-a-lease-is-takeable", run: func(e *env) {
		l := e.leaser()
		a := e.acquire("s1", "a")
		if a.Epoch != 1 || !a.Expires.IsZero() {
			e.t.Fatalf("AcquireLease by a member without a lease = %+v; want epoch 1 and no lease end", a)
		}
		if cur := e.wantLease("s1 of a member without a lease", "s1", "a", 1); !cur.Expires.IsZero() {
			e.t.Fatalf("ReadLease says a, which never renewed, has a lease ending at %s", cur.Expires)
		}
		e.renewMember("b", leaseTTL)
		if b := e.acquire("s1", "b"); b.Epoch != 2 || b.Owner != "b" {
			e.t.Fatalf("AcquireLease by b of the session of a member without a lease = %+v; want epoch 2 for b", b)
		}
		_, err := l.AcquireLease(e.ctx, "s1", "a")
		e.wantHeld("AcquireLease by a of b's session", err, "b", 2)
	}},
	{name: "lease/appends-are-fenced-by-the-epoch", run: func(e *env) {
		l := e.leaser()
		e.renewMember("a", leaseTTL)
		e.renewMember("b", leaseTTL)
		a := e.acquire("s1", "a")
		first, err := e.s.Append(e.ctx, "s1", 0, evs("a", 2), persistence.WithEpoch(a.Epoch))
		if err != nil {
			e.t.Fatalf("an append at the session's epoch: %v", err)
		}
		if err := l.ReleaseLease(e.ctx, "s1", "a", a.Epoch); err != nil {
			e.t.Fatal(err)
		}
		b := e.acquire("s1", "b")
		_, err = e.s.Append(e.ctx, "s1", 2, evs("stale", 1), persistence.WithEpoch(a.Epoch))
		wantErr(e.t, "an append at the epoch before", err, persistence.ErrLeaseLost)
		e.wantLog("s1", first)
		if got := e.lookup("stale-1"); len(got) != 0 {
			e.t.Fatalf("a refused append stored %s", showAll(got))
		}
		// A resubmission of what the old epoch wrote still replays.
		if got, err := e.s.Append(e.ctx, "s1", 0, evs("a", 2), persistence.WithEpoch(a.Epoch)); err != nil || !sameEvents(got, first) {
			e.t.Fatalf("a resubmission at the old epoch = %s, %v; want the stored events %s", showAll(got), err, showAll(first))
		}
		next, err := e.s.Append(e.ctx, "s1", 2, evs("b", 1), persistence.WithEpoch(b.Epoch))
		if err != nil {
			e.t.Fatalf("an append at the new epoch: %v", err)
		}
		e.wantLog("s1", append(first, next...))
		// A member that activates a session again fences its own earlier
		// activation.
		b2 := e.acquire("s1", "b")
		_, err = e.s.Append(e.ctx, "s1", 3, evs("b-old", 1), persistence.WithEpoch(b.Epoch))
		wantErr(e.t, "an append at the same member's earlier epoch", err, persistence.ErrLeaseLost)
		last, err := e.s.Append(e.ctx, "s1", 3, evs("b-new", 1), persistence.WithEpoch(b2.Epoch))
		if err != nil {
			e.t.Fatalf("an append at the member's new epoch: %v", err)
		}
		e.wantLog("s1", append(append(first, next...), last...))
		// A session never acquired is at epoch 0: any fenced append is refused.
		_, err = e.s.Append(e.ctx, "never-owned", 0, evs("c", 1), persistence.WithEpoch(1))
		wantErr(e.t, "a fenced append of a session never owned", err, persistence.ErrLeaseLost)
		e.wantLog("never-owned", nil)
		if _, found, err := l.ReadLease(e.ctx, "never-owned"); err != nil || found {
			e.t.Fatalf("ReadLease after a refused fenced append = %v, %v; want not found", found, err)
		}
	}},
	{name: "lease/ownership-and-member-leases-survive-a-reopen", reopen: true, run: func(e *env) {
		e.renewMember("a", leaseTTL)
		e.acquire("s1", "a")
		a := e.acquire("s1", "a")
		e.acquire("s2", "a")
		if err := e.leaser().ReleaseLease(e.ctx, "s2", "a", 1); err != nil {
			e.t.Fatal(err)
		}
		e.reopen()
		l := e.leaser()
		if cur := e.wantLease("s1 after reopen", "s1", "a", a.Epoch); !cur.Expires.Equal(a.Expires) {
			e.t.Fatalf("after reopen a's lease ends at %s, before it ended at %s", cur.Expires, a.Expires)
		}
		e.wantLease("s2 after reopen", "s2", "", 1)
		e.renewMember("b", leaseTTL)
		_, err := l.AcquireLease(e.ctx, "s1", "b")
		e.wantHeld("AcquireLease by b of a's session after reopen", err, "a", a.Epoch)
		if again := e.acquire("s1", "a"); again.Epoch != a.Epoch+1 {
			e.t.Fatalf("AcquireLease by a after reopen = %+v; want epoch %d", again, a.Epoch+1)
		}
		if b := e.acquire("s2", "b"); b.Epoch != 2 {
			e.t.Fatalf("AcquireLease of the released s2 after reopen = %+v; want epoch 2", b)
		}
	}},
	{name: "lease/bad-arguments", run: func(e *env) {
		l := e.leaser()
		_, err := l.AcquireLease(e.ctx, "", "a")
		wantErr(e.t, "AcquireLease of an empty session", err, persistence.ErrInvalid)
		_, err = l.AcquireLease(e.ctx, "s1", "")
		wantErr(e.t, "AcquireLease without an owner", err, persistence.ErrInvalid)
		_, err = l.AcquireLease(e.ctx, "s1", "\xff")
		wantErr(e.t, "AcquireLease by an owner that is not UTF-8", err, persistence.ErrInvalid)
		wantErr(e.t, "RenewMember for no time", l.RenewMember(e.ctx, "a", 0), persistence.ErrInvalid)
		wantErr(e.t, "RenewMember for a negative time", l.RenewMember(e.ctx, "a", -time.Second), persistence.ErrInvalid)
		wantErr(e.t, "RenewMember of an empty member", l.RenewMember(e.ctx, "", leaseTTL), persistence.ErrInvalid)
		wantErr(e.t, "ReleaseMember of an empty member", l.ReleaseMember(e.ctx, ""), persistence.ErrInvalid)
		wantErr(e.t, "ReleaseLease of an empty session", l.ReleaseLease(e.ctx, "", "a", 1), persistence.ErrInvalid)
		_, _, err = l.ReadLease(e.ctx, "")
		wantErr(e.t, "ReadLease of an empty session", err, persistence.ErrInvalid)
		if _, found, err := l.ReadLease(e.ctx, "s1"); err != nil || found {
			e.t.Fatalf("ReadLease after refused AcquireLeases = %v, %v; want not found", found, err)
		}
		// The refused RenewMember calls gave a no lease: its session is at
		// epoch 1 (nothing acquired before) with no lease end, and takeable.
		if a := e.acquire("s1", "a"); a.Epoch != 1 || !a.Expires.IsZero() {
			e.t.Fatalf("AcquireLease after the refused calls = %+v; want epoch 1 and no lease end", a)
		}
		wantErr(e.t, "ReleaseLease without an owner", l.ReleaseLease(e.ctx, "s1", "", 1), persistence.ErrInvalid)
		e.wantLease("s1 after a refused ReleaseLease", "s1", "a", 1)
		if b := e.acquire("s1", "b"); b.Epoch != 2 {
			e.t.Fatalf("AcquireLease by b of the session of a, which has no lease = %+v; want epoch 2", b)
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

// renewMember renews member's lease for ttl, failing the case on error.
func (e *env) renewMember(member string, ttl time.Duration) {
	e.t.Helper()
	if err := e.leaser().RenewMember(e.ctx, member, ttl); err != nil {
		e.t.Fatalf("RenewMember(%q, %s): %v", member, ttl, err)
	}
}

// acquire makes owner the session's owner, failing the case on error.
func (e *env) acquire(session, owner string) persistence.Lease {
	e.t.Helper()
	l, err := e.leaser().AcquireLease(e.ctx, session, owner)
	if err != nil {
		e.t.Fatalf("AcquireLease(%q, %q): %v", session, owner, err)
	}
	return l
}

// wantLease fails unless the session is owned by owner at epoch, and
// returns what ReadLease says.
func (e *env) wantLease(what, session, owner string, epoch uint64) persistence.Lease {
	e.t.Helper()
	l, found, err := e.leaser().ReadLease(e.ctx, session)
	if err != nil || !found || l.Owner != owner || l.Epoch != epoch {
		e.t.Fatalf("%s: ReadLease(%q) = %+v, %v, %v; want owner %q at epoch %d", what, session, l, found, err, owner, epoch)
	}
	return l
}

// wantHeld fails unless err is a *LeaseHeldError (and ErrLeaseHeld)
// naming owner at epoch, with a lease end in the future, and returns it.
func (e *env) wantHeld(what string, err error, owner string, epoch uint64) *persistence.LeaseHeldError {
	e.t.Helper()
	var held *persistence.LeaseHeldError
	if !errors.As(err, &held) || !errors.Is(err, persistence.ErrLeaseHeld) {
		e.t.Fatalf("%s: %v; want a LeaseHeldError", what, err)
	}
	if held.Lease.Owner != owner || held.Lease.Epoch != epoch {
		e.t.Fatalf("%s: the LeaseHeldError names %+v; want owner %q at epoch %d", what, held.Lease, owner, epoch)
	}
	if !held.Lease.Expires.After(time.Now().Add(-leaseSlack)) {
		e.t.Fatalf("%s: the LeaseHeldError says the owner's lease ended at %s, in the past", what, held.Lease.Expires)
	}
	return held
}

// wantLeaseEnd fails unless end is about ttl from now (within leaseSlack,
// the store's clock deciding).
func (e *env) wantLeaseEnd(what string, end time.Time, ttl time.Duration) {
	e.t.Helper()
	now := time.Now()
	if end.Before(now.Add(ttl-leaseSlack)) || end.After(now.Add(ttl+leaseSlack)) {
		e.t.Fatalf("%s ends at %s; want about %s after %s", what, end, ttl, now)
	}
}
