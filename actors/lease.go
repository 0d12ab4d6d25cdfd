package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/a2-runtime/a2/persistence"
)

// Session leases (persistence.Leaser).
//
// With Options.Lease set and a store that keeps leases, a session actor
// takes the session's lease when it activates (before it reads the log),
// fences every append with the lease's epoch, renews the lease every
// Renew, and releases it when it stops, before its stop is reported (so
// that a member that activates the session next takes it at once). A
// lease held by another owner that has not expired refuses the activation
// with ErrLeaseHeld, and the runtime activates the session again when that
// lease expires, if it still places the session. A session actor whose
// renewal is refused (another owner took the lease: its member thought this
// one dead), or whose lease expires before a renewal succeeds (the store
// is unreachable, or the process was frozen), stops at once: its model
// call, compaction, tool executions and handlers are cancelled with
// errLeaseLost (a superseded attempt, R-DELIVERY-05/06), and whatever it
// still tries to append is refused by the store.

// LeaseOptions configure session leases.
type LeaseOptions struct {
	// Owner names this runtime in the store's leases (a cluster member's
	// ID). Empty turns leases off.
	Owner string
	// TTL is how long a lease lasts from its last renewal (default 2 s):
	// a member that dies holds its sessions at most this long after its
	// last renewal before a survivor may take them.
	TTL time.Duration
	// Renew is the interval between renewals (default TTL / 4). Each is
	// one synced write per active session.
	Renew time.Duration
}

func (o LeaseOptions) withDefaults() LeaseOptions {
	if o.TTL <= 0 {
		o.TTL = 2 * time.Second
	}
	if o.Renew <= 0 || o.Renew >= o.TTL {
		o.Renew = o.TTL / 4
	}
	return o
}

var (
	// ErrLeaseHeld is an activation refused because another owner holds
	// the session's lease: an ErrUnavailable, retried by a cluster's
	// router; the runtime activates the session again when it expires.
	ErrLeaseHeld = fmt.Errorf("%w: the session is leased to another member", ErrUnavailable)
	// errLeaseLost is the cause of a session actor's stop when its lease
	// was taken over or expired: its work in flight is superseded.
	errLeaseLost = errors.New("actors: the session's lease was lost; its attempt is superseded")
)

type renewLease struct{}

type leaseRenewed struct {
	lease persistence.Lease
	err   error
}

// leaser returns the store's leases when the runtime takes them.
func (s *sessionActor) leaser() (persistence.Leaser, bool) {
	if s.rt.opts.Lease.Owner == "" {
		return nil, false
	}
	l, ok := s.store.(persistence.Leaser)
	return l, ok
}

// takeLease acquires the session's lease for the activation (on the
// activation's blocking path).
func (s *sessionActor) takeLease() error {
	l, ok := s.leaser()
	if !ok {
		return nil
	}
	o := s.rt.opts.Lease
	lease, err := l.AcquireLease(context.Background(), s.id, o.Owner, o.TTL)
	var held *persistence.LeaseHeldError
	if errors.As(err, &held) {
		s.rt.opts.Logger.Info("a session's lease is held by another member; activating it again when it expires",
			"session", s.id, "holder", held.Lease.Owner, "epoch", held.Lease.Epoch, "until", held.Lease.Expires)
		s.heldUntil = held.Lease.Expires
		s.rt.activateAt(s.agent, s.id, held.Lease.Expires)
		return fmt.Errorf("%w: %v", ErrLeaseHeld, err)
	}
	if err != nil {
		return err
	}
	s.lease = lease
	s.leaseValid = time.Now().Add(o.TTL)
	return nil
}

// scheduleRenewal asks for the next renewal.
func (s *sessionActor) scheduleRenewal() {
	if _, ok := s.leaser(); !ok || s.lease.Epoch == 0 {
		return
	}
	self, sys := s.self, s.rt.system
	time.AfterFunc(s.rt.opts.Lease.Renew, func() { sys.Root.Send(self, &renewLease{}) })
}

// onRenewLease renews the lease off the actor's goroutine.
func (s *sessionActor) onRenewLease() {
	l, ok := s.leaser()
	if !ok || s.stopping {
		return
	}
	if time.Now().After(s.leaseValid) {
		s.loseLease(fmt.Errorf("the lease of epoch %d expired at %s before a renewal succeeded", s.lease.Epoch, s.leaseValid.Format(time.RFC3339Nano)))
		return
	}
	o, epoch, self, sys, session := s.rt.opts.Lease, s.lease.Epoch, s.self, s.rt.system, s.id
	began := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), o.TTL)
		defer cancel()
		lease, err := l.RenewLease(ctx, session, o.Owner, epoch, o.TTL)
		if err == nil {
			// Counted from before the call: the store's expiry is later.
			lease.Expires = began.Add(o.TTL)
		}
		sys.Root.Send(self, &leaseRenewed{lease: lease, err: err})
	}()
}

func (s *sessionActor) onLeaseRenewed(m *leaseRenewed) {
	if s.stopping {
		return
	}
	switch {
	case m.err == nil:
		s.leaseValid = m.lease.Expires
	case errors.Is(m.err, persistence.ErrLeaseLost):
		s.loseLease(m.err)
		return
	default:
		s.rt.opts.Logger.Warn("could not renew a session's lease; trying again", "session", s.id, "epoch", s.lease.Epoch, "err", m.err)
	}
	s.scheduleRenewal()
}

// loseLease stops the session at once: its work is superseded.
func (s *sessionActor) loseLease(why error) {
	s.rt.opts.Logger.Warn("a session's lease was lost: its work stops here", "session", s.id, "epoch", s.lease.Epoch, "why", why)
	s.lease = persistence.Lease{} // nothing to release
	s.stopCause = errLeaseLost
	s.lostLease.Store(true)
	s.stop()
}

// childStopCause is what a child (a lane, a tool execution) cancels its
// work with when the session stops: errLeaseLost when the lease was lost
// and errWrittenElsewhere when another runtime wrote the session (the
// attempt is superseded either way), errSessionStopped otherwise. Children call
// it from their own goroutines.
func (s *sessionActor) childStopCause() error {
	if s.lostLease.Load() {
		return errLeaseLost
	}
	if s.writtenElsewhere.Load() {
		return errWrittenElsewhere
	}
	return errSessionStopped
}

// releaseLease gives the lease up as the actor stops (on its goroutine,
// outside the dispatcher's bound: one store write), so that the next
// owner takes it at once.
func (s *sessionActor) releaseLease() {
	l, ok := s.leaser()
	if !ok || s.lease.Epoch == 0 {
		return
	}
	lease := s.lease
	s.lease = persistence.Lease{}
	s.rt.dispatcher.blocking(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.rt.opts.Lease.TTL)
		defer cancel()
		if err := l.ReleaseLease(ctx, s.id, s.rt.opts.Lease.Owner, lease.Epoch); err != nil {
			s.rt.opts.Logger.Warn("could not release a session's lease; it expires on its own", "session", s.id, "epoch", lease.Epoch, "err", err)
		}
	})
}

// activateAt activates the session again at t (when a lease another owner
// holds expires), if the runtime still places it then.
func (r *Runtime) activateAt(agent *Agent, session string, t time.Time) {
	time.AfterFunc(time.Until(t)+10*time.Millisecond, func() { _, _ = r.pid(agent, session) })
}
