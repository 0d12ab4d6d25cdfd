// Serving agents: the store, the runtime, the cluster node, the HTTP API,
// telemetry and shutdown, wired once for embedded programs and for the
// node (cmd/node turns its flags into Options and calls Serve).

package a2

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/cluster"
	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/internal/levelfilter"
	"github.com/a2-runtime/a2/internal/netaddr"
	"github.com/a2-runtime/a2/persistence"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	pgstore "github.com/a2-runtime/a2/persistence/postgres"
	"github.com/a2-runtime/a2/telemetry"
)

// Options configure Serve. The zero value serves a single node on
// 127.0.0.1:8080 with the embedded store in ./data (or A2_ADDR and
// A2_DATA).
type Options struct {
	// Addr is the HTTP address (default A2_ADDR, else 127.0.0.1:8080).
	Addr string
	// Listener, when set, is served instead of listening on Addr.
	Listener net.Listener
	// TLS, when set, serves HTTPS with it (its certificates:
	// LoadHTTPSCertificate): the API's clients and tokens do not cross
	// the network in clear.
	TLS *tls.Config
	// Data is the embedded Pebble store's directory (default A2_DATA, else
	// ./data). StoreURL, a postgres:// URL, opens a shared PostgreSQL
	// store instead; Store, when set, is used as it is (and closed by the
	// caller).
	Data     string
	StoreURL string
	Store    persistence.Store
	// Logger receives the server's logs and the runtime's warnings and
	// errors (default: text on standard error at LogLevel).
	// Runtime.Logger, when set, receives the runtime's instead.
	Logger *slog.Logger
	// LogLevel is the server's log level (default info). The runtime logs
	// its warnings and errors at info and warn, everything at debug.
	LogLevel slog.Level
	// Gateway and Runtime are the HTTP API's and the runtime's options.
	Gateway gateway.Options
	Runtime actors.Options
	// Cluster, when set, makes this process a node of a cluster: a member
	// (hosts sessions and serves HTTP) or a gateway (serves HTTP only).
	// nil serves a single node (docs/cluster.md).
	Cluster *ClusterOptions
	// MetricsAddr serves a Prometheus scrape endpoint (GET /metrics) when
	// set; ActorMetrics also exports protoactor's own (costly: every actor
	// message is measured). PprofAddr serves Go's profiler
	// (net/http/pprof); bind it to loopback. docs/telemetry.md.
	MetricsAddr  string
	ActorMetrics bool
	PprofAddr    string
	// Getenv reads the environment: A2_ADDR, A2_DATA and the OTEL_*
	// variables of telemetry (default os.Getenv).
	Getenv func(string) string
	// Ready, when set, is called with the base URL once requests are
	// served (Serve also logs it, and how to chat with each agent).
	Ready func(url string)
}

// ClusterOptions make a process a node of a cluster (docs/cluster.md).
type ClusterOptions struct {
	// Name is the cluster's: nodes of another name are refused.
	Name string
	// Role is cluster.RoleMember or cluster.RoleGateway.
	Role string
	// Bind is the gossip address host:port (the actor remote listens on
	// the next port); Advertise the one other nodes reach (default Bind).
	Bind, Advertise string
	// Join lists gossip addresses of nodes already in the cluster; empty
	// starts a new cluster.
	Join []string
	// LeaseTTL is how long a member's lease lasts from its last renewal
	// (default 1 s).
	LeaseTTL time.Duration
	// AllowLocalStore lets a member run on the embedded Pebble store: a
	// member that is lost takes its sessions with it until it returns.
	AllowLocalStore bool
	// KeyFile is the cluster's gossip key file (cluster.ReadKeyFile):
	// gossip encrypted and authenticated with a key every node holds.
	KeyFile string
	// CAFile, CertFile and CertKeyFile give mutual TLS on the actor port
	// (cluster.LoadTLS): the cluster's CA, this node's certificate and
	// its private key, all three or none.
	CAFile, CertFile, CertKeyFile string
	// Insecure lets a node whose gossip address is not a loopback one run
	// without the key or the certificates; it warns at start. Without it
	// such a node refuses to start (docs/security.md).
	Insecure bool
}

