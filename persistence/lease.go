package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Session ownership: one lease per member, an epoch per session.
//
// Placement can activate a session on two members at once (during a
// change of a cluster's members, or a split), and a process that froze can
// wake up and go on. So every writer of a session holds it at an
// ownership epoch that only grows: each new owner's activation raises it
// (AcquireLease), and an append with AppendOptions.Epoch is refused by the
// store itself (ErrLeaseLost) unless the session is at that epoch, so a
// writer that was superseded writes nothing more, whatever index it
// expects.
//
// Liveness is per member, not per session: a member renews one lease of
// its own (RenewMember) for all its sessions, so an idle session costs no
// writes and a thousand active ones cost what one does. A session owned by
// a member whose lease has lapsed (a member that died, froze, or stepped
// down) may be taken by another member at once; one whose owner is alive
// may not, until the owner releases it (a graceful handoff) or its lease
// lapses. A member that cannot renew its lease in time stops serving its
// sessions (it knows, by its own clock, when its lease ends).

// Lease is a session's owner as the store keeps it: the member, the
// session's ownership epoch, and when the member's lease ends (zero when
// the session was released, or its owner holds no lease).
type Lease struct {
	Owner   string
	Epoch   uint64
	Expires time.Time
}

var (
	// ErrLeaseHeld: another member owns the session, and its member lease
	// has not lapsed (a *LeaseHeldError says who and until when).
	ErrLeaseHeld = errors.New("persistence: the session is owned by another live member")
	// ErrLeaseLost: the session is not at the epoch given (another member
	// took it over): the append is refused, and nothing was written.
	ErrLeaseLost = errors.New("persistence: the session's ownership was taken over")
)

// LeaseHeldError is ErrLeaseHeld with the owner that holds the session.
type LeaseHeldError struct {
	Session string
	Lease   Lease
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("%v: session %q is owned by %q (epoch %d), whose lease ends at %s", ErrLeaseHeld, e.Session, e.Lease.Owner, e.Lease.Epoch, e.Lease.Expires.UTC().Format(time.RFC3339Nano))
}

func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// Leaser is implemented by a store that keeps member leases and session
// ownership epochs. The store's clock decides when a member's lease ends
// (the PostgreSQL server's, so that members' clocks need not agree).
type Leaser interface {
	// RenewMember extends member's lease until ttl from now (creating it),
	// whether or not it had lapsed meanwhile: one write, whatever the
	// member's number of sessions.
	RenewMember(ctx context.Context, member string, ttl time.Duration) error
	// ReleaseMember ends member's lease now, so that its sessions can be
	// taken at once (a graceful leave, or a member that steps down).
	ReleaseMember(ctx context.Context, member string) error
	// AcquireLease makes owner the session's owner at an epoch above every
	// earlier one of the session: when nobody owns it (never owned, or
	// released), when owner owns it already (a new epoch: a member that
	// activates a session again fences its own earlier activation), or
	// when its owner's member lease has lapsed (or never existed). Another
	// member whose lease has not lapsed is a *LeaseHeldError, whose Lease
	// says when that lease ends (the earliest the session can be taken
	// over, unless its owner renews or releases it).
	AcquireLease(ctx context.Context, session, owner string) (Lease, error)
	// ReleaseLease gives up owner's ownership of the session at epoch, so
	// that another member can take it at once; the epoch stays, so the
	// next one is higher. Ownership at another epoch is left alone (nil:
	// nothing to release).
	ReleaseLease(ctx context.Context, session, owner string, epoch uint64) error
	// ReadLease returns the session's owner, epoch and the end of the
	// owner's member lease; false when the session was never owned.
	ReadLease(ctx context.Context, session string) (Lease, bool, error)
}

// CheckLeaseArgs fails with ErrInvalid on an empty session or owner.
func CheckLeaseArgs(session, owner string) error {
	if err := CheckSession(session); err != nil {
		return err
	}
	return CheckMember(owner)
}

// CheckMember fails with ErrInvalid on an empty member name or one that
// is not valid UTF-8.
func CheckMember(member string) error {
	if member == "" {
		return fmt.Errorf("%w: a lease needs an owner", ErrInvalid)
	}
	if err := CheckSession(member); err != nil {
		return fmt.Errorf("%w: member name %q is not valid UTF-8", ErrInvalid, member)
	}
	return nil
}

// CheckTTL fails with ErrInvalid on a lease time that is not positive.
func CheckTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: a lease's time must be positive, not %s", ErrInvalid, ttl)
	}
	return nil
}
