// The side listeners of a server: the Prometheus scrape endpoint and Go's
// profiler, each on an address of its own beside the HTTP API.

package a2

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// serveMetrics serves the Prometheus scrape endpoint (GET /metrics) on
// addr until the returned stop is called.
func serveMetrics(addr string, h http.Handler, logger *slog.Logger) (stop func(), err error) {
	if h == nil {
		return nil, errors.New("the metrics address: no Prometheus exporter was set up")
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	return serveSide("the metrics address (--metrics-addr, MetricsAddr)", "the metrics endpoint", addr, mux, 0, logger)
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
	return serveSide("the profiler address (--pprof-addr, PprofAddr)", "the profiler endpoint", addr, mux, 5*time.Minute, logger)
}

// serveSide serves h on addr, a listener of its own beside the node's API,
// until the returned stop is called; writeTimeout 0 is none.
func serveSide(name, what, addr string, h http.Handler, writeTimeout time.Duration, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot listen on %s: %w", name, addr, err)
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
