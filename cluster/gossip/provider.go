// Package gossip is A2's protoactor-go cluster provider over
// hashicorp/memberlist: the nodes of one cluster find each other by gossip
// (SWIM), each node's protoactor address, grain kinds and status travel in
// its memberlist metadata, and the set of alive nodes is published to
// protoactor's MemberList as the cluster topology.
//
// A node is only ever accepted into the membership when its metadata
// decodes and names the same cluster, and the same store when both sides
// use one: nodes of another cluster or another store are refused at join
// (MergeDelegate) and whenever gossip mentions them (AliveDelegate).
//
// Order of use: New, Start (which joins, with retries), then protoactor's
// cluster StartMember or StartClient (which calls the provider's StartMember
// or StartClient), SetStatus(StatusUp) once the node serves, and Shutdown.
package gossip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/hashicorp/memberlist"
)

// Member statuses, as gossiped in Meta.Status.
const (
	// StatusStarting is a node that is up in the gossip but does not serve
	// yet: its grain kinds are not published to protoactor.
	StatusStarting = "starting"
	// StatusUp is a node that serves: its grain kinds are published.
	StatusUp = "up"
	// StatusLeaving is a node that started a graceful leave: it stays in
	// the topology, reachable, and is published without kinds (but
	// protoactor keeps the kinds it learned when the member first appeared:
	// it only notices changes of member IDs, so it may still place grains
	// there until the node is gone).
	StatusLeaving = "leaving"
	// StatusDown is a member that stepped down (it lost sight of a
	// majority of the members it knew): it stays in the membership and is
	// published to protoactor without kinds, like a leaving one, but hosts
	// no sessions until it is up again.
	StatusDown = "down"
)

// Defaults for the zero values of Config. The failure-detection ones detect
// a killed process on loopback in about 1 s (memberlist's LAN defaults take
// about 4 s).
const (
	defaultBind           = "0.0.0.0:7946"
	defaultProbeInterval  = 250 * time.Millisecond
	defaultProbeTimeout   = 100 * time.Millisecond
	defaultGossipInterval = 50 * time.Millisecond
	defaultSuspicionMult  = 2
	defaultJoinTimeout    = 30 * time.Second

	joinBackoffFirst = 100 * time.Millisecond
	joinBackoffMax   = 2 * time.Second
	joinAttemptGrace = 500 * time.Millisecond
	resyncInterval   = time.Second
	leaveTimeout     = time.Second
	updateTimeout    = time.Second

	defaultRejoinFirst      = 250 * time.Millisecond
	defaultRejoinMax        = 5 * time.Second
	defaultReconnectTimeout = 24 * time.Hour
	// rejoinTick is how often the rejoin loop looks for attempts due.
	rejoinTick = 50 * time.Millisecond

	// maxRefusalsLogged bounds the set of node IDs whose refusal was logged.
	maxRefusalsLogged = 4096
	// refusalMarker starts every refusal reason, so that memberlist's own
	// log lines that repeat one of ours can be recognized.
	refusalMarker = "gossip: refused node "
)

