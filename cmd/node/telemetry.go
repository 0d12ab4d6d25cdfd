package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/a2-runtime/a2/telemetry"
)

// serveMetrics serves the Prometheus scrape endpoint (GET /metrics) on
// addr until the returned stop is called.
func serveMetrics(addr string, h http.Handler, logger *slog.Logger) (stop func(), err error) {
	if h == nil {
		return nil, errors.New("--metrics-addr: no Prometheus exporter was set up")
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	return serveSide("--metrics-addr", "the metrics endpoint", addr, mux, 0, logger)
}

// servePprof serves Go's profiler (net/http/pprof) on addr until the
// returned stop is called: GET /debug/pprof/ lists the profiles, and
// /debug/pprof/profile?seconds=30 takes a CPU profile (docs/benchmarks.md).
func servePprof(addr string, logger *slog.Logger) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	// A CPU profile or trace takes its seconds to answer.
	return serveSide("--pprof-addr", "the profiler endpoint", addr, mux, 5*time.Minute, logger)
}

// serveSide serves h on addr, a listener of its own beside the node's API,
// until the returned stop is called; writeTimeout 0 is none.
func serveSide(flag, what, addr string, h http.Handler, writeTimeout time.Duration, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot listen on %s: %w", flag, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: writeTimeout}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn(what+" stopped", "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// runtimeLevel is the level of the runtime's and protoactor's logs: their
// warnings and errors at the default level (their lifecycle lines are not
// an operator's business), everything at debug.
func runtimeLevel(node slog.Level) slog.Level {
	if node < slog.LevelInfo || node > slog.LevelWarn {
		return node
	}
	return slog.LevelWarn
}

// describeTelemetry tells what the node exports.
func describeTelemetry(c telemetry.Config, metricsAddr string) string {
	var parts []string
	if c.Traces != "" {
		parts = append(parts, "traces to OTLP ("+c.TracesProtocol+")")
	}
	if c.Metrics != "" {
		parts = append(parts, "metrics to OTLP ("+c.MetricsProtocol+")")
	}
	if metricsAddr != "" {
		parts = append(parts, "metrics at http://"+metricsAddr+"/metrics")
	}
	if len(parts) == 0 {
		return "off (the OTEL_* variables or --metrics-addr turn it on; docs/telemetry.md)"
	}
	return strings.Join(parts, ", ")
}
