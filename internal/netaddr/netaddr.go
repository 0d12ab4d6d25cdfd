// Package netaddr answers whether an address stays on this machine.
package netaddr

import (
	"net"
	"strings"
)

// Loopback reports whether addr (host:port or a bare host) names only this
// machine: a loopback IP address or "localhost". An address of every
// interface (0.0.0.0, ::) is not one, nor is any other name.
func Loopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