// Config configures a Provider. Zero values take the defaults noted.
type Config struct {
	// Bind is the host:port gossip listens on, TCP and UDP ("" =
	// 0.0.0.0:7946); port 0 picks a free port. The host must be an IP
	// address or a name that resolves to one.
	Bind string
	// Advertise is the host:port other nodes reach us at; "" = Bind (after
	// a port-0 bind, the port chosen; with Bind on 0.0.0.0, memberlist picks
	// a private address of this machine). A port of 0 also means the bound
	// port; a non-zero port needs a non-zero Bind port.
	Advertise string
	// Join lists host:port gossip addresses of existing nodes; empty starts
	// a new cluster.
	Join []string
	// Meta is our initial metadata (Status typically StatusStarting).
	// Meta.ID and Meta.Cluster are required.
	Meta Meta
	// ProbeInterval, ProbeTimeout, GossipInterval and SuspicionMult tune
	// memberlist's failure detection; 0 = 250 ms, 100 ms, 50 ms and 2.
	ProbeInterval, ProbeTimeout, GossipInterval time.Duration
	SuspicionMult                               int
	// JoinTimeout is how long Start keeps retrying a join that no node
	// answers (0 = 30 s), with a backoff from 100 ms doubling up to 2 s; the
	// attempt made at the deadline gets up to 0.5 s to finish.
	JoinTimeout time.Duration
	// Logger receives the provider's log lines (nil = discard). Memberlist's
	// own lines go to it at Debug level, its [WARN] and [ERR] lines at Warn
	// (except those that only repeat a refusal, which the provider logs
	// itself, once per node ID, at Warn).
	Logger *slog.Logger
	// RejoinFirst and RejoinMax bound the backoff of the attempts to reach
	// again a node gossip declared dead, and the seeds of Join that no
	// alive node answers at (0 = 250 ms doubling up to 5 s): memberlist
	// never probes a dead node again, so without these two sides of a
	// healed partition would stay apart. ReconnectTimeout is how long a
	// dead node's address is tried (0 = 24 h); seeds are tried for as
	// long as the provider runs.
	RejoinFirst, RejoinMax, ReconnectTimeout time.Duration
	// Keys, if any, encrypt and authenticate every gossip message
	// (memberlist's keyring: AES-GCM with a key of 16, 24 or 32 bytes).
	// The first key encrypts what this node sends; every key is tried on
	// what it receives, so that a new key can be rolled out before it is
	// used (docs/security.md, "Rotating the cluster key"). A message no key
	// opens, or one in clear, is refused and logged. Empty: gossip in
	// clear, which only a cluster on one machine's loopback should run.
	Keys [][]byte
	// OnChange, if set, is called with every accepted alive node (self
	// included, sorted by ID) whenever that set or any node's metadata
	// changed: it is checked after each join, leave, update or failure
	// memberlist reports and on a resync timer every second. Calls are
	// serial, never concurrent with each other, and start once Start has
	// succeeded. OnChange may call Nodes and SetStatus, but not Shutdown
	// (which waits for a running OnChange to return).
	OnChange func(nodes []Meta)
}

// Provider is a protoactor-go cluster.ClusterProvider over hashicorp
// memberlist. Create it with New; its methods are safe for concurrent use.
type Provider struct {
	cfg Config // defaults applied; cfg.Meta is our initial metadata
	log *slog.Logger

	// mu guards the lifecycle fields. It is never held while calling into
	// memberlist or protoactor.
	mu          sync.Mutex
	starting    bool // Start was called
	started     bool // Start succeeded
	closed      bool // Shutdown was called
	ml          *memberlist.Memberlist
	localAddr   string
	startCancel context.CancelFunc
	stop, done  chan struct{} // the delivery goroutine's
	cluster     *cluster.Cluster

	// metaMu guards our current metadata, read by memberlist (NodeMeta).
	metaMu    sync.Mutex
	meta      Meta
	metaBytes []byte

	// statusMu serializes SetStatus.
	statusMu sync.Mutex

	// nodesMu guards the accepted alive nodes as memberlist reported them
	// (its event delegate runs under memberlist's node lock, so nothing
	// holding nodesMu may call into memberlist), and the refusal records.
	nodesMu      sync.Mutex
	nodes        map[string]Meta
	gossipAddrs  map[string]string   // gossip address of each node in nodes, by ID
	failed       map[string]Failure  // nodes gossip declared dead (not left), by ID
	nodesGone    bool                // after Shutdown or a failed Start: no membership
	refusedIDs   map[string]struct{} // node IDs whose refusal was logged
	joinRefusals []error             // refusals seen by NotifyMerge since the last reset

	kick chan struct{} // a memberlist event happened (capacity 1)

	// deliverMu serializes deliveries (OnChange and topology publishing).
	deliverMu     sync.Mutex
	deliverClosed bool
	last          []Meta // what OnChange was last given
	delivered     bool   // OnChange was called at least once

	// rejoinMu guards the rejoin attempts (rejoin.go).
	rejoinMu sync.Mutex
	seeds    []string                // cfg.Join, resolved at Start
	rejoins  map[string]*rejoinState // by gossip address
}

