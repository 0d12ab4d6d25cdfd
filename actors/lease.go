package actors

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/a2-runtime/a2/internal/wire"
	"github.com/a2-runtime/a2/persistence"
)

// Session ownership and the member's lease (persistence.Leaser).
//
// With Options.Lease.Owner set and a store that keeps leases, liveness is
// the runtime's, not each session's: the runtime holds one lease of its
// own (the member's) in each store that keeps leases (the runtime's, and
// every distinct AgentOptions.Store), renews it once in New before it
// serves, then every Renew on a goroutine of its own: one write per
// store per renewal, whatever the number of sessions. It counts the
// lease valid until TTL after the start of its last successful renewal,
// by its own clock (the store's lease ends later than that). If that time
// passes before a renewal succeeds (the store is unreachable, the process
// was frozen: a timer at that time notices it, not only the next
// renewal), the member's lease has lapsed: every active session stops at
// once, as one whose lease was lost (its model call, compaction, tool
// executions and handlers are cancelled with errLeaseLost, a superseded
// attempt, R-DELIVERY-05/06), and the runtime activates none
// (ErrNotServing) until a renewal succeeds. StepDown does the same on
// purpose, and gives the member's lease up so that other members take its
// sessions at once; StepUp serves again.
//
// A session has only an ownership epoch: its actor takes it when it
// activates (AcquireLease, before it reads the log), fences every append
// with it, and releases it when it stops, before its stop is reported (so
// that a member that activates the session next takes it at once). An
// active or idle session costs no lease writes besides these two. A
// session owned by another member whose lease has not lapsed refuses the
// activation with ErrLeaseHeld, and the runtime activates the session
// again when that lease ends, if it still places the session. Whatever a
// superseded session actor still tries to append is refused by the store
// (persistence.ErrLeaseLost), and the actor stops.

// LeaseOptions configure the member's lease and the sessions' ownership.
type LeaseOptions struct {
	// Owner names this runtime in the store's leases (a cluster member's
	// ID). Empty turns leases off.
	Owner string
	// TTL is how long the member's lease lasts from its last renewal
	// (default 1 s): a member that dies keeps its sessions from the
	// survivors at most this long after its last renewal, and a member
	// that cannot renew for this long stops serving.
	TTL time.Duration
	// Renew is the interval between renewals (default TTL / 4): one
	// synced write per store that keeps leases, whatever the number of
	// sessions.
	Renew time.Duration
}

func (o LeaseOptions) withDefaults() LeaseOptions {
	if o.TTL <= 0 {
		o.TTL = time.Second
	}
	if o.Renew <= 0 || o.Renew >= o.TTL {
		o.Renew = o.TTL / 4
	}
	return o
}

// leaseRetry is when a session held by another member is activated again
// when the store names no end for the holder's lease, or one already past
// (the holder's lease lapsed meanwhile, or the clocks disagree).
const leaseRetry = 100 * time.Millisecond

// heldRecheck bounds how long a session held by another member waits
// before its activation is tried again, whatever the holder's lease end.
const heldRecheck = 250 * time.Millisecond

var (
	// ErrLeaseHeld is an activation refused because another live member
	// owns the session: an ErrUnavailable, retried by a cluster's router;
	// the runtime activates the session again when that member's lease
	// ends.
	ErrLeaseHeld = wire.ErrLeaseHeld
	// ErrNotServing is an activation refused because this member's lease
	// has lapsed (until a renewal succeeds) or it stepped down (until it
	// steps up): an ErrUnavailable.
	ErrNotServing = wire.ErrNotServing
	// errLeaseLost is the cause of a session actor's stop when its
	// ownership was taken over, or its member's lease lapsed or was given
	// up: its work in flight is superseded.
	errLeaseLost = errors.New("actors: the session's lease was lost; its attempt is superseded")
)

// LeaseState is where a member's lease stands (Runtime.LeaseStatus).
type LeaseState int

