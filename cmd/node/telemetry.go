package main

import (
	"strconv"
	"strings"

	"github.com/a2-runtime/a2/telemetry"
)

// describeTelemetry tells what the node exports.
func describeTelemetry(c telemetry.Config, metricsAddr string) string {
	var parts []string
	if c.Traces != "" {
		sampled := "sampled as OTEL_TRACES_SAMPLER says"
		if c.SampleRatio > 0 {
			sampled = "one in " + strconv.Itoa(int(1/c.SampleRatio+0.5)) + " of those it starts and all a caller's traceparent samples, OTEL_TRACES_SAMPLER to change"
		}
		parts = append(parts, "traces to OTLP ("+c.TracesProtocol+"; "+sampled+")")
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