// New returns a Provider for cfg; it does nothing on the network until
// Start.
func New(cfg Config) *Provider {
	if cfg.Bind == "" {
		cfg.Bind = defaultBind
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = defaultProbeInterval
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = defaultProbeTimeout
	}
	if cfg.GossipInterval <= 0 {
		cfg.GossipInterval = defaultGossipInterval
	}
	if cfg.SuspicionMult <= 0 {
		cfg.SuspicionMult = defaultSuspicionMult
	}
	if cfg.JoinTimeout <= 0 {
		cfg.JoinTimeout = defaultJoinTimeout
	}
	if cfg.RejoinFirst <= 0 {
		cfg.RejoinFirst = defaultRejoinFirst
	}
	if cfg.RejoinMax < cfg.RejoinFirst {
		cfg.RejoinMax = max(defaultRejoinMax, cfg.RejoinFirst)
	}
	if cfg.ReconnectTimeout <= 0 {
		cfg.ReconnectTimeout = defaultReconnectTimeout
	}
	cfg.Join = slices.Clone(cfg.Join)
	cfg.Meta.Kinds = slices.Clone(cfg.Meta.Kinds)
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Provider{
		cfg:         cfg,
		log:         logger,
		meta:        cloneMeta(cfg.Meta),
		nodes:       make(map[string]Meta),
		gossipAddrs: make(map[string]string),
		failed:      make(map[string]Failure),
		refusedIDs:  make(map[string]struct{}),
		kick:        make(chan struct{}, 1),
		rejoins:     make(map[string]*rejoinState),
	}
}

// Start creates the memberlist (bound to cfg.Bind) and joins cfg.Join,
// retrying with backoff while no node answers, until cfg.JoinTimeout passes
// or ctx ends (ctx bounds only the joining, not the membership). A refusal is
// final and returned at once: a node whose Meta.Cluster differs from ours, or
// whose Meta.Store differs from ours when both are non-empty (a node without
// a store, a gateway, takes as ours the store of the nodes it accepted, so it
// never bridges two stores); the error names the address, the other side's
// value and ours. Start also fails when the
// configuration is invalid or the metadata does not fit in 512 bytes. On
// error nothing is left running. Start may be called once; call it before
// protoactor's StartMember or StartClient.
func (p *Provider) Start(ctx context.Context) error {
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return errors.New("gossip: Start after Shutdown")
	case p.starting:
		p.mu.Unlock()
		return errors.New("gossip: Start already called")
	}
	p.starting = true
	ctx, cancel := context.WithCancel(ctx)
	p.startCancel = cancel
	p.mu.Unlock()
	defer cancel()

	ml, sent, err := p.start(ctx)

	p.mu.Lock()
	p.startCancel = nil
	if err == nil && p.closed {
		err = errors.New("gossip: Shutdown during Start")
	}
	if err != nil {
		p.localAddr = ""
		p.mu.Unlock()
		if ml != nil {
			if ml.NumMembers() > 1 { // joined some node before failing: tell them
				_ = ml.Leave(leaveTimeout)
			}
			_ = ml.Shutdown()
		}
		p.forgetNodes()
		return err
	}
	p.ml = ml
	p.started = true
	p.stop = make(chan struct{})
	p.done = make(chan struct{})
	go p.run(p.stop, p.done)
	p.mu.Unlock()

	// A SetStatus during Start changed the metadata without gossiping it.
	p.statusMu.Lock()
	defer p.statusMu.Unlock()
	p.metaMu.Lock()
	changed := !bytes.Equal(p.metaBytes, sent)
	p.metaMu.Unlock()
	if changed {
		if err := ml.UpdateNode(updateTimeout); err != nil {
			p.log.Debug("gossip: status update not yet broadcast", "error", err)
		}
	}
	return nil
}