const (
	// LeaseServing: the lease is valid (or leases are off); the runtime
	// serves sessions.
	LeaseServing LeaseState = iota
	// LeaseSteppedDown: StepDown gave the lease up; nothing is served
	// until StepUp.
	LeaseSteppedDown
	// LeaseLapsed: the lease ran out before a renewal succeeded; nothing
	// is served until one does.
	LeaseLapsed
)

func (s LeaseState) String() string {
	switch s {
	case LeaseServing:
		return "serving"
	case LeaseSteppedDown:
		return "stepped down"
	case LeaseLapsed:
		return "lapsed"
	}
	return fmt.Sprintf("LeaseState(%d)", int(s))
}

// LeaseStatus is a member's lease as its runtime sees it.
type LeaseStatus struct {
	// Member is LeaseOptions.Owner.
	Member string
	State  LeaseState
	// Reason is StepDown's, while stepped down.
	Reason string
	// ValidUntil is when the lease lapses unless renewed, by this
	// process's clock (zero when leases are off).
	ValidUntil time.Time
}

// memberLease keeps the member's lease of a Runtime (nil when leases are
// off: no Owner, or no store that keeps leases).
type memberLease struct {
	rt      *Runtime
	opts    LeaseOptions
	leasers []persistence.Leaser

	quit     chan struct{}
	loopDone chan struct{}

	// stepMu serializes StepDown and StepUp; storeMu the lease's store
	// calls, so that a renewal in flight never lands after a release (it
	// would bring the lease back).
	stepMu  sync.Mutex
	storeMu sync.Mutex

	mu         sync.Mutex
	validUntil time.Time
	lapsed     bool
	down       bool
	reason     string
	closed     bool
	// failing: a renewal failed since the last success (logged once).
	failing bool
	// cancelRenew cancels the renewal in flight (StepDown).
	cancelRenew context.CancelFunc
	timer       *time.Timer
}

// newMemberLease returns the member's lease over the distinct stores that
// keep leases, renewed once (an error fails New); New then starts its
// loop. Nil when leases are off.
func newMemberLease(r *Runtime, agents []*Agent) (*memberLease, error) {
	if r.opts.Lease.Owner == "" {
		return nil, nil
	}
	var leasers []persistence.Leaser
	add := func(s persistence.Store) {
		l, ok := s.(persistence.Leaser)
		if !ok {
			return
		}
		for _, have := range leasers {
			if sameStore(have, l) {
				return
			}
		}
		leasers = append(leasers, l)
	}
	add(r.store)
	for _, a := range agents {
		if a.opts.Store != nil {
			add(a.opts.Store)
		}
	}
	if len(leasers) == 0 {
		return nil, nil
	}
	m := &memberLease{rt: r, opts: r.opts.Lease, leasers: leasers, quit: make(chan struct{}), loopDone: make(chan struct{})}
	if _, err := m.renew(); err != nil {
		return nil, fmt.Errorf("actors: member %q could not take its lease: %w", m.opts.Owner, err)
	}
	return m, nil
}

// sameStore reports whether a and b are the same store.
func sameStore(a, b any) bool {
	t := reflect.TypeOf(a)
	return t == reflect.TypeOf(b) && t.Comparable() && a == b
}

// loop renews the lease every Renew until the runtime closes (skipping
// the renewals while stepped down). A renewal that hangs delays the next
// one; the timer at validUntil notices the lapse meanwhile.
func (m *memberLease) loop() {
	defer close(m.loopDone)
	t := time.NewTicker(m.opts.Renew)
	defer t.Stop()
	for {
		select {
		case <-m.quit:
			return
		case <-t.C:
			if recovered, err := m.renew(); err == nil && recovered {
				m.rt.opts.Logger.Info("this member's lease was renewed: it serves sessions again", "member", m.opts.Owner)
			}
		}
	}
}

