// A node's gossiped metadata (Meta): its encoding, copies and comparison,
// and the resolution of the addresses it names.

package gossip

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/hashicorp/memberlist"
)

// Meta is what each node gossips about itself, in its memberlist node
// metadata, encoded as JSON. The encoding must stay under
// memberlist.MetaMaxSize (512 bytes): Start (and SetStatus) return an error
// when it does not fit.
type Meta struct {
	// ID is the protoactor actor-system ID, fresh per process start; it is
	// also the memberlist node name.
	ID string `json:"id"`
	// Host is the protoactor remote host others reach this node at.
	Host string `json:"host"`
	// Port is the protoactor remote port; a node without one (0) is not
	// published to protoactor.
	Port int `json:"port"`
	// Kinds are the grain kinds the node hosts ("session"); none for a
	// gateway.
	Kinds []string `json:"kinds,omitempty"`
	// Cluster is the cluster name: nodes of different clusters refuse each
	// other.
	Cluster string `json:"cluster"`
	// Store identifies the store the node uses ("" = none, e.g. a gateway):
	// two nodes that both name a store refuse each other unless it is the
	// same one.
	Store string `json:"store"`
	// Role is "member" or "gateway".
	Role string `json:"role"`
	// Status is one of StatusStarting, StatusUp, StatusLeaving, StatusDown.
	Status string `json:"status"`
}

// Address returns "host:port" of the node's protoactor remote (IPv6 hosts
// in brackets).
func (m Meta) Address() string {
	return net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
}

func encodeMeta(m Meta) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("gossip: encode metadata: %w", err)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("gossip: metadata is %d bytes encoded, more than memberlist's limit of %d", len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

// resolveHostPort splits host:port and resolves the host to an IP address
// (memberlist takes only IPs); an empty host becomes defaultHost, or is an
// error when defaultHost is "".
func resolveHostPort(ctx context.Context, hp, defaultHost string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("invalid port %q", portStr)
	}
	if host == "" {
		if defaultHost == "" {
			return "", 0, errors.New("no host")
		}
		host = defaultHost
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.String(), port, nil
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return "", 0, err
	}
	if len(ips) == 0 {
		return "", 0, fmt.Errorf("%s resolves to no address", host)
	}
	for _, ip := range ips { // prefer IPv4
		if ip.IP.To4() != nil {
			return ip.IP.String(), port, nil
		}
	}
	return ips[0].IP.String(), port, nil
}

func cloneMeta(m Meta) Meta {
	m.Kinds = slices.Clone(m.Kinds)
	return m
}

func cloneMetas(ms []Meta) []Meta {
	out := make([]Meta, len(ms))
	for i, m := range ms {
		out[i] = cloneMeta(m)
	}
	return out
}

func equalMeta(a, b Meta) bool {
	return a.ID == b.ID && a.Host == b.Host && a.Port == b.Port &&
		slices.Equal(a.Kinds, b.Kinds) && a.Cluster == b.Cluster &&
		a.Store == b.Store && a.Role == b.Role && a.Status == b.Status
}
