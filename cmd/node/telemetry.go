package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: cannot listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("the metrics endpoint stopped", "err", err)
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