// Serve serves agents over HTTP (docs/http.md) until ctx ends, then shuts
// down gracefully: a cluster member hands its sessions over, live streams
// end, requests in flight finish (pushes are answered once durable), the
// sessions stop and the store closes. Telemetry is exported when the
// OTEL_* variables say so (docs/telemetry.md), and flushed within 5 s at
// the end.
func Serve(ctx context.Context, o Options, agents ...*actors.Agent) (err error) {
	if len(agents) == 0 {
		return errors.New("a2.Serve: no agent to serve")
	}
	if err := o.Cluster.check(o.StoreURL != "" || o.Store != nil); err != nil {
		return err
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(telemetry.LogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: o.LogLevel})))
	}
	ln := o.Listener
	if ln == nil {
		addr := cmp.Or(o.Addr, getenv("A2_ADDR"), "127.0.0.1:8080")
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("cannot listen on %s: %w (another node running? choose another address)", addr, err)
		}
	}
	defer ln.Close()
	scheme := "http://"
	if o.TLS != nil {
		ln, scheme = tls.NewListener(ln, o.TLS), "https://"
	}

	tel, err := installTelemetry(ctx, o, getenv, ln, logger)
	if err != nil {
		return err
	}
	defer func() {
		// Bounded: an exporter that cannot reach its collector does not
		// hold the program's exit.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			logger.Warn("telemetry did not flush", "err", err)
		}
	}()
	if o.MetricsAddr != "" {
		stop, err := serveMetrics(o.MetricsAddr, tel.Prometheus, logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	if o.PprofAddr != "" {
		stop, err := servePprof(o.PprofAddr, logger)
		if err != nil {
			return err
		}
		defer stop()
	}

	role := o.Cluster.role()
	var (
		router gateway.Router
		rt     *actors.Runtime
		node   *cluster.Node
	)
	if role != cluster.RoleGateway {
		store, closeStore, err := openStore(ctx, o, getenv, logger)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := closeStore(); cerr != nil && err == nil {
				err = fmt.Errorf("closing the store: %w", cerr)
			}
		}()
		ropts := o.Runtime
		if ropts.Logger == nil {
			// The runtime's warnings and errors (an activation that fails,
			// a write the store refused) are the server's; its lower
			// levels (protoactor's lifecycle) only at debug.
			ropts.Logger = levelfilter.New(logger, runtimeLevel(o.LogLevel))
		}
		if o.ActorMetrics && ropts.Meter == nil {
			ropts.Meter = tel.MeterProvider()
		}
		if role == cluster.RoleMember {
			if node, err = newClusterNode(ctx, o, store, agents, logger); err != nil {
				return err
			}
			// The node resumes the sessions with work the cluster places
			// here (at start and after each change of the members).
			ropts.Place, ropts.SkipRecovery, ropts.Lease = node.Place, true, node.LeaseOptions()
		}
		if rt, err = actors.New(store, agents, ropts); err != nil {
			return err
		}
		defer rt.Close()
		router = gateway.RuntimeRouter{Runtime: rt}
	} else if node, err = newClusterNode(ctx, o, nil, agents, logger); err != nil {
		return err
	}
	if node != nil {
		if err := node.Start(ctx, rt); err != nil {
			return err
		}
		defer node.Stop()
		router = node.Router()
	}

	gopts := o.Gateway
	if gopts.Logger == nil {
		gopts.Logger = logger
	}
	if node != nil && gopts.ClusterStatus == nil {
		gopts.ClusterStatus = func() any { return node.Status() }
	}
	gw := gateway.New(router, gopts)
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	srv.RegisterOnShutdown(gw.Close)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	base := scheme + ln.Addr().String()
	names := make([]string, len(agents))
	for i, a := range agents {
		names[i] = a.Name()
	}
	logger.Info("serving", "url", base, "agents", strings.Join(names, ", "))
	if !netaddr.Loopback(ln.Addr().String()) && o.Gateway.Authorize == nil && o.Gateway.Tokens == nil {
		logger.Warn("the HTTP API listens beyond loopback without authentication: any client that reaches " + ln.Addr().String() +
			" can read and push to every session of every agent. Keep it on a private network or behind a proxy that authenticates (docs/security.md)")
	}
	for _, name := range names {
		logger.Info("chat with " + name + " from a terminal, in the A2 repository: go run ./cmd/node chat --url " + base + " --agent " + name)
	}
	if o.Ready != nil {
		o.Ready(base)
	}

	select {
	case err := <-served:
		return fmt.Errorf("the HTTP server stopped: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down: finishing requests in flight")
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if node != nil {
		// A member hands its sessions over first; its HTTP requests in
		// flight then finish through the cluster, before it leaves.
		node.Drain(sctx)
	}
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("requests still running at the shutdown deadline were cut", "err", err)
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("the HTTP server stopped: %w", err)
	}
	return nil
}

