// Command node runs an A2 node: the sessions of the default agent
// ("assistant") in an embedded Pebble store, served over the HTTP API
// (docs/http.md).
//
//	go run ./cmd/node                 # serve on 127.0.0.1:8080, data in ./data
//	go run ./cmd/node chat            # chat with it from the terminal
//	go run ./cmd/node demo            # the session core alone, in-process
//
// With no provider key in the environment the agent answers with the demo
// model, offline. Flags (and their environment variables): --addr
// (A2_ADDR), --data (A2_DATA), --store (A2_STORE: a postgres:// URL for a
// shared PostgreSQL store instead of Pebble in --data), --admin-token (A2_ADMIN_TOKEN), --model
// (A2_MODEL), --script (A2_SCRIPT, test mode: the script model of
// docs/testing.md and the gate route), --demo-delay (A2_DEMO_DELAY),
// --catalog (A2_CATALOG).
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/a2-runtime/a2"
	"github.com/a2-runtime/a2/internal/gctune"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/clients/assets"
	"github.com/a2-runtime/a2/cluster"
	agentsfile "github.com/a2-runtime/a2/config"
	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/catalog"
	"github.com/a2-runtime/a2/harness/demo"
	"github.com/a2-runtime/a2/harness/pi"
	"github.com/a2-runtime/a2/harness/providers"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/telemetry"
	"github.com/a2-runtime/a2/tools"
	"github.com/a2-runtime/a2/tools/demotools"
)

// defaultAgent is the name of the agent a node serves.
const defaultAgent = "assistant"

// instructions are the default agent's system prompt.
const instructions = "You are a helpful assistant running on A2, a runtime for durable AI agent sessions. " +
	"Answer briefly. Use the current_time tool for questions about the time or date and the calculator tool for arithmetic."

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal starts a graceful shutdown; restoring the default
	// handling lets a second one end the process at once.
	go func() {
		<-ctx.Done()
		stop()
	}()
	// A larger heap goal under a memory limit, unless GOGC / GOMEMLIMIT
	// say otherwise (internal/gctune, docs/http.md "The node").
	nodeGC, _ = gctune.ForNode()
	if err := runCommand(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		os.Exit(1)
	}
}

// nodeGC is what main set of the collector's settings, shown at start.
var nodeGC gctune.Settings

// runCommand runs the subcommand named by args: serve (the default), chat,
// demo or certs.
func runCommand(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd := ""
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "", "serve":
		cfg, err := parseServeFlags(args, getenv, stderr)
		if err != nil {
			return err
		}
		cfg.logger = slog.New(telemetry.LogHandler(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel})))
		ln, err := net.Listen("tcp", cfg.addr)
		if err != nil {
			return fmt.Errorf("cannot listen on %s: %w (another node running? choose another with --addr)", cfg.addr, err)
		}
		return serve(ctx, cfg, ln, stdout)
	case "chat":
		return runChat(ctx, args, getenv, stdin, stdout, stderr)
	case "certs":
		return runCerts(args, stdout, stderr)
	case "demo":
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		fs.SetOutput(stderr)
		quiet := fs.Bool("quiet", false, "print nothing; exit non-zero if the demonstration fails")
		if err := fs.Parse(args); err != nil {
			return err
		}
		return runDemonstration(*quiet)
	}
	return fmt.Errorf("unknown command %q: use serve (the default), chat, demo or certs", cmd)
}

// config is the configuration of a serving node.
type config struct {
	addr       string
	data       string
	store      string // a postgres:// URL; empty means Pebble in data
	adminToken string
	model      string
	script     string
	agentsFile string // --config: agents from a file instead of the default agent
	// harness is the default agent's harness: "" (A2's own) or "pi" (Pi's
	// coding agent, harness/pi), whose sandboxes are below sandboxes
	// (bubblewrap, or plain directories with sandboxDirs, for tests) and
	// whose sidecar is installed in piSidecar.
	harness, sandboxes, piSidecar string
	sandboxDirs                   bool
	catalog                       string
	demoDelay                     time.Duration
	// stepTimeout bounds one model step (HarnessOptions.StepTimeout).
	stepTimeout time.Duration
	// passivateAfter stops a session idle this long (actors.Options).
	passivateAfter time.Duration
	getenv         func(string) string
	logger         *slog.Logger
	// heartbeat overrides the stream heartbeat interval (tests).
	heartbeat time.Duration
	// cluster is the cluster configuration (cluster.go); role "" or
	// "single" runs a single node, with no cluster code.
	cluster clusterFlags
	// logLevel is the node's log level (--log-level); metricsAddr serves
	// the Prometheus scrape endpoint when set (--metrics-addr).
	logLevel    slog.Level
	metricsAddr string
	// pprofAddr serves net/http/pprof when set (--pprof-addr).
	pprofAddr string
	// actorMetrics hands protoactor the meter provider (--actor-metrics).
	actorMetrics bool
	// telemetry describes what the node exports, for the banner.
	telemetry string
	// limits bound what one client can ask (--limit-*, --client-header);
	// maxSessionBytes a session's log (--max-session-bytes).
	limits          gateway.Limits
	maxSessionBytes int
	// tlsCert and tlsKey serve HTTPS; jwks, jwtIssuer and jwtAudience
	// admit only the holders of tokens (docs/security.md, "Users").
	tlsCert, tlsKey, jwks, jwtIssuer, jwtAudience string
}

