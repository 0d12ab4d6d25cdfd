package cluster

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/a2-runtime/a2/cluster/gossip"
)

// Partitions: a member cut off from a majority of the members it knew
// steps down.
//
// A member that gossip calls dead but that still reaches the store keeps
// renewing its lease, and so keeps its sessions from the members that
// cannot reach it: the issue-43 partition. So every member counts the
// members it last knew and steps down (actors.Runtime.StepDown: it stops
// renewing, gives its lease up so that the others take its sessions at
// once, stops every session as superseded, activates none, and gossips the
// status "down") when it sees no strict majority of them; it steps up
// when it sees one again.
//
// The members it last knew (decideQuorum):
//   - every member (role member, not a gateway) it sees alive, itself
//     included, whatever its status but leaving;
//   - a member that left gracefully (status leaving, or a gossip leave) is
//     forgotten at once;
//   - a member gossip declared dead is still counted, so that a member cut
//     off from the others counts them as it notices them fail one by one,
//     until it has been dead for Config.ForgetFailed (10 s) while this
//     member serves: then it is forgotten, so that a cluster that truly
//     lost a member goes on with the others and can lose another later. A
//     member that stepped down forgets no one: it waits until it sees a
//     majority of the members it knew again (a heal, or members restarted
//     at their addresses). A dead member whose address an alive member has
//     now (the process there started again, with a new ID) is forgotten
//     at once.
//
// With one or two members counted a member never steps down: a majority of
// two is both, so either member would step down whenever the other failed,
// and a cluster of two would stop with the first crash. The store's epoch
// fencing keeps a split of two safe (each side's writes are fenced); it
// costs availability only, as without this rule: the sessions of a member
// cut off from the other (but not from the store) wait for it, or for its
// lease to lapse. Run three members or more to ride out a partition.
//
// Quorum must be lost for Config.StepDownGrace (100 ms) before the member
// steps down, so that a member gossip declares dead and that refutes it at
// once (a flap) does not stop every session; it steps up at once.

// knownMember is a member counted by decideQuorum.
type knownMember struct {
	ID string
	// Addr is its remote address (Meta.Address()).
	Addr  string
	Alive bool
	// FailedAt is when gossip declared it dead (when not Alive).
	FailedAt time.Time
}

// quorumDecision is decideQuorum's answer.
type quorumDecision struct {
	// Quorum: the member may serve (a strict majority of the members
	// counted is alive, or at most two are counted).
	Quorum bool
	// Alive counts the members seen alive (itself included); Counted, the
	// members counted (alive, and dead ones not forgotten).
	Alive, Counted int
	// Missing are the dead members still counted; Forget, those to forget
	// now; both sorted.
	Missing, Forget []string
}

// decideQuorum decides whether a member that knows known (itself among the
// alive ones) may serve, and which dead members it forgets now. down says
// whether it stepped down: a member that stepped down forgets no dead
// member by age. It is a pure function of its arguments.
func decideQuorum(known []knownMember, down bool, now time.Time, forgetAfter time.Duration) quorumDecision {
	var d quorumDecision
	aliveAt := map[string]bool{}
	for _, k := range known {
		if k.Alive {
			aliveAt[k.Addr] = true
		}
	}
	for _, k := range known {
		switch {
		case k.Alive:
			d.Alive++
		case aliveAt[k.Addr]: // started again at its address
			d.Forget = append(d.Forget, k.ID)
			continue
		case !down && now.Sub(k.FailedAt) >= forgetAfter:
			d.Forget = append(d.Forget, k.ID)
			continue
		default:
			d.Missing = append(d.Missing, k.ID)
		}
		d.Counted++
	}
	slices.Sort(d.Missing)
	slices.Sort(d.Forget)
	d.Quorum = d.Counted <= 2 || 2*d.Alive > d.Counted
	return d
}

// describe says what the member sees, for its log and GET /v1/cluster.
func (d quorumDecision) describe() string {
	s := fmt.Sprintf("sees %d of the %d members it knows", d.Alive, d.Counted)
	if len(d.Missing) > 0 {
		s += " (" + strings.Join(d.Missing, ", ") + " declared dead)"
	}
	return s
}

// Defaults of the quorum's bounds (Config).
const (
	defaultForgetFailed  = 10 * time.Second
	defaultStepDownGrace = 100 * time.Millisecond
	// quorumTick is how often a member checks its quorum besides each
	// change of the members (the grace and the forgetting are by time).
	quorumTick = 100 * time.Millisecond
)

// QuorumStatus is a member's count of the members it knows, in GET
// /v1/cluster.
type QuorumStatus struct {
	// SteppedDown: the member lost sight of a majority of the members it
	// knew and stepped down; it serves no session until it steps up.
	SteppedDown bool `json:"steppedDown"`
	// Reason is why it stepped down.
	Reason string `json:"reason,omitempty"`
	// Since is when it stepped down.
	Since time.Time `json:"since,omitzero"`
	// Visible counts the members it sees alive, itself included; Known,
	// the members it counts (Missing are those declared dead but still
	// counted).
	Visible int      `json:"visible"`
	Known   int      `json:"known"`
	Missing []string `json:"missing,omitempty"`
}

// quorum is a member's record of the members it knows.
type quorum struct {
	mu     sync.Mutex
	known  map[string]knownMember
	down   bool
	reason string
	since  time.Time
	// lostAt is when quorum was first seen lost (zero while it holds).
	lostAt time.Time
	last   quorumDecision
	kick   chan struct{}
}

