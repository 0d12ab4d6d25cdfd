// Package cluster runs A2 as a cluster of nodes: each session is a virtual
// actor (the grain kind "session", its identity the session ID) placed by
// rendezvous hashing over the live members that host sessions, found by
// gossip (hashicorp/memberlist, in package gossip), on protoactor-go's
// cluster and remote. Gateway nodes host no sessions: they serve HTTP and
// route every request by session ID through Router, which implements the
// gateway's Router with exactly the semantics of a single node.
//
// docs/cluster.md is the operator's page: roles, flags, a three-member
// example, and what happens when members join and leave.
//
// # Messages
//
// Every message between nodes is one clusterpb.Envelope (versioned; its
// kind names the body), so that a node never meets a type it cannot
// decode: an unknown kind or a newer version is answered with an error.
//
// # Placement and handoff
//
// A member places a session (actors.Options.Place) when the hash over its
// view of the members places the session on it, it is not leaving, and it
// has not handed the session to another member in this view. A grain is
// activated by the member the hash names (the activator actor, on a dead
// letter to the grain's deterministic name), and only after every other
// member has released the session: each stops the session's actors once
// their write in flight is durable. So in a graceful change (a join, a
// SIGTERM leave) a session never runs on two members at once. When views
// differ (during a change, or a split) two members may still both believe
// they place a session; the store's conditional append fences every
// writer, so nothing is corrupted (docs/cluster.md, "Correctness").
//
// # Partitions
//
// A member that loses sight of a majority of the members it knew steps
// down, so that the others take its sessions over, and steps up when it
// sees a majority again (quorum.go); the gossip keeps trying to reach the
// members it saw fail, so that a healed partition becomes one cluster
// again (gossip/rejoin.go; docs/cluster.md, "Partitions").
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	protocluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/cluster/clusterpb"
	"github.com/a2-runtime/a2/cluster/gossip"
	"github.com/a2-runtime/a2/internal/levelfilter"
)

// KindSession is the grain kind of a session.
const KindSession = "session"

// Roles of a node.
const (
	// RoleMember hosts sessions (and may serve HTTP).
	RoleMember = "member"
	// RoleGateway serves HTTP only and hosts no sessions.
	RoleGateway = "gateway"
)

// endpointQueue is the initial size of the queue of messages to each peer
// (remote.WithEndpointWriterQueueSize).
const endpointQueue = 1024

// Names of the actors every node has at a well-known PID.
const (
	activatorName = "a2-activator"
	grainPrefix   = "session/"
)

