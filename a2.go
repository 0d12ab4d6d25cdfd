// Package a2 is the short way to run agents of your own: define them with
// packages actors (the agent), tools (its tools) and protocol (its
// contract: application events and reducer), and Serve them over HTTP on
// the embedded store, as the node serves its own. docs/embedding.md walks
// through an example (examples/helpdesk).
package a2

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/demo"
	"github.com/a2-runtime/a2/harness/providers"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/internal/levelfilter"
	"github.com/a2-runtime/a2/persistence"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/telemetry"
	"github.com/a2-runtime/a2/tools"
)

// The pieces of an agent, reachable from this package: each is the type or
// function of the package that defines it (and documents it), so that a
// program defining and serving agents needs only a2, and protocol for a
// contract of its own.
type (
	// AgentOptions define an agent: its name, model, instructions, tools,
	// contract and handlers (actors.AgentOptions).
	AgentOptions = actors.AgentOptions
	// Agent is an agent to serve (actors.Agent).
	Agent = actors.Agent
	// Tool is a tool an agent's model can call (tools.Tool).
	Tool = tools.Tool
	// ToolCall is what a tool's Execute learns of its call: the call and
	// its work event, the attempt, the session, and how to append to it
	// (tools.Context).
	ToolCall = tools.Context
)

// Instructions is an agent's system prompt, the same for every step
// (harness.Instructions).
func Instructions(s string) harness.InstructionsOption { return harness.Instructions(s) }

// ToolCallOf returns the call a tool's Execute runs for, from its context
// (tools.FromContext).
func ToolCallOf(ctx context.Context) (*ToolCall, error) { return tools.FromContext(ctx) }

// Options configure Serve. The zero value serves on 127.0.0.1:8080 with
// the store in ./data (or A2_ADDR and A2_DATA).
type Options struct {
	// Addr is the HTTP address (default A2_ADDR, else 127.0.0.1:8080).
	Addr string
	// Listener, when set, is served instead of listening on Addr.
	Listener net.Listener
	// Data is the embedded Pebble store's directory (default A2_DATA, else
	// ./data). Store, when set, is used instead (PostgreSQL, say).
	Data  string
	Store persistence.Store
	// Logger receives the server's logs and the runtime's warnings and
	// errors, as a node's log does (default: text on standard error, at
	// info). Runtime.Logger, when set, receives the runtime's instead.
	Logger *slog.Logger
	// Gateway and Runtime are the HTTP API's and the runtime's options.
	Gateway gateway.Options
	Runtime actors.Options
	// Ready, when set, is called with the base URL once requests are
	// served.
	Ready func(url string)
}

// Models returns the model providers the environment configures, as the
// node chooses them: AI_GATEWAY_API_KEY, OPENAI_API_KEY or OPENAI_BASE_URL,
// ANTHROPIC_API_KEY, else the offline demo model; A2_MODEL names the
// model. A2_SCRIPT names a script model's file (test mode, docs/testing.md)
// that replaces them all. Use it as an agent's Model and Models:
//
//	models, _ := a2.Models()
//	actors.AgentOptions{Model: harness.ModelID(models.Model()), Models: models.For, ...}
func Models() (*providers.Set, error) {
	var sc *script.Script
	if f := os.Getenv("A2_SCRIPT"); f != "" {
		var err error
		if sc, err = script.Load(f); err != nil {
			return nil, err
		}
	}
	return providers.FromEnv(os.Getenv, os.Getenv("A2_MODEL"), sc, demo.DefaultWordDelay), nil
}

// NewAgent is actors.NewAgent with the models the environment configures
// (Models) when o names none: its Model, unless o.Model is set, and its
// providers.
func NewAgent(o actors.AgentOptions) (*actors.Agent, error) {
	if o.Models == nil {
		models, err := Models()
		if err != nil {
			return nil, err
		}
		o.Models = models.For
		if o.Model.IsZero() {
			o.Model = harness.ModelID(models.Model())
		}
	}
	return actors.NewAgent(o)
}

// Serve serves agents over HTTP (docs/http.md) until ctx ends, then shuts
// down gracefully: live streams end, requests in flight finish (pushes are
// answered once durable), the sessions stop and the store closes.
// Telemetry is exported when the OTEL_* variables say so
// (docs/telemetry.md).
func Serve(ctx context.Context, o Options, agents ...*actors.Agent) (err error) {
	if len(agents) == 0 {
		return errors.New("a2.Serve: no agent to serve")
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(telemetry.LogHandler(slog.NewTextHandler(os.Stderr, nil)))
	}
	tcfg, err := telemetry.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	tel, err := telemetry.Install(ctx, tcfg)
	if err != nil {
		return err
	}
	defer func() {
		// Bounded, as the node's: an exporter that cannot reach its
		// collector does not hold the program's exit.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			logger.Warn("telemetry did not flush", "err", err)
		}
	}()
	store := o.Store
	if store == nil {
		dir := firstOf(o.Data, os.Getenv("A2_DATA"), "./data")
		pb, err := pebblestore.Open(dir, pebblestore.Options{Logger: pebblestore.SlogLogger(logger)})
		if errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EAGAIN) {
			// Pebble's lock: "resource temporarily unavailable" says
			// nothing to a person.
			return fmt.Errorf("another program (a node?) is using the data directory %s (its lock is held): stop it, or give this one another directory (A2_DATA, or a2.Options.Data)", dir)
		}
		if err != nil {
			return fmt.Errorf("cannot open the store in %s: %w", dir, err)
		}
		defer func() {
			if cerr := pb.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
		store = pb
	}
	ropts := o.Runtime
	if ropts.Logger == nil {
		// The runtime's warnings and errors (an activation that fails, a
		// write the store refused) are the server's, as on a node; its
		// lower levels (protoactor's lifecycle) are not.
		ropts.Logger = levelfilter.New(logger, slog.LevelWarn)
	}
	rt, err := actors.New(store, agents, ropts)
	if err != nil {
		return err
	}
	defer rt.Close()
	gopts := o.Gateway
	if gopts.Logger == nil {
		gopts.Logger = logger
	}
	gw := gateway.New(gateway.RuntimeRouter{Runtime: rt}, gopts)
	ln := o.Listener
	if ln == nil {
		addr := firstOf(o.Addr, os.Getenv("A2_ADDR"), "127.0.0.1:8080")
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("cannot listen on %s: %w", addr, err)
		}
	}
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	srv.RegisterOnShutdown(gw.Close)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	names := make([]string, len(agents))
	for i, a := range agents {
		names[i] = a.Name()
	}
	logger.Info("serving", "url", url, "agents", strings.Join(names, ", "))
	for _, name := range names {
		logger.Info("chat with " + name + " from a terminal, in the A2 repository: go run ./cmd/node chat --url " + url + " --agent " + name)
	}
	if o.Ready != nil {
		o.Ready(url)
	}
	select {
	case err := <-served:
		return fmt.Errorf("the HTTP server stopped: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("requests still running at the shutdown deadline were cut", "err", err)
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("the HTTP server stopped: %w", err)
	}
	return nil
}

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
