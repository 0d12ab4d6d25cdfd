package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/a2-runtime/a2/persistence"
)

// The simulated schedules' members (simulate_test.go): the session's
// runtime is a member with a lease (LeaseOptions), and the schedule moves
// the session to another member at random moments, as a cluster does when
// gossip declares the owner dead: the owner's member lease is ended, a new
// runtime takes the session at its next request (a higher ownership
// epoch), and the old one is not told: like a member that was only frozen,
// it goes on with what it had in flight (writes held, a step streaming,
// tools running), and the store must refuse each of its appends. The check
// holds the log to it: the epochs of the appends the store took never go
// down.

// leasedStore is the schedule's held store with the leases of the store
// under it.
type leasedStore struct {
	*heldStore
	l persistence.Leaser
}

func (s leasedStore) RenewMember(ctx context.Context, member string, ttl time.Duration) error {
	return s.l.RenewMember(ctx, member, ttl)
}

func (s leasedStore) ReleaseMember(ctx context.Context, member string) error {
	return s.l.ReleaseMember(ctx, member)
}

func (s leasedStore) AcquireLease(ctx context.Context, session, owner string) (persistence.Lease, error) {
	return s.l.AcquireLease(ctx, session, owner)
}

func (s leasedStore) ReleaseLease(ctx context.Context, session, owner string, epoch uint64) error {
	return s.l.ReleaseLease(ctx, session, owner, epoch)
}

func (s leasedStore) ReadLease(ctx context.Context, session string) (persistence.Lease, bool, error) {
	return s.l.ReadLease(ctx, session)
}

// member opens a runtime on the schedule's store as a new member, with a
// lease that does not lapse during the schedule.
func (sm *simulation) member() *Runtime {
	tr := sm.tr
	sm.members++
	l, ok := tr.f.store.Store.(persistence.Leaser)
	if !ok {
		tr.t.Fatal("the schedule's store keeps no leases")
	}
	sm.owner = fmt.Sprintf("m%d", sm.members)
	rt, err := New(leasedStore{heldStore: tr.store, l: l}, []*Agent{tr.f.agent}, Options{SkipRecovery: true, LookupPushesFor: 1 << 62,
		Lease: LeaseOptions{Owner: sm.owner, TTL: time.Hour}})
	if err != nil {
		tr.t.Fatal(err)
	}
	rt.clock = tr.clock
	return rt
}

// move ends the owner's member lease and hands the session's next request
// to a new member; the old one goes on, fenced.
func (sm *simulation) move() {
	tr := sm.tr
	l := tr.f.store.Store.(persistence.Leaser)
	if err := l.ReleaseMember(context.Background(), sm.owner); err != nil {
		tr.t.Fatal(err)
	}
	sm.logf("move from %s", sm.owner)
	sm.fenced = append(sm.fenced, tr.f.rt)
	tr.f.rt = sm.member()
	tr.stream, sm.textOpen, sm.finished = nil, false, false
}

// closeFenced closes the runtimes of members the session moved from (the
// writes they wait for fail, as after a crash).
func (sm *simulation) closeFenced() {
	for _, rt := range sm.fenced {
		closed := make(chan struct{})
		go func() { rt.Close(); close(closed) }()
		for done := false; !done; {
			sm.loseHeld()
			select {
			case <-closed:
				done = true
			case <-time.After(time.Millisecond):
			}
		}
	}
	sm.fenced = nil
}

// epochsRise checks that the epochs of the appends the store took never
// went down: no write of a fenced owner landed after its successor's.
func (sm *simulation) epochsRise() error {
	h := sm.tr.store
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := 1; i < len(h.appended); i++ {
		if a, b := h.appended[i-1], h.appended[i]; b.epoch < a.epoch {
			return fmt.Errorf("the append at %d has epoch %d, after one at %d with epoch %d: a fenced owner wrote", b.first, b.epoch, a.first, a.epoch)
		}
	}
	return nil
}

// loseHeld loses every held write (never durable, its caller answered
// with ErrClosed).
func (sm *simulation) loseHeld() {
	h := sm.tr.store
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, w := range held {
		w.done(nil, fmt.Errorf("%w: the node crashed", persistence.ErrClosed))
	}
}