func (c Config) withDefaults() Config {
	if c.JoinTimeout == 0 {
		c.JoinTimeout = 30 * time.Second
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = 2 * time.Second
	}
	if c.ReleaseTimeout == 0 {
		c.ReleaseTimeout = 5 * time.Second
	}
	if c.GrainIdle == 0 {
		c.GrainIdle = 2 * time.Minute
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = time.Second
	}
	if c.ForgetFailed == 0 {
		c.ForgetFailed = defaultForgetFailed
	}
	if c.StepDownGrace == 0 {
		c.StepDownGrace = defaultStepDownGrace
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Advertise == "" {
		c.Advertise = c.Bind
	}
	return c
}

// Errors of the cluster.
var (
	// ErrNoMembers: no live member hosts sessions (yet).
	ErrNoMembers = fmt.Errorf("%w: no member of the cluster hosts sessions", actors.ErrUnavailable)
	// ErrUnsupported: the other node does not speak this kind or version.
	// It wraps errors.ErrUnsupported, which the gateway tests for.
	ErrUnsupported = fmt.Errorf("cluster: unsupported message: %w", errors.ErrUnsupported)
)

// view is one node's picture of the cluster, replaced whole on each change.
type view struct {
	gen uint64
	// hosts are the members that host sessions (status up), by address.
	hosts []gossip.Meta
	// all are every accepted alive node, leaving ones included.
	all []gossip.Meta
	// changed closes when a newer view replaces this one.
	changed chan struct{}
}

// Node is one node of a cluster: a member (with a runtime) or a gateway.
type Node struct {
	cfg    Config
	agents map[string]*actors.Agent
	rt     *actors.Runtime // members only

	system   *actor.ActorSystem
	cl       *protocluster.Cluster
	provider *gossip.Provider
	self     gossip.Meta

	view    atomic.Pointer[view]
	viewMu  sync.Mutex // serializes replacements of view
	leaving atomic.Bool
	// down: the member stepped down (quorum.go); quorum counts the members
	// it knows.
	down   atomic.Bool
	quorum quorum

	mu sync.Mutex
	// handedOff: sessions released to another member's activation, with
	// the view generation they were released in: not placed here again
	// until the view changes.
	handedOff map[string]uint64
	// activating: activations under way, so that concurrent ones wait for
	// the first (singleflight).
	activating map[string]chan struct{}
	// grains: active grains by session.
	grains map[string]*actor.PID
	// streams: live streams this member serves, by stream ID.
	streams map[string]*ownerStream
	// subs: live streams this node follows, by stream ID.
	subs map[string]*subscription

	streamSeq atomic.Uint64
	// streamDuplicates counts the events the subscriptions of this node
	// dropped as duplicates (sent twice by an owner); streamSeq counts the
	// streams they opened, re-subscriptions included.
	streamDuplicates atomic.Uint64
	stopOnce         sync.Once
	stopped          chan struct{}
	// resume asks the resume loop of a member for one more pass of
	// ResumeWork (coalesced: a pass already asked for is not asked twice).
	resume chan struct{}
}

// New prepares a node; Start joins it to the cluster. A member passes the
// runtime it hosts sessions on to Start; build that runtime with
// actors.Options{Place: node.Place, SkipRecovery: true, Lease:
// node.LeaseOptions()}: the node runs the runtime's ResumeWork itself, at
// start and after each change of the members.
func New(cfg Config) (*Node, error) {
	cfg = cfg.withDefaults()
	if cfg.Name == "" {
		return nil, errors.New("cluster: a cluster name is required (--cluster)")
	}
	if cfg.Role != RoleMember && cfg.Role != RoleGateway {
		return nil, fmt.Errorf("cluster: unknown role %q: use %q or %q", cfg.Role, RoleMember, RoleGateway)
	}
	if _, _, err := remoteAddr(cfg.Bind); err != nil {
		return nil, fmt.Errorf("cluster: --bind: %w", err)
	}
	if _, _, err := remoteAddr(cfg.Advertise); err != nil {
		return nil, fmt.Errorf("cluster: --advertise: %w", err)
	}
	n := &Node{cfg: cfg, agents: map[string]*actors.Agent{}, handedOff: map[string]uint64{},
		activating: map[string]chan struct{}{}, grains: map[string]*actor.PID{},
		streams: map[string]*ownerStream{}, subs: map[string]*subscription{}, stopped: make(chan struct{}),
		resume: make(chan struct{}, 1)}
	for _, a := range cfg.Agents {
		n.agents[a.Name()] = a
	}
	n.quorum.known = map[string]knownMember{}
	n.quorum.kick = make(chan struct{}, 1)
	n.view.Store(&view{changed: make(chan struct{})})
	// The actor system's ID is the member's: fresh at each process start,
	// and the owner of the leases its runtime takes (LeaseOptions).
	logger := cfg.Logger
	n.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return levelfilter.New(logger, slog.LevelWarn)
	}))
	return n, nil
}

// LeaseOptions are the member's lease and sessions' ownership its runtime
// takes: in the member's ID, for Config.LeaseTTL.
func (n *Node) LeaseOptions() actors.LeaseOptions {
	return actors.LeaseOptions{Owner: n.system.ID, TTL: n.cfg.LeaseTTL}
}

// remoteAddr is the actor remote's host and port for a gossip address: the
// same host, the next port.
func remoteAddr(gossipAddr string) (string, int, error) {
	host, port, err := net.SplitHostPort(gossipAddr)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p >= 65535 {
		return "", 0, fmt.Errorf("%q: the port must be between 1 and 65534 (the actor remote listens on the next one)", gossipAddr)
	}
	return host, p + 1, nil
}