// defaultMaxSessionBytes bounds a session's log when the operator sets
// nothing: far past any conversation, short of one client filling the
// store.
const defaultMaxSessionBytes = 1 << 30

// defaultStepTimeout bounds a model step when the operator sets nothing: a
// provider stream that stops sending without closing must not hold a turn
// forever.
const defaultStepTimeout = 10 * time.Minute

// defaultPassivateAfter is actors.Options.PassivateAfter's default.
const defaultPassivateAfter = 2 * time.Minute

// parseServeFlags reads the flags of serve; each defaults to its
// environment variable, then to the built-in default.
func parseServeFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	cfg := config{getenv: getenv}
	var limitErr error // an A2_LIMIT_* variable that is not a number
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.addr, "addr", env("A2_ADDR", "127.0.0.1:8080"), "address of the HTTP API (A2_ADDR)")
	fs.StringVar(&cfg.data, "data", env("A2_DATA", "./data"), "directory of the embedded Pebble store (A2_DATA)")
	fs.StringVar(&cfg.store, "store", env("A2_STORE", ""), "postgres://... URL of a shared PostgreSQL store; empty: the embedded Pebble store in --data (A2_STORE)")
	fs.StringVar(&cfg.adminToken, "admin-token", env("A2_ADMIN_TOKEN", ""), "bearer token of the admin route for trusted appends; empty disables it (A2_ADMIN_TOKEN)")
	fs.StringVar(&cfg.model, "model", env("A2_MODEL", ""), `model ID of the agent; "demo" is the offline demo model (A2_MODEL; default: from the provider keys set)`)
	fs.StringVar(&cfg.agentsFile, "config", env("A2_CONFIG", ""), "serve the agents of this YAML file instead of the default agent (A2_CONFIG; docs/agents.md)")
	fs.StringVar(&cfg.harness, "harness", env("A2_HARNESS", ""), "the default agent's harness: empty for A2's own, or pi for Pi's coding agent working in a bubblewrap sandbox per session (A2_HARNESS; docs/harness.md)")
	fs.StringVar(&cfg.sandboxes, "sandboxes", env("A2_SANDBOXES", ""), "with --harness pi: the directory of the sessions' sandboxes (A2_SANDBOXES; default: sandboxes beside --data)")
	fs.StringVar(&cfg.piSidecar, "pi-sidecar", env("A2_PI_SIDECAR", ""), "with --harness pi: the Pi sidecar's directory, installed with npm ci (A2_PI_SIDECAR; default: harness/pi/sidecar of this source tree)")
	fs.BoolVar(&cfg.sandboxDirs, "sandbox-dirs", false, "with --harness pi: plain directories instead of bubblewrap sandboxes: commands see the whole machine (tests only)")
	fs.StringVar(&cfg.script, "script", env("A2_SCRIPT", ""), "test mode: serve the script model of this JSON file and POST /v1/test/gates/{name} (A2_SCRIPT)")
	fs.StringVar(&cfg.catalog, "catalog", env("A2_CATALOG", catalog.DefaultURL), `models catalog (URL or JSON file) for the model limits that drive compaction, used with a real provider; "off" disables lookups (A2_CATALOG)`)
	delay, err := time.ParseDuration(env("A2_DEMO_DELAY", demo.DefaultWordDelay.String()))
	if err != nil {
		return cfg, fmt.Errorf("A2_DEMO_DELAY: %w", err)
	}
	fs.DurationVar(&cfg.demoDelay, "demo-delay", delay, "pause of the demo model before each word (A2_DEMO_DELAY)")
	stepTimeout, err := time.ParseDuration(env("A2_STEP_TIMEOUT", defaultStepTimeout.String()))
	if err != nil {
		return cfg, fmt.Errorf("A2_STEP_TIMEOUT: %w", err)
	}
	fs.DurationVar(&cfg.stepTimeout, "step-timeout", stepTimeout, "longest a model step may run before its generation fails; 0 is no limit (A2_STEP_TIMEOUT)")
	passivateAfter, err := time.ParseDuration(env("A2_PASSIVATE_AFTER", defaultPassivateAfter.String()))
	if err != nil {
		return cfg, fmt.Errorf("A2_PASSIVATE_AFTER: %w", err)
	}
	fs.DurationVar(&cfg.passivateAfter, "passivate-after", passivateAfter, "how long a session stays in memory once idle; it is activated again from the store at its next use (A2_PASSIVATE_AFTER)")
	fs.StringVar(&cfg.pprofAddr, "pprof-addr", env("A2_PPROF_ADDR", ""), "address of Go's profiler endpoints (net/http/pprof, GET /debug/pprof/...); empty: none. Bind it to loopback: a profile shows what the node runs (A2_PPROF_ADDR)")
	fs.StringVar(&cfg.metricsAddr, "metrics-addr", env("A2_METRICS_ADDR", ""), "address of a Prometheus scrape endpoint (GET /metrics); empty: none (A2_METRICS_ADDR; OTLP export is set with the OTEL_* variables, docs/telemetry.md)")
	fs.BoolVar(&cfg.actorMetrics, "actor-metrics", env("A2_ACTOR_METRICS", "") == "1" || strings.EqualFold(env("A2_ACTOR_METRICS", ""), "true"),
		"also export protoactor's own actor metrics (every actor message is measured: costly, docs/telemetry.md) when metrics are on (A2_ACTOR_METRICS)")
	intFlag := func(p *int, name, envName, usage string) {
		fs.Func(name, usage+" ("+envName+")", func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%q is not a whole number", v)
			}
			*p = n
			return nil
		})
		if v := getenv(envName); v != "" {
			if n, err := strconv.Atoi(v); err == nil {
				*p = n
			} else {
				limitErr = fmt.Errorf("%s=%q is not a whole number", envName, v)
			}
		}
	}
	intFlag(&cfg.limits.RequestsPerMinute, "limit-requests", "A2_LIMIT_REQUESTS", "requests a minute one client may make, beyond loopback (0: 1,200; negative: no limit; docs/security.md)")
	intFlag(&cfg.limits.SessionEventsPerMinute, "limit-session-events", "A2_LIMIT_SESSION_EVENTS", "events a minute the clients of one session may push (0: 600; negative: no limit)")
	intFlag(&cfg.limits.SessionBytesPerMinute, "limit-session-bytes", "A2_LIMIT_SESSION_BYTES", "bytes a minute the clients of one session may push, in their events' IDs, types, causes and payloads (0: 16 MiB; negative: no limit)")
	intFlag(&cfg.limits.StreamsPerClient, "limit-streams", "A2_LIMIT_STREAMS", "live streams one client may hold at once (0: 64; negative: no limit)")
	cfg.maxSessionBytes = defaultMaxSessionBytes
	intFlag(&cfg.maxSessionBytes, "max-session-bytes", "A2_MAX_SESSION_BYTES", "the most bytes a session's log may hold before clients' pushes to it are refused (413 QUOTA_EXCEEDED; the session's own work goes on); 0: no bound (default 1 GiB)")
	fs.StringVar(&cfg.tlsCert, "tls-cert", env("A2_TLS_CERT", ""), "PEM file of the HTTPS certificate (chain): the API is served over TLS (A2_TLS_CERT; with --tls-key)")
	fs.StringVar(&cfg.tlsKey, "tls-key", env("A2_TLS_KEY", ""), "PEM file of the private key of --tls-cert (A2_TLS_KEY)")
	fs.StringVar(&cfg.jwks, "jwks", env("A2_JWKS", ""), "JWKS file of the keys users' tokens are signed with: the API admits only bearers of valid tokens, to the agents and sessions they name (A2_JWKS; docs/security.md)")
	fs.StringVar(&cfg.jwtIssuer, "jwt-issuer", env("A2_JWT_ISSUER", ""), "the iss a token must have; without --jwks, the OpenID issuer whose published keys (its discovery document's jwks_uri, kept fresh) sign the tokens (A2_JWT_ISSUER)")
	fs.StringVar(&cfg.jwtAudience, "jwt-audience", env("A2_JWT_AUDIENCE", ""), "the aud a token must have, required with --jwks: a token made for another service is refused (A2_JWT_AUDIENCE)")
	fs.StringVar(&cfg.limits.ClientHeader, "client-header", env("A2_CLIENT_HEADER", ""), "request header naming the client for the limits (a proxy's X-Forwarded-For, say); empty: the client's IP address, and loopback clients are not limited (A2_CLIENT_HEADER)")
	level := env("A2_LOG_LEVEL", "info")
	fs.StringVar(&level, "log-level", level, "log level: debug, info, warn or error (A2_LOG_LEVEL)")
	cfg.cluster.register(fs, env)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if limitErr != nil {
		return cfg, limitErr
	}
	if (cfg.tlsCert == "") != (cfg.tlsKey == "") {
		return cfg, errors.New("HTTPS needs both --tls-cert and --tls-key")
	}
	if (cfg.jwks != "" || cfg.jwtIssuer != "") && cfg.jwtAudience == "" {
		return cfg, errors.New("checking users' tokens (--jwks or --jwt-issuer) needs --jwt-audience: the aud your identity provider puts in the tokens it makes for this node (a token made for another service must not open it)")
	}
	if cfg.jwks == "" && cfg.jwtIssuer == "" && cfg.jwtAudience != "" {
		return cfg, errors.New("--jwt-audience checks tokens, which --jwks (a JWKS file) or --jwt-issuer (an OpenID issuer's published keys) turns on")
	}
	if err := cfg.logLevel.UnmarshalText([]byte(level)); err != nil {
		return cfg, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := cfg.cluster.check(cfg.store != ""); err != nil {
		return cfg, err
	}
	if cfg.stepTimeout < 0 {
		return cfg, fmt.Errorf("--step-timeout must not be negative, not %s", cfg.stepTimeout)
	}
	if cfg.passivateAfter <= 0 {
		return cfg, fmt.Errorf("--passivate-after must be positive, not %s", cfg.passivateAfter)
	}
	switch cfg.harness {
	case "":
		if cfg.agentsFile == "" && (cfg.sandboxes != "" || cfg.piSidecar != "" || cfg.sandboxDirs) {
			return cfg, errors.New("--sandboxes, --pi-sidecar and --sandbox-dirs go with --harness pi, or with --config for its agents of harness: pi")
		}
	case "pi":
		if cfg.agentsFile != "" {
			return cfg, errors.New("--harness pi makes the default agent a Pi coding agent; it does not apply to the agents of --config (give an agent harness: pi there)")
		}
	default:
		return cfg, fmt.Errorf("--harness %q: use pi, or leave it empty for A2's own", cfg.harness)
	}
	return cfg, nil
}