// errNotRenewing is a renewal skipped: the member stepped down, or the
// runtime closed.
var errNotRenewing = errors.New("actors: the member's lease is not being renewed")

// renew renews the lease in every store, each call bounded by TTL;
// recovered reports a renewal that ends a lapse.
func (m *memberLease) renew() (recovered bool, err error) {
	m.storeMu.Lock()
	defer m.storeMu.Unlock()
	m.mu.Lock()
	if m.down || m.closed {
		m.mu.Unlock()
		return false, errNotRenewing
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.TTL)
	m.cancelRenew = cancel
	m.mu.Unlock()
	defer cancel()
	began := time.Now()
	for _, l := range m.leasers {
		if err = l.RenewMember(ctx, m.opts.Owner, m.opts.TTL); err != nil {
			break
		}
	}
	if err != nil {
		m.failed(err)
		return false, err
	}
	return m.renewed(began, time.Now()), nil
}

// failed logs the first failed renewal since the last success.
func (m *memberLease) failed(err error) {
	m.mu.Lock()
	first := !m.failing && !m.down && !m.closed
	m.failing = true
	until := m.validUntil
	m.mu.Unlock()
	if first {
		m.rt.opts.Logger.Warn("could not renew this member's lease; trying again", "member", m.opts.Owner, "validUntil", until, "every", m.opts.Renew, "err", err)
	}
}

// renewed counts the lease valid until TTL after the renewal began, and
// reports whether that ends a lapse. A renewal that ends after the lease
// had run out is a lapse all the same (the process froze, or the timer
// has not run yet): the store's lease may have ended meanwhile, so the
// sessions stop before the member serves again.
func (m *memberLease) renewed(began, ended time.Time) bool {
	m.mu.Lock()
	if m.down || m.closed {
		m.mu.Unlock()
		return false
	}
	recovered := m.lapsed
	if !m.lapsed && !m.validUntil.IsZero() && ended.After(m.validUntil) {
		m.lapsed, recovered = true, true
		until := m.validUntil
		m.mu.Unlock()
		m.lapse(until)
		m.mu.Lock()
		if m.down || m.closed {
			m.mu.Unlock()
			return false
		}
	}
	m.validUntil = began.Add(m.opts.TTL)
	m.lapsed, m.failing = false, false
	if m.timer == nil {
		m.timer = time.AfterFunc(time.Until(m.validUntil), m.checkLapse)
	} else {
		m.timer.Reset(time.Until(m.validUntil))
	}
	m.mu.Unlock()
	return recovered
}

// checkLapse runs at validUntil: unless a renewal extended it meanwhile,
// the lease has lapsed.
func (m *memberLease) checkLapse() {
	m.mu.Lock()
	if m.down || m.closed || m.lapsed {
		m.mu.Unlock()
		return
	}
	if left := time.Until(m.validUntil); left > 0 {
		m.timer.Reset(left) // extended meanwhile (renewed reset it too)
		m.mu.Unlock()
		return
	}
	m.lapsed = true
	until := m.validUntil
	m.mu.Unlock()
	m.lapse(until)
}

// lapse stops every session: the member's lease ran out at until.
func (m *memberLease) lapse(until time.Time) {
	m.rt.opts.Logger.Warn("this member's lease lapsed before a renewal succeeded: its sessions stop, and it activates none until a renewal succeeds",
		"member", m.opts.Owner, "validUntil", until)
	m.rt.loseAll(fmt.Errorf("member %q's lease lapsed at %s", m.opts.Owner, until.Format(time.RFC3339Nano)))
}

// serving is nil when the runtime may activate sessions, an ErrNotServing
// otherwise.
func (m *memberLease) serving() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.down:
		return fmt.Errorf("%w: member %q stepped down (%s)", ErrNotServing, m.opts.Owner, m.reason)
	case m.lapsed || !time.Now().Before(m.validUntil):
		return fmt.Errorf("%w: member %q's lease lapsed at %s", ErrNotServing, m.opts.Owner, m.validUntil.Format(time.RFC3339Nano))
	}
	return nil
}

