// memberlist's callbacks: which nodes are admitted (the cluster's name and
// store), what this node gossips about itself, and what it hears of others.

package gossip

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// refusal is why a node is not accepted.
type refusal struct {
	node, addr string
	reason     string
}

func (r *refusal) Error() string {
	return fmt.Sprintf("%s%q at %s: %s", refusalMarker, r.node, r.addr, r.reason)
}

// check decodes a node's metadata and says whether the node may be a peer.
// It never panics, whatever the node sent; a refusal is logged at Warn once
// per node ID. It must not call into memberlist (it runs under its lock).
func (p *Provider) check(n *memberlist.Node) (Meta, error) {
	var m Meta
	var reason string
	ours := p.cfg.Meta
	store, from := p.clusterStore(n.Name)
	switch err := json.Unmarshal(n.Meta, &m); {
	case len(n.Meta) == 0:
		reason = "it has no metadata"
	case err != nil:
		reason = fmt.Sprintf("its metadata does not decode: %v", err)
	case m.ID != n.Name:
		reason = fmt.Sprintf("its metadata ID %q differs from its node name", m.ID)
	case m.Cluster != ours.Cluster:
		reason = fmt.Sprintf("its cluster name %q differs from ours %q", m.Cluster, ours.Cluster)
	case m.Store != "" && store != "" && m.Store != store && from == "":
		reason = fmt.Sprintf("its store identity %q differs from ours %q", m.Store, store)
	case m.Store != "" && store != "" && m.Store != store:
		reason = fmt.Sprintf("its store identity %q differs from ours %q (the store of node %q; we use none)", m.Store, store, from)
	default:
		return m, nil
	}
	r := &refusal{node: n.Name, addr: n.Address(), reason: reason}
	p.nodesMu.Lock()
	_, logged := p.refusedIDs[n.Name]
	if !logged {
		if len(p.refusedIDs) >= maxRefusalsLogged {
			clear(p.refusedIDs)
		}
		p.refusedIDs[n.Name] = struct{}{}
	}
	p.nodesMu.Unlock()
	if !logged {
		p.log.Warn("gossip: refused a node", "node", n.Name, "address", r.addr, "reason", reason)
	}
	return Meta{}, r
}

// clusterStore returns the store identity a node must match when it names
// one: ours, or, when we use none (a gateway), that of an accepted node other
// than the one being checked (named in from), so that a gateway does not
// bridge two stores; "" when no node uses a store.
func (p *Provider) clusterStore(checked string) (store, from string) {
	if s := p.cfg.Meta.Store; s != "" {
		return s, ""
	}
	p.nodesMu.Lock()
	defer p.nodesMu.Unlock()
	for id, m := range p.nodes {
		if m.Store != "" && id != checked {
			if from == "" || id < from { // deterministic if they ever disagree
				store, from = m.Store, id
			}
		}
	}
	return store, from
}

// delegate serves our metadata to memberlist; it carries no user messages.
type delegate struct{ p *Provider }

func (d delegate) NodeMeta(limit int) []byte {
	d.p.metaMu.Lock()
	defer d.p.metaMu.Unlock()
	if len(d.p.metaBytes) > limit { // never: Start and SetStatus check the size
		return nil
	}
	return slices.Clone(d.p.metaBytes)
}

func (delegate) NotifyMsg([]byte) {}

func (delegate) GetBroadcasts(_, _ int) [][]byte { return nil }

func (delegate) LocalState(bool) []byte { return nil }

func (delegate) MergeRemoteState(_ []byte, _ bool) {}

// events keeps p.nodes as memberlist reports joins, updates and leaves
// (serially, under memberlist's node lock).
type events struct{ p *Provider }

func (e events) NotifyJoin(n *memberlist.Node) { e.p.upsert(n) }

func (e events) NotifyUpdate(n *memberlist.Node) { e.p.upsert(n) }