// installTelemetry sets up what the OTEL_* variables (and MetricsAddr)
// ask for; the SDK's own failures (an exporter that cannot reach its
// collector) become the server's warnings.
func installTelemetry(ctx context.Context, o Options, getenv func(string) string, ln net.Listener, logger *slog.Logger) (*telemetry.Providers, error) {
	tcfg, err := telemetry.FromEnv(getenv)
	if err != nil {
		return nil, err
	}
	tcfg.Prometheus = tcfg.Prometheus || o.MetricsAddr != ""
	tcfg.InstanceID = ln.Addr().String()
	if o.Cluster != nil {
		tcfg.InstanceID = o.Cluster.Role + "@" + o.Cluster.Bind
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { logger.Warn("telemetry", "err", err) }))
	return telemetry.Install(ctx, tcfg)
}

// openStore opens the store o names: o.Store as it is, PostgreSQL at
// o.StoreURL, else Pebble in o.Data. closeStore closes what it opened.
func openStore(ctx context.Context, o Options, getenv func(string) string, logger *slog.Logger) (store persistence.Store, closeStore func() error, err error) {
	if o.Store != nil {
		return o.Store, func() error { return nil }, nil
	}
	if o.StoreURL != "" {
		u, err := url.Parse(o.StoreURL)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return nil, nil, errors.New("the store URL (--store, A2_STORE) must be a postgres:// URL")
		}
		var opts pgstore.Options
		if o.Cluster.role() == cluster.RoleMember {
			// A member shares the database with the cluster's other
			// members: one group in flight each keeps the members' groups
			// larger, and the database's transactions fewer, than a
			// single node's two (docs/cluster.md, "Group commit in a
			// cluster").
			opts.Committers = 1
		}
		s, err := pgstore.Open(ctx, o.StoreURL, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("cannot open the store in %s: %w", u.Redacted(), err)
		}
		return s, s.Close, nil
	}
	dir := cmp.Or(o.Data, getenv("A2_DATA"), "./data")
	s, err := pebblestore.Open(dir, pebblestore.Options{Logger: pebblestore.SlogLogger(logger)})
	if errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EAGAIN) {
		// Pebble's lock: "resource temporarily unavailable" says nothing
		// to a person.
		return nil, nil, fmt.Errorf("another node is using the data directory %s (its lock is held): stop it, or give this one another directory (a node's --data or A2_DATA; a program's a2.Options.Data)", dir)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cannot open the store in %s: %w", dir, err)
	}
	return s, s.Close, nil
}

// role is the cluster role, "" for a single node.
func (c *ClusterOptions) role() string {
	if c == nil {
		return ""
	}
	return c.Role
}