// Start joins the cluster: it starts the actor remote, joins the gossip
// (retrying an address nobody answers, refusing a cluster of another name
// or store), starts protoactor's cluster with this node's kinds, and
// announces the node as up. rt is the member's runtime (nil for a
// gateway). A member then resumes the sessions with work the cluster
// places on it (the store's index), and again after each change of the
// members.
func (n *Node) Start(ctx context.Context, rt *actors.Runtime) error {
	if n.cfg.Role == RoleMember && rt == nil {
		return errors.New("cluster: a member needs a runtime")
	}
	n.rt = rt
	host, port, _ := remoteAddr(n.cfg.Bind)
	advHost, advPort, _ := remoteAddr(n.cfg.Advertise)
	logger := n.cfg.Logger
	var kinds []string
	if n.cfg.Role == RoleMember {
		kinds = []string{KindSession}
	}
	n.self = gossip.Meta{ID: n.system.ID, Host: advHost, Port: advPort, Kinds: kinds, Cluster: n.cfg.Name,
		Store: n.cfg.StoreID, Role: n.cfg.Role, Status: gossip.StatusStarting}
	n.provider = gossip.New(gossip.Config{Bind: n.cfg.Bind, Advertise: n.cfg.Advertise, Join: n.cfg.Join, Meta: n.self,
		ProbeInterval: n.cfg.ProbeInterval, ProbeTimeout: n.cfg.ProbeTimeout, GossipInterval: n.cfg.GossipInterval,
		SuspicionMult: n.cfg.SuspicionMult, JoinTimeout: n.cfg.JoinTimeout, Keys: n.cfg.Keys, Logger: logger, OnChange: n.onNodes})
	if err := n.provider.Start(ctx); err != nil {
		return err
	}
	// The endpoint writer's queue starts at endpointQueue slots (it doubles
	// when full): protoactor's default, a million, is 16 MB of pointers per
	// peer that the garbage collector scans in every cycle.
	// Its gRPC server and dialer carry the cluster's TLS, and the server
	// survives a peer's message that breaks protoactor's reader
	// (security.go).
	serverOpts, dialOpts := remoteOptions(n.cfg.TLS, logger)
	rcfg := remote.Configure(host, port, remote.WithAdvertisedHost(net.JoinHostPort(advHost, strconv.Itoa(advPort))),
		remote.WithEndpointWriterQueueSize(endpointQueue), remote.WithServerOptions(serverOpts...), remote.WithDialOptions(dialOpts...))
	var opts []protocluster.ConfigOption
	if n.cfg.Role == RoleMember {
		opts = append(opts, protocluster.WithKinds(protocluster.NewKind(KindSession,
			actor.PropsFromProducer(func() actor.Actor { return &grain{n: n} }))))
	}
	ccfg := protocluster.Configure(n.cfg.Name, n.provider, &identityLookup{n: n}, rcfg, opts...)
	n.cl = protocluster.New(n.system, ccfg)
	if err := startMember(n.cl); err != nil {
		_ = n.provider.Shutdown(false)
		return err
	}
	if _, err := n.system.Root.SpawnNamed(actor.PropsFromFunc(n.receiveActivator), activatorName); err != nil {
		n.shutdownActors()
		return fmt.Errorf("cluster: start the activator: %w", err)
	}
	if err := n.provider.SetStatus(gossip.StatusUp); err != nil {
		n.shutdownActors()
		return err
	}
	n.self.Status = gossip.StatusUp
	go n.watchView()
	if rt != nil {
		go n.resumeLoop()
		n.askResume()
		if n.cfg.StoreID != "" {
			// Only on a shared store can the others take its sessions
			// over (with --allow-local-store they cannot read them).
			go n.quorumLoop()
		}
	}
	logger.Info("joined the cluster", "cluster", n.cfg.Name, "role", n.cfg.Role, "id", n.self.ID,
		"gossip", n.provider.LocalAddr(), "remote", n.self.Address())
	return nil
}

// startMember starts protoactor's cluster, turning its panics (a remote
// that cannot listen, say) into an error.
func startMember(c *protocluster.Cluster) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("cluster: start the actor cluster: %v", p)
		}
	}()
	c.StartMember()
	return nil
}

// Config is the node's configuration, with its defaults.
func (n *Node) Config() Config { return n.cfg }

// onNodes takes a new list of nodes from the provider.
func (n *Node) onNodes(nodes []gossip.Meta) {
	n.viewMu.Lock()
	defer n.viewMu.Unlock()
	old := n.view.Load()
	v := &view{gen: old.gen + 1, all: nodes, changed: make(chan struct{})}
	for _, m := range nodes {
		if m.Status == gossip.StatusUp && slices.Contains(m.Kinds, KindSession) {
			v.hosts = append(v.hosts, m)
		}
	}
	n.view.Store(v)
	close(old.changed)
	n.logGone(old.all, nodes)
	if n.cfg.Role == RoleMember && n.provider != nil {
		n.quorum.observe(n.provider.Membership())
		n.askQuorum()
	}
}