// serve runs the node on ln until ctx ends, through a2.Serve (which owns
// the wiring and the shutdown: the listener stops accepting, live streams
// end, requests in flight finish, the runtime stops its sessions after
// their writes in flight, and the store closes).
func serve(ctx context.Context, cfg config, ln net.Listener, out io.Writer) (err error) {
	defer ln.Close()
	logger := cfg.logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var sc *script.Script
	if cfg.script != "" {
		if sc, err = script.Load(cfg.script); err != nil {
			return err
		}
	}
	getenv := cfg.getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	p := providers.FromEnv(getenv, cfg.model, sc, cfg.demoDelay)
	tcfg, err := telemetry.FromEnv(getenv)
	if err != nil {
		return err
	}
	cfg.telemetry = describeTelemetry(tcfg, cfg.metricsAddr)

	var tokens *gateway.Tokens
	switch {
	case cfg.jwks != "":
		keys, err := gateway.LoadJWKS(cfg.jwks)
		if err != nil {
			return err
		}
		tokens = &gateway.Tokens{Keys: keys, Issuer: cfg.jwtIssuer, Audience: cfg.jwtAudience}
	case cfg.jwtIssuer != "":
		// The issuer's published keys, fetched now and kept fresh.
		keys := &gateway.IssuerKeys{Issuer: cfg.jwtIssuer, Logger: logger}
		if err := keys.Start(ctx); err != nil {
			return err
		}
		defer keys.Stop()
		tokens = &gateway.Tokens{KeysFrom: keys, Issuer: cfg.jwtIssuer, Audience: cfg.jwtAudience}
	}
	var tlsConfig *tls.Config
	if cfg.tlsCert != "" {
		if tlsConfig, err = a2.LoadHTTPSCertificate(cfg.tlsCert, cfg.tlsKey); err != nil {
			return err
		}
	}
	agents, stop, err := nodeAgents(ctx, cfg, p, sc != nil, getenv, logger)
	if err != nil {
		return err
	}
	defer stop()
	names := make([]string, len(agents))
	for i, a := range agents {
		names[i] = a.Name()
	}
	o := a2.Options{
		Listener:     ln,
		Data:         cfg.data,
		StoreURL:     cfg.store,
		Logger:       logger,
		LogLevel:     cfg.logLevel,
		Gateway:      gateway.Options{AdminToken: cfg.adminToken, HeartbeatInterval: cfg.heartbeat, Agents: names, Limits: cfg.limits, Tokens: tokens},
		TLS:          tlsConfig,
		MetricsAddr:  cfg.metricsAddr,
		ActorMetrics: cfg.actorMetrics,
		PprofAddr:    cfg.pprofAddr,
		Getenv:       getenv,
		Ready:        func(base string) { printBanner(out, base, cfg, p, names) },
	}
	if cfg.maxSessionBytes > 0 {
		o.Runtime.MaxSessionBytes = int64(cfg.maxSessionBytes)
	}
	o.Runtime.PassivateAfter = cfg.passivateAfter
	// The fold's WebAssembly build for browser clients, made at its first
	// request (docs/clients.md).
	o.Gateway.Assets = assets.New(assets.Options{Logger: logger})
	if p.Script() != nil && cfg.cluster.role != cluster.RoleGateway {
		o.Gateway.Gates = p.Script()
	}
	if p.Real() && cfg.catalog != "" && cfg.catalog != "off" {
		o.Runtime.Catalog = actors.CatalogCache{Source: cfg.catalog, Cache: &catalog.Cache{}}
	}
	if c := cfg.cluster; c.role == cluster.RoleMember || c.role == cluster.RoleGateway {
		o.Cluster = &a2.ClusterOptions{Name: c.name, Role: c.role, Bind: c.bind, Advertise: c.advertise, Join: c.joinList(),
			LeaseTTL: c.leaseTTL, AllowLocalStore: c.allowLocal,
			KeyFile: c.keyFile, CAFile: c.ca, CertFile: c.cert, CertKeyFile: c.certKey, Insecure: c.insecure}
	}
	return a2.Serve(ctx, o, agents...)
}