// release gives the member's lease up in every store, best effort, each
// call bounded by TTL; the caller holds storeMu.
func (m *memberLease) release() {
	for _, l := range m.leasers {
		ctx, cancel := context.WithTimeout(context.Background(), m.opts.TTL)
		if err := l.ReleaseMember(ctx, m.opts.Owner); err != nil {
			m.rt.opts.Logger.Warn("could not release this member's lease; it lapses on its own", "member", m.opts.Owner, "err", err)
		}
		cancel()
	}
}

// close stops the renewals and releases the lease (Runtime.Close, once
// the sessions have stopped and released theirs).
func (m *memberLease) close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	if m.timer != nil {
		m.timer.Stop()
	}
	cancel := m.cancelRenew
	m.mu.Unlock()
	if cancel != nil {
		cancel() // the renewal in flight, if any
	}
	close(m.quit)
	<-m.loopDone
	m.storeMu.Lock()
	m.release()
	m.storeMu.Unlock()
}

// LeaseStatus returns the member's lease as this runtime sees it: serving
// (also when leases are off), stepped down (with StepDown's reason), or
// lapsed, and when it lapses unless renewed.
func (r *Runtime) LeaseStatus() LeaseStatus {
	m := r.member
	if m == nil {
		return LeaseStatus{Member: r.opts.Lease.Owner, State: LeaseServing}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st := LeaseStatus{Member: m.opts.Owner, ValidUntil: m.validUntil}
	switch {
	case m.down:
		st.State, st.Reason = LeaseSteppedDown, m.reason
	case m.lapsed || !time.Now().Before(m.validUntil):
		st.State = LeaseLapsed
	default:
		st.State = LeaseServing
	}
	return st
}

// StepDown stops serving (a cluster member cut off from a majority of its
// members, say): it stops renewing the member's lease, stops every active
// session as one whose lease was lost, gives the member's lease up (best
// effort, bounded by the lease's TTL) so that other members take its
// sessions at once, and refuses activations (ErrNotServing) until StepUp.
// It returns once the sessions have stopped, or after the TTL. A runtime
// without leases, stepped down already or closed ignores it.
func (r *Runtime) StepDown(reason string) {
	m := r.member
	if m == nil {
		return
	}
	m.stepMu.Lock()
	defer m.stepMu.Unlock()
	m.mu.Lock()
	if m.down || m.closed {
		m.mu.Unlock()
		return
	}
	m.down, m.reason = true, reason
	cancel := m.cancelRenew
	m.mu.Unlock()
	if cancel != nil {
		cancel() // the renewal in flight, if any
	}
	r.opts.Logger.Warn("this member steps down: its sessions stop, and it activates none until it steps up", "member", m.opts.Owner, "reason", reason)
	pids := r.loseAll(fmt.Errorf("member %q stepped down: %s", m.opts.Owner, reason))
	m.storeMu.Lock() // after the renewal in flight
	m.release()
	m.storeMu.Unlock()
	deadline := time.After(m.opts.TTL)
	for _, p := range pids {
		select {
		case <-r.doneOf(p):
		case <-deadline:
			return
		}
	}
}

// StepUp serves again after StepDown: it renews the member's lease at
// once and resumes the renewals. If that renewal fails, the lease stays
// lapsed (nothing is activated) until a later renewal succeeds, and the
// error is returned. A runtime without leases, not stepped down or closed
// ignores it.
func (r *Runtime) StepUp() error {
	m := r.member
	if m == nil {
		return nil
	}
	m.stepMu.Lock()
	defer m.stepMu.Unlock()
	m.mu.Lock()
	if !m.down || m.closed {
		m.mu.Unlock()
		return nil
	}
	m.down, m.reason, m.lapsed, m.failing = false, "", true, false
	m.mu.Unlock()
	if _, err := m.renew(); err != nil {
		r.opts.Logger.Warn("this member steps up, but could not renew its lease: it serves once a renewal succeeds", "member", m.opts.Owner, "err", err)
		return fmt.Errorf("%w: member %q could not renew its lease: %v", ErrNotServing, m.opts.Owner, err)
	}
	r.opts.Logger.Info("this member steps up: it serves sessions again", "member", m.opts.Owner)
	return nil
}

// memberLeaseLost stops a session actor whose member's lease lapsed or
// was given up.
type memberLeaseLost struct{ why error }

// loseAll stops every active session as one whose lease was lost, and
// returns their actors.
func (r *Runtime) loseAll(why error) []*actor.PID {
	r.mu.Lock()
	pids := make([]*actor.PID, 0, len(r.sessions))
	for _, p := range r.sessions {
		pids = append(pids, p)
	}
	r.mu.Unlock()
	for _, p := range pids {
		r.system.Root.Send(p, &memberLeaseLost{why: why})
	}
	return pids
}

// leaser returns the store's leases when the runtime takes them.
func (s *sessionActor) leaser() (persistence.Leaser, bool) {
	if s.rt.opts.Lease.Owner == "" {
		return nil, false
	}
	l, ok := s.store.(persistence.Leaser)
	return l, ok
}

// takeLease takes the session's ownership for the activation, at a new
// epoch (on the activation's blocking path).
func (s *sessionActor) takeLease() error {
	l, ok := s.leaser()
	if !ok {
		return nil
	}
	if err := s.rt.member.serving(); err != nil {
		return err
	}
	lease, err := l.AcquireLease(context.Background(), s.id, s.rt.opts.Lease.Owner)
	var held *persistence.LeaseHeldError
	if errors.As(err, &held) {
		// Tried again when the holder's lease ends, or sooner: the holder
		// may release the session or step down before then (it then gives
		// its lease up), and the store's clock, which timed the lease's
		// end, need not agree with ours.
		until := held.Lease.Expires
		if now := time.Now(); until.IsZero() || !until.After(now) {
			until = now.Add(leaseRetry)
		} else if soon := now.Add(heldRecheck); soon.Before(until) {
			until = soon
		}
		s.rt.opts.Logger.Debug("a session is owned by another live member; activating it again when that member's lease ends, or sooner",
			"session", s.id, "holder", held.Lease.Owner, "epoch", held.Lease.Epoch, "until", held.Lease.Expires, "retry", until)
		s.heldUntil = until
		s.rt.activateAt(s.agent, s.id, until)
		return fmt.Errorf("%w: %v", ErrLeaseHeld, err)
	}
	if err != nil {
		return err
	}
	s.lease = lease
	return nil
}

// loseLease stops the session at once, its member's lease lost: its work
// is superseded. The runtime logged why, once for all its sessions.
func (s *sessionActor) loseLease(why error) {
	if s.stopping {
		return
	}
	s.rt.opts.Logger.Debug("a session stops: its member's lease was lost", "session", s.id, "epoch", s.lease.Epoch, "why", why)
	s.lease = persistence.Lease{} // nothing to release: the member's lease is gone
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

// releaseLease gives the session's ownership up as the actor stops (on
// its goroutine, outside the dispatcher's bound: one store write), so that
// the next owner takes it at once.
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
			s.rt.opts.Logger.Warn("could not release a session's ownership; another member takes it once this member's lease lapses", "session", s.id, "epoch", lease.Epoch, "err", err)
		}
	})
}

// activateAt activates the session again at t (when the lease of the
// member that holds it ends), if the runtime still places it then.
func (r *Runtime) activateAt(agent *Agent, session string, t time.Time) {
	time.AfterFunc(time.Until(t)+10*time.Millisecond, func() { _, _ = r.pid(agent, session) })
}