// check validates c; shared says whether the store is a shared one.
func (c *ClusterOptions) check(shared bool) error {
	if c == nil {
		return nil
	}
	if c.Role != cluster.RoleMember && c.Role != cluster.RoleGateway {
		return fmt.Errorf("a2.Serve: the cluster role must be %q or %q, not %q", cluster.RoleMember, cluster.RoleGateway, c.Role)
	}
	if c.Name == "" {
		return errors.New("a2.Serve: a cluster node needs the cluster's name")
	}
	if c.Role == cluster.RoleMember && !shared && !c.AllowLocalStore {
		return errors.New("a2.Serve: a cluster member needs the cluster's shared store (a postgres:// store URL, the same for every member), or AllowLocalStore")
	}
	if n := countSet(c.CAFile, c.CertFile, c.CertKeyFile); n != 0 && n != 3 {
		return errors.New("a2.Serve: mutual TLS between nodes needs all three of the cluster's CA, this node's certificate and its key")
	}
	if addr := c.Unprotected(); addr != "" {
		return fmt.Errorf("a2.Serve: this node's gossip address (%s) is not a loopback one, and the cluster has no key or no certificates: "+
			"any process that reaches its ports could join the cluster and read every session. Give it the cluster key file and its certificates "+
			"(`node certs` makes a development set; docs/security.md), or accept the risk explicitly with the insecure option", addr)
	}
	return nil
}

// Unprotected is the address (Bind, or Advertise) of a node that would
// listen beyond loopback without the cluster's key or its certificates
// and without Insecure: such a node must not start. "" when it may.
func (c *ClusterOptions) Unprotected() string {
	if c == nil || c.Insecure || (c.KeyFile != "" && c.CAFile != "") {
		return ""
	}
	for _, addr := range []string{c.Bind, c.Advertise} {
		if addr != "" && !netaddr.Loopback(addr) {
			return addr
		}
	}
	return ""
}

func countSet(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

// newClusterNode prepares the process's cluster side: a member names its
// store's identity, which the cluster compares at join.
func newClusterNode(ctx context.Context, o Options, store persistence.Store, agents []*actors.Agent, logger *slog.Logger) (*cluster.Node, error) {
	c := o.Cluster
	ccfg := cluster.Config{Name: c.Name, Role: c.Role, Bind: c.Bind, Advertise: c.Advertise, Join: c.Join,
		Agents: agents, Logger: logger, LeaseTTL: c.LeaseTTL}
	if c.KeyFile != "" {
		keys, err := cluster.ReadKeyFile(c.KeyFile)
		if err != nil {
			return nil, err
		}
		ccfg.Keys = keys
	}
	if c.CAFile != "" {
		t, err := cluster.LoadTLS(c.CAFile, c.CertFile, c.CertKeyFile)
		if err != nil {
			return nil, err
		}
		ccfg.TLS = t
	}
	switch {
	case ccfg.Keys == nil && ccfg.TLS == nil && c.Insecure:
		logger.Warn("INSECURE: this cluster node runs without a gossip key and without certificates (the insecure option): " +
			"any process that reaches its gossip or actor port can join the cluster, read every session and send its nodes messages (docs/security.md)")
	case ccfg.Keys == nil && c.Insecure:
		logger.Warn("INSECURE: this cluster node runs without a gossip key (the insecure option): any process that reaches its gossip port can join the membership (docs/security.md)")
	case ccfg.TLS == nil && c.Insecure:
		logger.Warn("INSECURE: this cluster node runs without certificates (the insecure option): any process that reaches its actor port can send its actors messages (docs/security.md)")
	}
	if c.Role == cluster.RoleMember {
		if o.StoreURL == "" && o.Store == nil {
			logger.Warn("this member runs on its own embedded Pebble store: requests still route by session ID, " +
				"but the sessions placed on a member that is lost wait until it returns, and a join or leave moves sessions to members that cannot read their logs")
		} else {
			id, err := cluster.StoreIdentity(ctx, store)
			if err != nil {
				return nil, err
			}
			ccfg.StoreID = id
		}
	}
	return cluster.New(ccfg)
}

// runtimeLevel is the level of the runtime's and protoactor's logs: their
// warnings and errors at the default level (their lifecycle lines are not
// an operator's business), everything at debug.
func runtimeLevel(server slog.Level) slog.Level {
	if server < slog.LevelInfo || server > slog.LevelWarn {
		return server
	}
	return slog.LevelWarn
}

// LoadHTTPSCertificate is a TLS configuration for Options.TLS from a
// certificate (chain) and its private key, PEM files.
func LoadHTTPSCertificate(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("the HTTPS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
}