// nodeAgents are the agents a node serves: those of --config, else the
// default agent.
// The agents of a file come with a stop that closes their MCP servers.
func nodeAgents(ctx context.Context, cfg config, p *providers.Set, testMode bool, getenv func(string) string, logger *slog.Logger) ([]*actors.Agent, func(), error) {
	if cfg.agentsFile != "" {
		f, err := agentsfile.Load(cfg.agentsFile)
		if err != nil {
			return nil, nil, err
		}
		// A gateway routes to the members, which run the tools: it
		// connects no MCP server and starts no Pi sidecar.
		var piHarness *pi.Harness
		agents, stop, err := f.Build(ctx, p.For, agentsfile.Defaults{Model: p.Model(), StepTimeout: cfg.stepTimeout, Getenv: getenv, Logger: logger,
			WithoutTools: cfg.cluster.role == cluster.RoleGateway,
			Pi: func(ctx context.Context) (agentsfile.External, error) {
				h, err := startPi(ctx, cfg, logger)
				if err != nil {
					return nil, err
				}
				piHarness = h
				return h, nil
			}}, nodeTools(testMode))
		if piHarness != nil {
			if err != nil {
				_ = piHarness.Close()
			} else {
				stop = func(stop func()) func() { return func() { stop(); _ = piHarness.Close() } }(stop)
			}
		}
		return agents, stop, err
	}
	if cfg.harness == "pi" && cfg.cluster.role != cluster.RoleGateway {
		return piAgent(ctx, cfg, p, logger)
	}
	agent, err := actors.NewAgent(actors.AgentOptions{
		Name:         defaultAgent,
		Model:        harness.ModelID(p.Model()),
		Models:       p.For,
		Instructions: harness.Instructions(instructions),
		Tools:        nodeTools(testMode),
		Harness:      actors.HarnessOptions{StepTimeout: cfg.stepTimeout},
	})
	if err != nil {
		return nil, nil, err
	}
	return []*actors.Agent{agent}, func() {}, nil
}