// logGone says which members of before are not in now, in A2's own words
// (protoactor logs only its lost connections): one that was leaving left;
// any other was declared dead by the gossip, and its sessions go to the
// members the hash places them on now, once its lease lapses.
func (n *Node) logGone(before, now []gossip.Meta) {
	for _, m := range before {
		if !slices.Contains(m.Kinds, KindSession) || slices.ContainsFunc(now, func(o gossip.Meta) bool { return o.ID == m.ID }) {
			continue
		}
		if m.Status == gossip.StatusLeaving {
			n.cfg.Logger.Info("a member left the cluster", "member", m.ID, "remote", m.Address())
			continue
		}
		n.cfg.Logger.Warn("a member is gone: the gossip declared it dead; its sessions are served by the members the hash places them on now, once its lease lapses (those with work resume on their own)",
			"member", m.ID, "remote", m.Address(), "leaseTTL", n.cfg.LeaseTTL)
	}
}

// watchView reacts to each new view until the node stops: a member
// releases the grains the hash now places elsewhere; every node ends the
// streams it serves to nodes that are gone.
func (n *Node) watchView() {
	v := n.view.Load()
	for {
		select {
		case <-v.changed:
		case <-n.stopped:
			return
		}
		v = n.view.Load()
		n.onView(v)
	}
}

func (n *Node) onView(v *view) {
	alive := map[string]bool{}
	for _, m := range v.all {
		alive[m.Address()] = true
	}
	n.mu.Lock()
	var moved []string
	for s := range n.grains {
		if o, ok := ownerOf(s, v.hosts); !ok || o.ID != n.self.ID {
			moved = append(moved, s)
		}
	}
	var orphans []*ownerStream
	for _, st := range n.streams {
		if !alive[st.subscriber.Address] {
			orphans = append(orphans, st)
		}
	}
	n.mu.Unlock()
	for _, st := range orphans {
		st.cancel(errSubscriberGone)
	}
	if len(moved) > 0 && !n.leaving.Load() {
		n.cfg.Logger.Info("releasing sessions the cluster now places elsewhere", "sessions", len(moved))
		go n.releaseAll(moved, nil)
	}
	if n.rt != nil {
		n.askResume()
	}
}

// askResume asks the resume loop for a pass.
func (n *Node) askResume() {
	select {
	case n.resume <- struct{}{}:
	default:
	}
}

// resumeLoop runs the member runtime's ResumeWork at start and after each
// change of the members, one pass at a time: each pass activates the
// sessions with work (the store's index) that the hash now places on this
// member, so that a session whose member left or died resumes its work on
// its new owner without a client asking, and one a new member takes over
// moves there at once.
func (n *Node) resumeLoop() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-n.stopped
		cancel()
	}()
	for {
		select {
		case <-n.resume:
		case <-n.stopped:
			return
		}
		if n.leaving.Load() {
			return
		}
		n.rt.ResumeWork(ctx)
	}
}

// owner returns the member the current view places session on.
func (n *Node) owner(session string) (gossip.Meta, bool) {
	return ownerOf(session, n.view.Load().hosts)
}

// Places reports whether this member places session now: the hash over
// its view places it here, the node is not leaving and has not stepped
// down, and it did not hand the session to another member's activation in
// this view. It is the basis of Place.
func (n *Node) Places(session string) bool {
	if n.leaving.Load() || n.down.Load() || n.cfg.Role != RoleMember {
		return false
	}
	v := n.view.Load()
	o, ok := ownerOf(session, v.hosts)
	if !ok || o.ID != n.self.ID {
		return false
	}
	n.mu.Lock()
	gen, handed := n.handedOff[session]
	if handed && gen != v.gen {
		delete(n.handedOff, session)
		handed = false
	}
	n.mu.Unlock()
	return !handed
}

// Place is the member runtime's actors.Options.Place: the runtime
// activates a session only once its grain is active here, which needs the
// hash to place the session on this member and every other member to have
// released it first (activateHere). It waits at most ReleaseTimeout plus
// AttemptTimeout.
func (n *Node) Place(session string) error {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ReleaseTimeout+n.cfg.AttemptTimeout)
	defer cancel()
	return n.activateHere(ctx, session)
}

// Hosts returns the members that host sessions now, as this node sees them.
func (n *Node) Hosts() []gossip.Meta { return slices.Clone(n.view.Load().hosts) }

// Leave leaves the cluster gracefully: Drain, then Stop.
func (n *Node) Leave(ctx context.Context) {
	n.Drain(ctx)
	n.Stop()
}