// start does Start's work; it returns the memberlist it created even on an
// error after creating it, for the caller to shut it down, and the metadata
// it encoded before creating it.
func (p *Provider) start(ctx context.Context) (*memberlist.Memberlist, []byte, error) {
	cfg := p.cfg
	if cfg.Meta.ID == "" {
		return nil, nil, errors.New("gossip: Config.Meta.ID is empty")
	}
	if cfg.Meta.Cluster == "" {
		return nil, nil, errors.New("gossip: Config.Meta.Cluster is empty")
	}
	p.metaMu.Lock()
	sent, err := encodeMeta(p.meta)
	if err == nil {
		p.metaBytes = sent
	}
	p.metaMu.Unlock()
	if err != nil {
		return nil, nil, err
	}

	bindIP, bindPort, err := resolveHostPort(ctx, cfg.Bind, "0.0.0.0")
	if err != nil {
		return nil, nil, fmt.Errorf("gossip: Bind %q: %w", cfg.Bind, err)
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Meta.ID
	mc.BindAddr = bindIP
	mc.BindPort = bindPort
	mc.AdvertisePort = bindPort
	if cfg.Advertise != "" {
		advIP, advPort, err := resolveHostPort(ctx, cfg.Advertise, "")
		if err != nil {
			return nil, nil, fmt.Errorf("gossip: Advertise %q: %w", cfg.Advertise, err)
		}
		if advPort != 0 && bindPort == 0 {
			return nil, nil, fmt.Errorf("gossip: Advertise %q names a port but Bind %q picks one (port 0): give Bind a port, or Advertise port 0", cfg.Advertise, cfg.Bind)
		}
		mc.AdvertiseAddr = advIP
		if advPort != 0 {
			mc.AdvertisePort = advPort
		}
	}
	mc.ProbeInterval = cfg.ProbeInterval
	mc.ProbeTimeout = cfg.ProbeTimeout
	mc.GossipInterval = cfg.GossipInterval
	mc.SuspicionMult = cfg.SuspicionMult
	// Lifeguard's self-awareness slows the probes of a node that gets no
	// acks (up to 8 times, 2 s between probes here): exactly the node cut
	// off from the others, which must notice them all fail quickly to
	// step down (docs/cluster.md, "Partitions"). Its suspicion of others
	// still needs no acks for SuspicionMult probe intervals, and the
	// suspected node refutes it by gossip.
	mc.AwarenessMaxMultiplier = 1
	// Gossip messages are small and go over a LAN: LZW compressing each
	// cost a gateway more allocation than its SSE encoding under load. A
	// member decodes a compressed message whatever its own setting, so
	// nodes of either setting mix.
	mc.EnableCompression = false
	if len(cfg.Keys) > 0 {
		kr, err := memberlist.NewKeyring(cfg.Keys, cfg.Keys[0])
		if err != nil {
			return nil, nil, fmt.Errorf("gossip: the cluster key: %w", err)
		}
		mc.Keyring = kr
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	mc.Delegate = delegate{p}
	mc.Events = events{p}
	mc.Alive = alive{p}
	mc.Merge = merge{p}
	mc.Logger = log.New(memberlistLog{p.log}, "", 0)

	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, nil, fmt.Errorf("gossip: create memberlist on %s: %w", cfg.Bind, err)
	}
	p.mu.Lock()
	p.localAddr = net.JoinHostPort(bindIP, strconv.Itoa(mc.BindPort))
	p.mu.Unlock()
	p.resolveSeeds(ctx, ml)

	return ml, sent, p.joinAll(ctx, ml)
}

// LocalAddr returns the gossip address we bound, host:port (with the port
// chosen after a port-0 Bind); "" before Start bound it or after Start
// failed.
func (p *Provider) LocalAddr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.localAddr
}