// printBanner tells a newcomer where the node is and what to do next.
func printBanner(out io.Writer, base string, cfg config, p *providers.Set, agents []string) {
	admin := "disabled (set --admin-token or A2_ADMIN_TOKEN to enable trusted appends)"
	if cfg.adminToken != "" {
		admin = "enabled at /v1/admin/..."
	}
	users := "anyone who reaches it (docs/security.md: --jwks admits only your users' tokens)"
	switch {
	case cfg.jwks != "":
		users = fmt.Sprintf("bearers of tokens signed by a key of %s, for audience %q (docs/security.md)", cfg.jwks, cfg.jwtAudience)
	case cfg.jwtIssuer != "":
		users = fmt.Sprintf("bearers of tokens of %s, for audience %q (docs/security.md)", cfg.jwtIssuer, cfg.jwtAudience)
	}
	where := cfg.data
	if cfg.store != "" {
		where = "PostgreSQL store"
		if u, err := url.Parse(cfg.store); err == nil {
			where = u.Redacted()
		}
	}
	memory := "the collector as GOGC and GOMEMLIMIT set it (Go's defaults where unset)"
	if nodeGC != (gctune.Settings{}) {
		memory = gcDescription(nodeGC)
	}
	sessions := base + "/v1/agents/" + agents[0] + "/sessions/hello"
	if cfg.cluster.role == cluster.RoleMember || cfg.cluster.role == cluster.RoleGateway {
		where = cfg.cluster.describe(where)
	}
	model := fmt.Sprintf("%s (%s)", p.Model(), p.Name())
	if cfg.cluster.role == cluster.RoleGateway {
		// A gateway routes requests; the members run the model steps,
		// each with the model its own environment configures.
		model = "none here: the members run the agent's model steps, with the model their environment configures"
	}
	if cfg.harness == "pi" && cfg.cluster.role != cluster.RoleGateway {
		model += "\n  harness: pi (Pi's coding agent; each session's sandbox below " + cmp.Or(cfg.sandboxes, filepath.Join(filepath.Dir(filepath.Clean(cfg.data)), "sandboxes")) + ")"
	}
	fmt.Fprintf(out, `A2 node serving %s
  agents: %s
  model:  %s
  data:   %s
  admin:  %s
  users:  %s
  memory: %s
  telemetry: %s

Open the playground in a browser: %s/
(open or start a session: send, steer, queue, pause, stop, approve, and its live log)

Chat with it from another terminal:
  go run ./cmd/node chat --url %s

Or with curl: send a message (a fresh ID each time) and watch its turn
until the session is idle, in one request
  id=msg-$(date +%%s%%N)
  curl -sN '%s/events?stream=1' -H 'Content-Type: application/json' \
    -d '{"events":[{"id":"'$id'","type":"ai.control.requested","payload":{"action":"send","message":{"id":"'$id'","role":"user","parts":[{"type":"text","text":"What time is it?"}]}}}]}'

The API is documented in docs/http.md. Ctrl-C stops the node.
`, base, strings.Join(agents, ", "), model, where, admin, users, memory, cfg.telemetry, base, base, sessions)
}

