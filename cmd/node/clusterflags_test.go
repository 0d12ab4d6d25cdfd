package main

import (
	"io"
	"strings"
	"testing"
)

// Bad cluster flags are refused before anything starts, each with a
// message that says what to do.
func TestClusterFlagsRefuseBadInput(t *testing.T) {
	cases := []struct {
		args []string
		want string // in the error; "" accepts
	}{
		{[]string{"--role", "banana"}, "--role must be single, member or gateway"},
		{[]string{"--role", "member"}, "--cluster NAME"},
		{[]string{"--role", "gateway"}, "--cluster NAME"},
		{[]string{"--role", "member", "--cluster", "c"}, "--allow-local-store"},
		{[]string{"--role", "member", "--cluster", "c", "--allow-local-store", "--bind", "nope"}, "--bind must be host:port"},
		{[]string{"--role", "gateway", "--cluster", "c", "--advertise", "nope"}, "--advertise must be host:port"},
		{[]string{"--role", "gateway", "--cluster", "c", "--join", "127.0.0.1:7946,nope"}, `"nope" is not one`},
		{[]string{"--role", "member", "--cluster", "c", "--allow-local-store", "--lease-ttl", "10ms"}, "--lease-ttl"},
		{[]string{"--role", "member", "--cluster", "c", "--allow-local-store", "--lease-ttl", "banana"}, "invalid value"},
		{[]string{"--role", "member", "--cluster", "c", "--allow-local-store"}, ""},
		{[]string{"--role", "member", "--cluster", "c", "--store", "postgres://x/y"}, ""},
		{[]string{"--role", "gateway", "--cluster", "c", "--join", "127.0.0.1:7946"}, ""},
		{[]string{"--role", "single"}, ""},
		{nil, ""},
		// Beyond loopback a node needs the cluster key and certificates,
		// or says it runs without them (docs/security.md).
		{[]string{"--role", "gateway", "--cluster", "c", "--bind", "10.0.0.5:7946"}, "not a loopback address"},
		{[]string{"--role", "gateway", "--cluster", "c", "--bind", "0.0.0.0:7946"}, "not a loopback address"},
		{[]string{"--role", "gateway", "--cluster", "c", "--advertise", "node1.example:7946"}, "not a loopback address"},
		{[]string{"--role", "gateway", "--cluster", "c", "--bind", "10.0.0.5:7946", "--cluster-key-file", "k"}, "not a loopback address"},
		{[]string{"--role", "gateway", "--cluster", "c", "--bind", "10.0.0.5:7946", "--cluster-ca", "ca", "--cluster-cert", "c", "--cluster-cert-key", "k"}, "not a loopback address"},
		{[]string{"--role", "gateway", "--cluster", "c", "--cluster-ca", "ca"}, "all three of --cluster-ca"},
		{[]string{"--role", "gateway", "--cluster", "c", "--bind", "10.0.0.5:7946", "--insecure-cluster"}, ""},
		{[]string{"--role", "gateway", "--cluster", "c", "--bind", "10.0.0.5:7946", "--cluster-key-file", "k", "--cluster-ca", "ca", "--cluster-cert", "c", "--cluster-cert-key", "k"}, ""},
		{[]string{"--role", "gateway", "--cluster", "c", "--bind", "localhost:7946"}, ""},
		{[]string{"--role", "gateway", "--cluster", "c", "--bind", "[::1]:7946"}, ""},
	}
	for _, c := range cases {
		_, err := parseServeFlags(c.args, func(string) string { return "" }, io.Discard)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v, want an error with %q", c.args, err, c.want)
		}
	}
}

// The limits' flags and variables: a flag beats its variable, a value that
// is not a whole number is refused, and the values reach the gateway's
// options.
func TestLimitFlags(t *testing.T) {
	env := map[string]string{"A2_LIMIT_REQUESTS": "100", "A2_LIMIT_STREAMS": "-1", "A2_CLIENT_HEADER": "X-Forwarded-For"}
	getenv := func(k string) string { return env[k] }
	cfg, err := parseServeFlags([]string{"--limit-requests", "50", "--limit-session-events", "7"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.limits; l.RequestsPerMinute != 50 || l.SessionEventsPerMinute != 7 || l.StreamsPerClient != -1 || l.ClientHeader != "X-Forwarded-For" {
		t.Fatalf("limits %+v", l)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--limit-requests", "many"}, nil, `"many" is not a whole number`},
		{nil, map[string]string{"A2_LIMIT_STREAMS": "lots"}, `A2_LIMIT_STREAMS="lots" is not a whole number`},
	} {
		_, err := parseServeFlags(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %v: %v, want an error with %q", tc.args, tc.env, err, tc.want)
		}
	}
}

// The flags of HTTPS and of users' tokens come in pairs, each refused
// alone with what to add.
func TestUserFlagsRefuseBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", "c.pem"}, "both --tls-cert and --tls-key"},
		{[]string{"--tls-key", "k.pem"}, "both --tls-cert and --tls-key"},
		{[]string{"--jwks", "keys.json"}, "needs --jwt-audience"},
		{[]string{"--jwt-issuer", "https://id"}, "needs --jwt-audience"},
		{[]string{"--jwt-audience", "a2"}, "which --jwks (a JWKS file) or --jwt-issuer"},
	} {
		_, err := parseServeFlags(c.args, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.args, err, c.want)
		}
	}
}