// SetStatus changes our Meta.Status and gossips it (memberlist UpdateNode,
// waiting up to 1 s for the broadcast to go out; if it has not, the update
// still spreads and SetStatus returns nil), e.g. StatusUp once the node
// serves, StatusLeaving when it starts a graceful leave. Before Start it
// only sets the status Start will gossip. It returns an error after
// Shutdown, or when the metadata would not fit in 512 bytes (the status is
// then unchanged).
func (p *Provider) SetStatus(status string) error {
	p.statusMu.Lock()
	defer p.statusMu.Unlock()

	p.mu.Lock()
	closed, ml := p.closed, p.ml
	p.mu.Unlock()
	if closed {
		return errors.New("gossip: SetStatus after Shutdown")
	}

	p.metaMu.Lock()
	m := cloneMeta(p.meta)
	m.Status = status
	b, err := encodeMeta(m)
	if err == nil {
		p.meta, p.metaBytes = m, b
	}
	p.metaMu.Unlock()
	if err != nil {
		return err
	}
	if ml == nil {
		return nil
	}
	if err := ml.UpdateNode(updateTimeout); err != nil {
		p.log.Debug("gossip: status update not yet broadcast", "status", status, "error", err)
	}
	return nil
}

// Nodes returns the accepted alive nodes now (self included once Start
// created the memberlist), sorted by ID; none after Shutdown or a failed
// Start. The slice is the caller's.
func (p *Provider) Nodes() []Meta {
	p.nodesMu.Lock()
	out := make([]Meta, 0, len(p.nodes))
	for _, m := range p.nodes {
		out = append(out, cloneMeta(m))
	}
	p.nodesMu.Unlock()
	slices.SortFunc(out, func(a, b Meta) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// StartMember implements cluster.ClusterProvider: it attaches the provider
// to c and publishes the topology to c.MemberList.UpdateClusterTopology,
// then republishes it on every change and every second. The topology is
// every accepted alive node with a remote port (gateways too, so they stay
// reachable) as &cluster.Member{Id, Host, Port, Kinds}, Kinds empty unless
// its Status is StatusUp; a node that has Kinds but is neither up, leaving
// nor down (i.e. starting) is left out until it is up, because protoactor
// never learns a member's kinds after its first appearance. It returns nil
// when Start has succeeded, an error when Start was not called (or failed),
// Shutdown was called, or c has no MemberList.
func (p *Provider) StartMember(c *cluster.Cluster) error {
	return p.attach(c, "StartMember")
}

// StartClient implements cluster.ClusterProvider for a protoactor cluster
// client; it does exactly what StartMember does.
func (p *Provider) StartClient(c *cluster.Cluster) error {
	return p.attach(c, "StartClient")
}

func (p *Provider) attach(c *cluster.Cluster, what string) error {
	if c == nil || c.MemberList == nil {
		return fmt.Errorf("gossip: %s: cluster without a MemberList", what)
	}
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return fmt.Errorf("gossip: %s after Shutdown", what)
	case !p.started:
		p.mu.Unlock()
		return fmt.Errorf("gossip: %s before Start succeeded (call Start first)", what)
	}
	p.cluster = c
	p.mu.Unlock()
	if c.ActorSystem != nil && c.ActorSystem.ID != p.cfg.Meta.ID {
		p.log.Warn("gossip: protoactor's actor-system ID differs from Meta.ID: protoactor will not find itself in the topology",
			"actor_system_id", c.ActorSystem.ID, "meta_id", p.cfg.Meta.ID)
	}
	p.deliver()
	return nil
}

// Shutdown leaves the gossip once: graceful, it broadcasts a leave
// (memberlist Leave, waiting up to 1 s) and then shuts memberlist down; not
// graceful, it only shuts it down (others detect the failure). It also stops
// OnChange and topology publishing, and aborts a Start in progress. Later
// calls return nil; so does a call on a provider never started.
func (p *Provider) Shutdown(graceful bool) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ml, cancel, stop, done := p.ml, p.startCancel, p.stop, p.done
	p.cluster = nil
	p.mu.Unlock()

	if cancel != nil {
		cancel()
	}
	if stop != nil {
		close(stop)
		<-done
	}
	p.deliverMu.Lock()
	p.deliverClosed = true
	p.deliverMu.Unlock()
	p.forgetNodes()
	if ml == nil {
		return nil
	}
	var errs []error
	if graceful {
		p.announceLeaving(ml)
		if err := ml.Leave(leaveTimeout); err != nil {
			errs = append(errs, fmt.Errorf("gossip: leave: %w", err))
		}
	}
	if err := ml.Shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("gossip: shutdown: %w", err))
	}
	return errors.Join(errs...)
}