// nodeTools are the agent's tools: the demo tools, and in test mode
// (--script) also confirm_action, which asks for the user's approval before
// it runs and echoes its input, so that scripted turns can exercise
// approvals (docs/testing.md).
func nodeTools(testMode bool) []tools.Tool {
	ts := demotools.Tools()
	if testMode {
		ts = append(ts, tools.Tool{
			Name:          "confirm_action",
			Description:   "Does an action once the user approves it.",
			InputSchema:   json.RawMessage(`{"type":"object","properties":{"action":{"type":"string"}},"required":["action"]}`),
			NeedsApproval: func(json.RawMessage) bool { return true },
			Execute: func(_ context.Context, input json.RawMessage) (json.RawMessage, error) {
				return json.Marshal(map[string]json.RawMessage{"done": input})
			},
		})
	}
	return ts
}

// gcDescription tells what the node set of the collector's settings.
func gcDescription(s gctune.Settings) string {
	var parts []string
	if s.Percent != 0 {
		goal := fmt.Sprintf("heap goal %d%%", s.Percent)
		if s.Headroom > 0 {
			goal += fmt.Sprintf(" and at most %d MiB past the live heap", s.Headroom>>20)
		}
		parts = append(parts, goal)
	}
	if s.Limit > 0 {
		parts = append(parts, fmt.Sprintf("memory limit %.1f GiB", float64(s.Limit)/(1<<30)))
	}
	return strings.Join(parts, ", ") + " (GOGC / GOMEMLIMIT to choose otherwise; docs/http.md)"
}