// Drain hands a member's sessions over before it leaves: the member stops
// admitting work for its sessions (they are no longer placed here, and the
// other nodes learn it by gossip at once), releases each session after its
// write in flight, and asks each session's new owner to activate it, so
// that work in flight resumes there without any client asking. Requests
// that reach it meanwhile are answered MOVED and their senders retry at
// the new owner; the node still routes its own HTTP requests until Stop.
// A gateway has nothing to drain. Drain returns when done or when ctx
// ends; later calls do nothing.
func (n *Node) Drain(ctx context.Context) {
	if n.cfg.Role != RoleMember || n.leaving.Swap(true) || n.provider == nil {
		return
	}
	if err := n.provider.SetStatus(gossip.StatusLeaving); err != nil {
		n.cfg.Logger.Warn("could not announce the leave; the others see it when the node leaves the gossip", "err", err)
	}
	n.onNodes(n.provider.Nodes()) // this node's own view without it, at once
	var moved []actors.ActiveSession
	if n.rt != nil {
		moved = n.rt.Active()
	}
	n.mu.Lock()
	sessions := make([]string, 0, len(n.grains))
	for s := range n.grains {
		sessions = append(sessions, s)
	}
	n.mu.Unlock()
	for _, a := range moved {
		if !slices.Contains(sessions, a.Session) {
			sessions = append(sessions, a.Session)
		}
	}
	began := time.Now()
	n.releaseAll(sessions, ctx.Done())
	n.handOver(ctx, moved)
	n.cfg.Logger.Info("sessions handed over", "sessions", len(sessions), "took", time.Since(began))
}

// Stop leaves the gossip and stops the node's actors at once, without a
// handoff (a gateway's shutdown, or a member's after Leave).
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		n.leaving.Store(true)
		close(n.stopped)
		n.mu.Lock()
		subs := make([]*subscription, 0, len(n.subs))
		for _, s := range n.subs {
			subs = append(subs, s)
		}
		streams := make([]*ownerStream, 0, len(n.streams))
		for _, st := range n.streams {
			streams = append(streams, st)
		}
		n.mu.Unlock()
		for _, st := range streams {
			st.cancel(errMovedAway)
		}
		for _, s := range subs {
			s.stop()
		}
		if n.provider != nil {
			_ = n.provider.Shutdown(true)
		}
		n.shutdownActors()
	})
}

// shutdownActors stops protoactor's cluster, remote and actor system
// without its graceful path, which sleeps two seconds and calls the
// provider's Shutdown again.
func (n *Node) shutdownActors() {
	if n.cl == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			n.cfg.Logger.Warn("the actor cluster panicked while stopping", "panic", p)
		}
	}()
	n.cl.Shutdown(false)
}

// version is the envelope version this node speaks.
const version = clusterpb.Version

// Status is a node's view of the cluster, as GET /v1/cluster shows it.
type Status struct {
	Self gossip.Meta `json:"self"`
	// Members are the nodes this node sees (itself included).
	Members []gossip.Meta `json:"members"`
	// Hosts are the members that host sessions, by address.
	Hosts []string `json:"hosts"`
	// Sessions are the sessions whose grain is active on this member,
	// sorted, at most 1,000 of them; SessionCount counts them all.
	Sessions     []string `json:"sessions"`
	SessionCount int      `json:"sessionCount"`
	// Quorum is a member's count of the members it knows, and whether it
	// stepped down for lack of a majority (quorum.go); nil on a gateway,
	// and on a member without a shared store (which never steps down).
	Quorum *QuorumStatus `json:"quorum,omitempty"`
	// Lease is where a member's lease stands: "serving", "stepped down" or
	// "lapsed" (actors.LeaseState); empty on a gateway.
	Lease string `json:"lease,omitempty"`
}

// Status returns the node's view of the cluster now.
func (n *Node) Status() Status {
	v := n.view.Load()
	st := Status{Self: n.self, Members: slices.Clone(v.all), Hosts: []string{}, Sessions: []string{}}
	if n.cfg.Role == RoleMember {
		if n.cfg.StoreID != "" {
			st.Quorum = n.quorum.status()
		}
		if n.down.Load() {
			st.Self.Status = gossip.StatusDown
		}
		if n.rt != nil {
			st.Lease = n.rt.LeaseStatus().State.String()
		}
	}
	for _, m := range v.hosts {
		st.Hosts = append(st.Hosts, m.Address())
	}
	n.mu.Lock()
	for s := range n.grains {
		st.Sessions = append(st.Sessions, s)
	}
	n.mu.Unlock()
	slices.Sort(st.Sessions)
	st.SessionCount = len(st.Sessions)
	if len(st.Sessions) > 1000 {
		st.Sessions = st.Sessions[:1000]
	}
	return st
}

// Owner returns the member among hosts that the cluster places session on
// (rendezvous hashing), for tests and tools that check placement.
func Owner(session string, hosts []gossip.Meta) (gossip.Meta, bool) { return ownerOf(session, hosts) }