// announceLeaving gossips StatusLeaving before a graceful leave, unless the
// node said so already (a member's drain): memberlist does not tell its
// events a leave from a failure (the node a NotifyLeave passes never has
// its State set), so the others tell them apart by the last status (a node
// that disappears while leaving left; any other was declared dead).
func (p *Provider) announceLeaving(ml *memberlist.Memberlist) {
	p.statusMu.Lock()
	defer p.statusMu.Unlock()
	p.metaMu.Lock()
	m := cloneMeta(p.meta)
	m.Status = StatusLeaving
	b, err := encodeMeta(m)
	changed := err == nil && p.meta.Status != StatusLeaving
	if changed {
		p.meta, p.metaBytes = m, b
	}
	p.metaMu.Unlock()
	if changed {
		if err := ml.UpdateNode(updateTimeout); err != nil {
			p.log.Debug("gossip: leaving status not yet broadcast", "error", err)
		}
	}
}

// run delivers after memberlist events and on the resync timer until stop.
func (p *Provider) run(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(resyncInterval)
	defer t.Stop()
	r := time.NewTicker(rejoinTick)
	defer r.Stop()
	for {
		select {
		case <-stop:
			return
		case <-p.kick:
			p.deliver()
		case <-t.C:
			p.deliver()
		case <-r.C:
			p.rejoin(stop)
		}
	}
}

// deliver gives OnChange the nodes if they changed since its last call, and
// publishes the topology (protoactor ignores a topology whose member IDs did
// not change).
func (p *Provider) deliver() {
	p.deliverMu.Lock()
	defer p.deliverMu.Unlock()
	if p.deliverClosed {
		return
	}
	nodes := p.Nodes()
	changed := !p.delivered || !slices.EqualFunc(nodes, p.last, equalMeta)
	if changed {
		p.last = nodes
		p.delivered = true
		if p.cfg.OnChange != nil {
			p.cfg.OnChange(cloneMetas(nodes))
		}
	}
	p.mu.Lock()
	c := p.cluster
	p.mu.Unlock()
	if c != nil {
		c.MemberList.UpdateClusterTopology(topology(nodes))
	}
}

// topology maps the nodes to protoactor members (see StartMember).
func topology(nodes []Meta) cluster.Members {
	out := make(cluster.Members, 0, len(nodes))
	for _, n := range nodes {
		if n.Host == "" || n.Port <= 0 || n.Port > 65535 {
			continue
		}
		if len(n.Kinds) > 0 && n.Status != StatusUp && n.Status != StatusLeaving && n.Status != StatusDown {
			continue
		}
		m := &cluster.Member{Id: n.ID, Host: n.Host, Port: int32(n.Port)}
		if n.Status == StatusUp {
			m.Kinds = slices.Clone(n.Kinds)
		}
		out = append(out, m)
	}
	return out
}

// forgetNodes empties the membership for good (Shutdown, failed Start).
func (p *Provider) forgetNodes() {
	p.nodesMu.Lock()
	p.nodesGone = true
	clear(p.nodes)
	clear(p.gossipAddrs)
	clear(p.failed)
	p.nodesMu.Unlock()
}

func (p *Provider) signal() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}