func (e events) NotifyLeave(n *memberlist.Node) {
	p := e.p
	p.nodesMu.Lock()
	m, known := p.nodes[n.Name]
	delete(p.nodes, n.Name)
	delete(p.gossipAddrs, n.Name)
	// A node that goes while its status says leaving left; any other was
	// declared dead by the failure detector, and may be alive on the other
	// side of a partition (rejoin.go). (memberlist never sets n.State.)
	dead := known && m.Status != StatusLeaving && !p.nodesGone
	if dead {
		p.failed[n.Name] = Failure{Meta: cloneMeta(m), Addr: n.Address(), At: time.Now()}
	} else {
		delete(p.failed, n.Name)
	}
	p.nodesMu.Unlock()
	if dead {
		p.log.Info("gossip: a node was declared dead; trying to reach it again until it answers", "node", n.Name, "address", n.Address())
	}
	p.signal()
}

func (p *Provider) upsert(n *memberlist.Node) {
	m, err := p.check(n)
	p.nodesMu.Lock()
	if p.nodesGone {
		p.nodesMu.Unlock()
		return
	}
	if err != nil { // not expected: the alive delegate filtered it
		delete(p.nodes, n.Name)
		delete(p.gossipAddrs, n.Name)
	} else {
		p.nodes[n.Name] = m
		p.gossipAddrs[n.Name] = n.Address()
		delete(p.failed, n.Name)
	}
	p.nodesMu.Unlock()
	p.signal()
}

// alive refuses, in gossip, any node that check refuses.
type alive struct{ p *Provider }

func (a alive) NotifyAlive(n *memberlist.Node) error {
	_, err := a.p.check(n)
	return err
}

// merge refuses a join (either side of its push/pull) when any node in the
// other side's state is refused, and records the refusal for joinOne.
type merge struct{ p *Provider }

func (g merge) NotifyMerge(peers []*memberlist.Node) error {
	for _, n := range peers {
		if n == nil || n.Name == g.p.cfg.Meta.ID {
			continue
		}
		if _, err := g.p.check(n); err != nil {
			g.p.nodesMu.Lock()
			if len(g.p.joinRefusals) < 16 {
				g.p.joinRefusals = append(g.p.joinRefusals, err)
			}
			g.p.nodesMu.Unlock()
			return err
		}
	}
	return nil
}

// memberlistLog turns memberlist's log lines into slog records.
type memberlistLog struct{ l *slog.Logger }

func (w memberlistLog) Write(b []byte) (int, error) {
	line := strings.TrimRight(string(b), "\r\n")
	level := slog.LevelDebug
	if strings.HasPrefix(line, "[WARN]") || strings.HasPrefix(line, "[ERR]") {
		level = slog.LevelWarn
	}
	if strings.Contains(line, refusalMarker) {
		level = slog.LevelDebug // check logged it once already
	}
	if !w.l.Enabled(context.Background(), level) {
		return len(b), nil
	}
	if i := strings.IndexByte(line, ']'); strings.HasPrefix(line, "[") && i > 0 {
		line = strings.TrimSpace(line[i+1:])
	}
	if keyRefusal(line) {
		// A sender without the cluster's key (Config.Keys), or with
		// another: say so in our words, with memberlist's line beside.
		w.l.Warn("gossip: refused a message that no cluster key opens (a node without the cluster key, or with another, or a stranger)",
			"component", "memberlist", "detail", line)
		return len(b), nil
	}
	w.l.Log(context.Background(), level, line, "component", "memberlist")
	return len(b), nil
}

// keyRefusal reports whether a memberlist log line is the refusal of a
// message for its encryption: none of the keys opens it, or it is in
// clear where keys are set, or encrypted where none is.
func keyRefusal(line string) bool {
	l := strings.ToLower(line)
	return strings.Contains(l, "decrypt") || strings.Contains(l, "not encrypted") || strings.Contains(l, "encryption is configured") ||
		strings.Contains(l, "encryption is not configured")
}
