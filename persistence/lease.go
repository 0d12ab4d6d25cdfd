package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Session leases.
//
// Placement can activate a session on two nodes at once (during a change
// of a cluster's members, or a split), and a process that froze can wake
// up and go on. So a writer holds the session's lease: an owner, an epoch
// that only grows (each acquisition raises it) and an expiry. An append
// with AppendOptions.Epoch is refused by the store itself (ErrLeaseLost)
// unless the session's lease is at that epoch, so a writer whose lease was
// taken over writes nothing more, whatever index it expects; and the
// writer, which knows when its lease expires, stops its work before then
// unless it renews.

// Lease is a session's lease.
type Lease struct {
	Owner   string
	Epoch   uint64
	Expires time.Time
}

var (
	// ErrLeaseHeld: another owner holds the session's lease, and it has
	// not expired (a *LeaseHeldError says who and until when).
	ErrLeaseHeld = errors.New("persistence: the session's lease is held by another owner")
	// ErrLeaseLost: the session's lease is not at the epoch given (another
	// owner took it over): the append or renewal is refused, and nothing
	// was written.
	ErrLeaseLost = errors.New("persistence: the session's lease was taken over")
)

// LeaseHeldError is ErrLeaseHeld with the lease that holds.
type LeaseHeldError struct {
	Session string
	Lease   Lease
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("%v: session %q is leased to %q (epoch %d) until %s", ErrLeaseHeld, e.Session, e.Lease.Owner, e.Lease.Epoch, e.Lease.Expires.UTC().Format(time.RFC3339Nano))
}

func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// Leaser is implemented by a store that keeps session leases. The store's
// clock decides expiry (the PostgreSQL server's, so that members' clocks
// need not agree).
type Leaser interface {
	// AcquireLease takes the session's lease for owner until ttl from now,
	// at an epoch above every earlier one of the session: when nobody
	// holds it, when its holder's lease expired, or when owner holds it
	// already (a new epoch: an owner that activates a session again fences
	// its own earlier activation). Another owner's unexpired lease is a
	// *LeaseHeldError.
	AcquireLease(ctx context.Context, session, owner string, ttl time.Duration) (Lease, error)
	// RenewLease extends owner's lease at epoch until ttl from now, even if
	// it expired meanwhile, as long as nobody took it over (ErrLeaseLost).
	RenewLease(ctx context.Context, session, owner string, epoch uint64, ttl time.Duration) (Lease, error)
	// ReleaseLease ends owner's lease at epoch now, so that another owner
	// can take it at once; the epoch stays, so the next one is higher. A
	// lease at another epoch is left alone (nil: nothing to release).
	ReleaseLease(ctx context.Context, session, owner string, epoch uint64) error
	// ReadLease returns the session's lease; false when it never had one.
	ReadLease(ctx context.Context, session string) (Lease, bool, error)
}

// CheckLeaseArgs fails with ErrInvalid on an empty session or owner or a
// ttl that is not positive.
func CheckLeaseArgs(session, owner string, ttl time.Duration) error {
	if err := CheckSession(session); err != nil {
		return err
	}
	if owner == "" {
		return fmt.Errorf("%w: a lease needs an owner", ErrInvalid)
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: a lease's time must be positive, not %s", ErrInvalid, ttl)
	}
	return nil
}
