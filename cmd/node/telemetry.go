package main

import (
	"strings"

	"github.com/a2-runtime/a2/telemetry"
)

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
