package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/a2-runtime/a2"
	"github.com/a2-runtime/a2/cluster"
)

// clusterFlags are the flags of a cluster node (docs/cluster.md).
type clusterFlags struct {
	role       string
	name       string
	bind       string
	advertise  string
	join       string
	allowLocal bool
	leaseTTL   time.Duration
	// keyFile, ca, cert and certKey admit only the cluster's nodes
	// (docs/security.md); insecure lets a node beyond loopback run without.
	keyFile, ca, cert, certKey string
	insecure                   bool
}

const roleSingle = "single"

func (c *clusterFlags) register(fs *flag.FlagSet, env func(name, def string) string) {
	fs.StringVar(&c.role, "role", env("A2_ROLE", roleSingle), `"single" (one node, no cluster), "member" (hosts sessions and serves HTTP) or "gateway" (serves HTTP only) (A2_ROLE)`)
	fs.StringVar(&c.name, "cluster", env("A2_CLUSTER", ""), "name of the cluster to form or join; nodes of another name are refused (A2_CLUSTER)")
	fs.StringVar(&c.bind, "bind", env("A2_BIND", "127.0.0.1:7946"), "gossip address host:port of a cluster node; the actor remote listens on the next port (A2_BIND)")
	fs.StringVar(&c.advertise, "advertise", env("A2_ADVERTISE", ""), "gossip address other nodes reach this one at; default --bind (A2_ADVERTISE)")
	fs.StringVar(&c.join, "join", env("A2_JOIN", ""), "comma-separated gossip addresses of nodes already in the cluster; empty starts a new cluster (A2_JOIN)")
	ttl, err := time.ParseDuration(env("A2_LEASE_TTL", "1s"))
	if err != nil {
		ttl = -1 // check refuses it
	}
	fs.DurationVar(&c.leaseTTL, "lease-ttl", ttl, "how long a member's lease lasts from its last renewal (renewed every quarter of it): the longest a dead member keeps its sessions from the survivors, and how long a member that cannot reach the store keeps serving (A2_LEASE_TTL)")
	allow := env("A2_ALLOW_LOCAL_STORE", "") == "1" || strings.EqualFold(env("A2_ALLOW_LOCAL_STORE", ""), "true")
	fs.StringVar(&c.keyFile, "cluster-key-file", env("A2_CLUSTER_KEY_FILE", ""), "file of the cluster's gossip keys (base64, one per line, the first encrypts): gossip encrypted and authenticated; `node certs` makes one (A2_CLUSTER_KEY_FILE)")
	fs.StringVar(&c.ca, "cluster-ca", env("A2_CLUSTER_CA", ""), "PEM file of the cluster's CA: the actor port admits only nodes whose certificate it signed (A2_CLUSTER_CA)")
	fs.StringVar(&c.cert, "cluster-cert", env("A2_CLUSTER_CERT", ""), "PEM file of this node's certificate, signed by --cluster-ca (A2_CLUSTER_CERT)")
	fs.StringVar(&c.certKey, "cluster-cert-key", env("A2_CLUSTER_CERT_KEY", ""), "PEM file of the private key of --cluster-cert (A2_CLUSTER_CERT_KEY)")
	insecure := env("A2_INSECURE_CLUSTER", "") == "1" || strings.EqualFold(env("A2_INSECURE_CLUSTER", ""), "true")
	fs.BoolVar(&c.insecure, "insecure-cluster", insecure, "let a cluster node whose gossip address is not a loopback one run without --cluster-key-file or the certificates; it warns at start (A2_INSECURE_CLUSTER)")
	fs.BoolVar(&c.allowLocal, "allow-local-store", allow, "let a member run on the embedded Pebble store in --data: a member that is lost takes its sessions with it until it returns (A2_ALLOW_LOCAL_STORE)")
}

// check validates the cluster flags; shared says whether --store names a
// shared store.
func (c *clusterFlags) check(shared bool) error {
	switch c.role {
	case "", roleSingle:
		c.role = roleSingle
		return nil
	case cluster.RoleMember, cluster.RoleGateway:
	default:
		return fmt.Errorf("--role must be single, member or gateway, not %q", c.role)
	}
	if c.leaseTTL < 100*time.Millisecond {
		return fmt.Errorf("--lease-ttl (A2_LEASE_TTL) must be a duration of at least 100ms")
	}
	if c.name == "" {
		return fmt.Errorf("--role %s needs --cluster NAME (A2_CLUSTER): the name every node of the cluster shares", c.role)
	}
	for flagName, addr := range map[string]string{"--bind": c.bind, "--advertise": c.advertise} {
		if addr == "" && flagName == "--advertise" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s must be host:port, not %q", flagName, addr)
		}
	}
	for _, addr := range c.joinList() {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("--join lists host:port addresses; %q is not one", addr)
		}
	}
	set := 0
	for _, f := range []string{c.ca, c.cert, c.certKey} {
		if f != "" {
			set++
		}
	}
	if set != 0 && set != 3 {
		return errors.New("mutual TLS between nodes needs all three of --cluster-ca, --cluster-cert and --cluster-cert-key")
	}
	opts := a2.ClusterOptions{Bind: c.bind, Advertise: c.advertise, KeyFile: c.keyFile, CAFile: c.ca, Insecure: c.insecure}
	if beyond := opts.Unprotected(); beyond != "" {
		return fmt.Errorf("--bind/--advertise %s is not a loopback address, and the cluster has no key or no certificates: any process that reaches "+
			"its ports could join the cluster and read every session. Give every node --cluster-key-file, --cluster-ca, --cluster-cert and "+
			"--cluster-cert-key (`go run ./cmd/node certs -dir certs NAME...` makes a development set; docs/security.md), or --insecure-cluster to run without them", beyond)
	}
	if c.role == cluster.RoleMember && !shared && !c.allowLocal {
		return errors.New("a cluster member needs the cluster's shared store: --store postgres://... (A2_STORE), the same for every member. " +
			"--allow-local-store runs a member on the embedded Pebble store in --data instead; its sessions then wait for it whenever it is down")
	}
	return nil
}

// joinList is --join as a list.
func (c *clusterFlags) joinList() []string {
	var out []string
	for _, a := range strings.Split(c.join, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// describe is the banner's data line for a cluster node.
func (c *clusterFlags) describe(where string) string {
	if c.role == cluster.RoleGateway {
		return fmt.Sprintf("none: gateway of cluster %q (gossip %s), routing to its members", c.name, c.bind)
	}
	return fmt.Sprintf("%s; member of cluster %q (gossip %s, remote on the next port)", where, c.name, c.bind)
}
