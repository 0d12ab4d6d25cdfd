package gossip

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Reaching the other side of a healed partition again.
//
// memberlist never probes a node it declared dead again: it gossips to it
// for 30 s more (GossipToTheDeadTime), then forgets it. So when a
// partition heals after that, its two sides stay apart for ever, each
// sure the other is dead. Like Serf's reconnect, the provider keeps trying
// to join the gossip address of every node that was declared dead (not one
// that left), and every seed of Config.Join that no alive node answers at,
// with a backoff from RejoinFirst doubling up to RejoinMax, until a node
// answers there alive. A join that reaches the other side merges both
// sides' states (memberlist's push/pull): each learns that the other
// declared it dead and refutes it, and the two become one membership
// again, in one or two attempts (an attempt that reached a node is
// followed by the next after RejoinFirst, not the backoff).

// Failure is a node that gossip declared dead: it stopped answering, but
// did not leave. It may have crashed, or it may be alive on the other side
// of a partition.
type Failure struct {
	// Meta is the node's last metadata.
	Meta Meta
	// Addr is its gossip address (host:port), which the provider tries to
	// join again.
	Addr string
	// At is when it was declared dead.
	At time.Time
}

// rejoinState is the attempts at one address.
type rejoinState struct {
	why      string
	since    time.Time
	backoff  time.Duration
	next     time.Time
	busy     bool // an attempt is under way
	attempts int
	reached  int // attempts that reached a node
}

// Failed returns the nodes gossip declared dead that are not alive again,
// sorted by ID: not those whose gossip address an alive node has now (the
// process there started again, with a new ID: the old one is gone), nor
// those dead for longer than ReconnectTimeout. The slice is the caller's.
func (p *Provider) Failed() []Failure {
	_, failed := p.Membership()
	return failed
}

// Membership returns Nodes and Failed as of one moment.
func (p *Provider) Membership() (alive []Meta, failed []Failure) {
	p.nodesMu.Lock()
	addrs := make(map[string]bool, len(p.gossipAddrs))
	for _, a := range p.gossipAddrs {
		addrs[a] = true
	}
	alive = make([]Meta, 0, len(p.nodes))
	for _, m := range p.nodes {
		alive = append(alive, cloneMeta(m))
	}
	failed = make([]Failure, 0, len(p.failed))
	for _, f := range p.failed {
		if !addrs[f.Addr] && time.Since(f.At) <= p.cfg.ReconnectTimeout {
			f.Meta = cloneMeta(f.Meta)
			failed = append(failed, f)
		}
	}
	p.nodesMu.Unlock()
	slices.SortFunc(alive, func(a, b Meta) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(failed, func(a, b Failure) int { return strings.Compare(a.Meta.ID, b.Meta.ID) })
	return alive, failed
}

// resolveSeeds keeps cfg.Join as gossip addresses (host:port with an IP,
// as memberlist reports nodes' addresses), without our own; a seed that
// does not resolve now is kept as given (Join resolves it again).
func (p *Provider) resolveSeeds(ctx context.Context, ml *memberlist.Memberlist) {
	self := ml.LocalNode().Address()
	var seeds []string
	for _, s := range p.cfg.Join {
		if ip, port, err := resolveHostPort(ctx, s, ""); err == nil {
			s = net.JoinHostPort(ip, strconv.Itoa(port))
		}
		if s != self && !slices.Contains(seeds, s) {
			seeds = append(seeds, s)
		}
	}
	p.rejoinMu.Lock()
	p.seeds = seeds
	p.rejoinMu.Unlock()
}

// rejoin starts the attempts that are due (the run loop calls it every
// rejoinTick): at the address of each node declared dead, and at each
// seed, unless an alive node has that address.
func (p *Provider) rejoin(stop <-chan struct{}) {
	p.mu.Lock()
	ml, closed := p.ml, p.closed
	p.mu.Unlock()
	if ml == nil || closed {
		return
	}
	now := time.Now()
	want := map[string]string{} // address: why
	p.nodesMu.Lock()
	alive := make(map[string]bool, len(p.gossipAddrs))
	for _, a := range p.gossipAddrs {
		alive[a] = true
	}
	for id, f := range p.failed {
		if now.Sub(f.At) > p.cfg.ReconnectTimeout {
			delete(p.failed, id)
			p.log.Info("gossip: gave up reaching a dead node again", "node", id, "address", f.Addr, "after", p.cfg.ReconnectTimeout)
			continue
		}
		if !alive[f.Addr] {
			want[f.Addr] = "the address of node " + id + ", declared dead"
		}
	}
	p.nodesMu.Unlock()

	p.rejoinMu.Lock()
	defer p.rejoinMu.Unlock()
	for _, s := range p.seeds {
		if _, ok := want[s]; !ok && !alive[s] {
			want[s] = "a seed (--join) no alive node answers at"
		}
	}
	for addr, st := range p.rejoins {
		if _, ok := want[addr]; ok || st.busy {
			continue
		}
		delete(p.rejoins, addr)
		if st.attempts > 0 && alive[addr] {
			p.log.Info("gossip: a node answers again at an address it was tried at", "address", addr, "attempts", st.attempts,
				"after", now.Sub(st.since).Round(time.Millisecond))
		}
	}
	for addr, why := range want {
		st := p.rejoins[addr]
		if st == nil {
			p.rejoins[addr] = &rejoinState{why: why, since: now, backoff: p.cfg.RejoinFirst, next: now.Add(p.cfg.RejoinFirst)}
			continue
		}
		if st.busy || now.Before(st.next) {
			continue
		}
		select {
		case <-stop:
			return
		default:
		}
		st.busy = true
		st.attempts++
		go p.rejoinOnce(ml, addr, st)
	}
}

// rejoinOnce makes one attempt at addr (memberlist's Join: a push/pull of
// both sides' states) and schedules the next.
func (p *Provider) rejoinOnce(ml *memberlist.Memberlist, addr string, st *rejoinState) {
	n, err := ml.Join([]string{addr})
	p.rejoinMu.Lock()
	defer p.rejoinMu.Unlock()
	st.busy = false
	if err == nil && n > 0 {
		// It merged; the node there may need one more round to be seen
		// alive (its refutation of our dead record).
		st.reached++
		st.backoff = p.cfg.RejoinFirst
		p.log.Debug("gossip: reached an address again", "address", addr, "why", st.why, "attempts", st.attempts)
	} else {
		if st.attempts == 1 {
			p.log.Info("gossip: trying to reach an address again, with backoff, until a node answers there",
				"address", addr, "why", st.why, "backoff", p.cfg.RejoinFirst.String()+" doubling up to "+p.cfg.RejoinMax.String(), "err", err)
		}
		st.backoff = min(2*st.backoff, p.cfg.RejoinMax)
	}
	st.next = time.Now().Add(st.backoff)
}
