// A cluster node's configuration.

package cluster

import (
	"log/slog"
	"time"

	"github.com/a2-runtime/a2/actors"
)

// Config configures a Node.
type Config struct {
	// Name is the cluster's name; nodes of another name are refused.
	Name string
	// Role is RoleMember or RoleGateway.
	Role string
	// Bind is the gossip address (TCP and UDP); the actor remote listens on
	// the next port (Bind's port + 1).
	Bind string
	// Advertise is the gossip address other nodes reach this one at
	// (default Bind); its port + 1 is the advertised remote port.
	Advertise string
	// Join lists gossip addresses of nodes already in the cluster; empty
	// starts a new cluster.
	Join []string
	// StoreID is the identity of the member's store (StoreIdentity); a
	// member whose store differs from the cluster's is refused at join.
	// Empty for a gateway.
	StoreID string
	// Keys are the cluster's gossip keys (ReadKeyFile; gossip.Config.Keys):
	// the first encrypts, every one opens. Empty: gossip in clear.
	Keys [][]byte
	// TLS, when set, is mutual TLS on the actor port (LoadTLS): a peer
	// without a certificate of the cluster's CA is refused and logged.
	// Nil: the actor port in clear, without authentication.
	TLS *TLS
	// Agents are the agents the cluster serves. A gateway uses them to
	// refuse unknown agents and to decode states; a member, through its
	// runtime.
	Agents []*actors.Agent

	// ProbeInterval, ProbeTimeout, GossipInterval and SuspicionMult tune
	// failure detection (gossip.Config; zero values take its defaults,
	// which detect a kill -9 on loopback in about a second).
	ProbeInterval, ProbeTimeout, GossipInterval time.Duration
	SuspicionMult                               int
	// JoinTimeout bounds the retries of a join nobody answers (default
	// 30 s).
	JoinTimeout time.Duration
	// RequestTimeout bounds a request whose context has no deadline
	// (default 30 s).
	RequestTimeout time.Duration
	// AttemptTimeout bounds one attempt of a request at one member, so that
	// a member that died before the gossip noticed costs at most this much
	// before the request is tried again (default 2 s).
	AttemptTimeout time.Duration
	// ReleaseTimeout bounds how long an activation waits for the other
	// members to release the session (default 5 s); a member that does not
	// answer by then is taken to have nothing of it (the store fences it if
	// it had).
	ReleaseTimeout time.Duration
	// GrainIdle passivates a session's grain idle this long whose session
	// has no active actor (default 2 minutes).
	GrainIdle time.Duration
	// LeaseTTL is how long the member's lease lasts from its last renewal
	// (default 1 s; renewed every quarter of it, one synced write per
	// member whatever its number of sessions): the longest a dead member
	// keeps its sessions from the survivors, and how long a member that
	// cannot renew keeps serving (docs/cluster.md, "Leases").
	LeaseTTL time.Duration
	// ForgetFailed is how long a member that gossip declared dead still
	// counts towards a serving member's majority (default 10 s; quorum.go):
	// longer than a member cut off from the others takes to notice them
	// all fail (about 1 s at the default failure detection, plus a quarter
	// of a second per member), shorter is better (until then, losing
	// another member may leave no majority).
	ForgetFailed time.Duration
	// StepDownGrace is how long a member must see no majority before it
	// steps down (default 100 ms), so that a member declared dead that
	// refutes it at once stops no session.
	StepDownGrace time.Duration
	// Logger receives the node's logs (default: discard).
	Logger *slog.Logger
}