// observe records the members of a new membership: the alive ones, and
// those declared dead (the others are forgotten: they left).
func (q *quorum) observe(alive []gossip.Meta, failed []gossip.Failure) {
	failedAt := make(map[string]time.Time, len(failed))
	for _, f := range failed {
		failedAt[f.Meta.ID] = f.At
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	seen := map[string]bool{}
	for _, m := range alive {
		if m.Role != RoleMember {
			continue
		}
		seen[m.ID] = true
		if m.Status == gossip.StatusLeaving {
			delete(q.known, m.ID)
			continue
		}
		q.known[m.ID] = knownMember{ID: m.ID, Addr: m.Address(), Alive: true}
	}
	for id, k := range q.known {
		if seen[id] {
			continue
		}
		at, dead := failedAt[id]
		switch {
		case !dead:
			delete(q.known, id) // it left
		case k.Alive:
			k.Alive, k.FailedAt = false, at
			q.known[id] = k
		}
	}
}

// status is the quorum's part of Status.
func (q *quorum) status() *QuorumStatus {
	q.mu.Lock()
	defer q.mu.Unlock()
	return &QuorumStatus{SteppedDown: q.down, Reason: q.reason, Since: q.since, Visible: q.last.Alive,
		Known: q.last.Counted, Missing: slices.Clone(q.last.Missing)}
}

// askQuorum asks the quorum loop for a check.
func (n *Node) askQuorum() {
	select {
	case n.quorum.kick <- struct{}{}:
	default:
	}
}

// quorumLoop checks the member's quorum after each change of the members
// and every quorumTick, until the node stops or leaves.
func (n *Node) quorumLoop() {
	t := time.NewTicker(quorumTick)
	defer t.Stop()
	for {
		select {
		case <-n.stopped:
			return
		case <-t.C:
		case <-n.quorum.kick:
		}
		if n.leaving.Load() {
			return
		}
		n.checkQuorum(time.Now())
	}
}

// checkQuorum decides, forgets the members to forget, and steps down or
// up.
func (n *Node) checkQuorum(now time.Time) {
	q := &n.quorum
	q.mu.Lock()
	known := make([]knownMember, 0, len(q.known))
	for _, k := range q.known {
		known = append(known, k)
	}
	d := decideQuorum(known, q.down, now, n.cfg.ForgetFailed)
	for _, id := range d.Forget {
		delete(q.known, id)
	}
	q.last = d
	var stepDown, stepUp bool
	if d.Quorum {
		q.lostAt = time.Time{}
		stepUp = q.down
	} else if !q.down {
		if q.lostAt.IsZero() {
			q.lostAt = now
		}
		stepDown = now.Sub(q.lostAt) >= n.cfg.StepDownGrace
	}
	q.mu.Unlock()
	if len(d.Forget) > 0 {
		n.cfg.Logger.Info("forgot members declared dead: they no longer count towards this member's majority",
			"members", d.Forget, "deadFor", "at least "+n.cfg.ForgetFailed.String(), "sees", d.Alive, "of", d.Counted)
	}
	switch {
	case stepDown:
		n.stepDown(d, now)
	case stepUp:
		n.stepUp(d)
	}
}

// stepDown stops serving: no session is placed here, the runtime steps
// down (its sessions stop, its lease is given up), and the gossip says
// "down".
func (n *Node) stepDown(d quorumDecision, now time.Time) {
	reason := "lost sight of a majority of the members it knew: it " + d.describe()
	q := &n.quorum
	q.mu.Lock()
	q.down, q.reason, q.since = true, reason, now
	q.mu.Unlock()
	n.down.Store(true)
	n.cfg.Logger.Warn("this member lost sight of a majority of the members it knew: it steps down, and serves no session until it sees a majority again",
		"sees", d.Alive, "of", d.Counted, "missing", d.Missing)
	began := time.Now()
	n.rt.StepDown(reason)
	if err := n.provider.SetStatus(gossip.StatusDown); err != nil {
		n.cfg.Logger.Warn("could not announce the step-down", "err", err)
	}
	n.onNodes(n.provider.Nodes()) // its own grains go at once
	n.cfg.Logger.Info("stepped down", "took", time.Since(began).Round(time.Millisecond))
}

// stepUp serves again: the runtime renews its lease, and the gossip says
// "up" (the other members then release the sessions the hash places here).
func (n *Node) stepUp(d quorumDecision) {
	q := &n.quorum
	q.mu.Lock()
	since := q.since
	q.mu.Unlock()
	if err := n.rt.StepUp(); err != nil {
		n.cfg.Logger.Warn("stepping up: the lease was not renewed yet; sessions are served once it is", "err", err)
	}
	q.mu.Lock()
	q.down, q.reason, q.since = false, "", time.Time{}
	q.mu.Unlock()
	n.down.Store(false)
	if !n.leaving.Load() {
		if err := n.provider.SetStatus(gossip.StatusUp); err != nil {
			n.cfg.Logger.Warn("could not announce the step-up", "err", err)
		}
	}
	n.onNodes(n.provider.Nodes())
	n.cfg.Logger.Info("this member sees a majority of the members it knows again: it steps up and serves sessions",
		"sees", d.Alive, "of", d.Counted, "downFor", time.Since(since).Round(time.Millisecond))
}
