package netaddr

import "testing"

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.5.6.7": true, "[::1]:7946": true, "::1": true, "localhost:80": true, "LOCALHOST": true,
		"0.0.0.0:7946": false, "[::]:80": false, "10.0.0.5:7946": false, "node1.example:7946": false, "": false, "localhost.evil:1": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
