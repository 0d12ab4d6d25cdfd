package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// Config says what to export. The zero value exports nothing; FromEnv
// reads the standard OTEL_* variables into one.
type Config struct {
	// Traces is "otlp" or "" (none).
	Traces string
	// TracesProtocol is "grpc" or "http/protobuf" (the default).
	TracesProtocol string
	// Metrics is "otlp" or "" (none); Prometheus adds a scrape handler
	// either way.
	Metrics         string
	MetricsProtocol string
	Prometheus      bool
	// SampleRatio, when above 0, is the share of the traces this process
	// starts that it records, parent-based: a span whose caller's
	// traceparent says sampled (or not) follows the caller. FromEnv sets
	// DefaultSampleRatio when traces are exported and OTEL_TRACES_SAMPLER
	// is unset; 0 leaves the sampler to OTEL_TRACES_SAMPLER (the SDK reads
	// it).
	SampleRatio float64
	// ServiceName and InstanceID describe the process (service.name,
	// service.instance.id); OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override them.
	ServiceName string
	InstanceID  string
}

// DefaultSampleRatio is the share of the traces a node starts that it
// records when OTEL_TRACES_SAMPLER is not set: one in ten, parent-based.
// Recording and exporting every trace costs a turn 17 to 19% of its CPU,
// one in ten under 10% (docs/telemetry.md, docs/benchmarks.md); a caller
// that sends a sampled traceparent gets its request traced whole, and
// OTEL_TRACES_SAMPLER=parentbased_always_on records every trace.
const DefaultSampleRatio = 0.1

// FromEnv reads the OpenTelemetry SDK's environment variables: telemetry
// is off unless OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER name otlp (or
// prometheus, for metrics), or an OTLP endpoint is set
// (OTEL_EXPORTER_OTLP_ENDPOINT or its per-signal form), and
// OTEL_SDK_DISABLED=true turns everything off. The exporters themselves
// read the endpoint, headers, timeout and TLS variables.
func FromEnv(getenv func(string) string) (Config, error) {
	var c Config
	if parseBool(getenv("OTEL_SDK_DISABLED")) {
		return c, nil
	}
	pick := func(signal string, allowed ...string) (string, error) {
		v := strings.ToLower(strings.TrimSpace(getenv("OTEL_" + signal + "_EXPORTER")))
		if v == "" {
			if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != "" {
				return "otlp", nil
			}
			return "", nil
		}
		for _, a := range append(allowed, "none") {
			if v == a {
				if v == "none" {
					return "", nil
				}
				return v, nil
			}
		}
		return "", fmt.Errorf("OTEL_%s_EXPORTER=%q: this node exports %s or none", signal, v, strings.Join(allowed, ", "))
	}
	proto := func(signal string) (string, error) {
		v := getenv("OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL")
		if v == "" {
			v = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		switch v {
		case "", "http/protobuf":
			return "http/protobuf", nil
		case "grpc":
			return "grpc", nil
		}
		return "", fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: use grpc or http/protobuf", v)
	}
	var err error
	if c.Traces, err = pick("TRACES", "otlp"); err != nil {
		return c, err
	}
	if c.TracesProtocol, err = proto("TRACES"); err != nil {
		return c, err
	}
	if c.Traces != "" && strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")) == "" {
		c.SampleRatio = DefaultSampleRatio
	}
	if c.Metrics, err = pick("METRICS", "otlp", "prometheus"); err != nil {
		return c, err
	}
	if c.Metrics == "prometheus" {
		c.Metrics, c.Prometheus = "", true
	}
	if c.MetricsProtocol, err = proto("METRICS"); err != nil {
		return c, err
	}
	return c, nil
}

// Enabled reports whether c exports anything.
func (c Config) Enabled() bool { return c.Traces != "" || c.Metrics != "" || c.Prometheus }

// Providers are what Install set up.
type Providers struct {
	// Tracer and Meter are nil for a signal that is off.
	Tracer *sdktrace.TracerProvider
	Meter  *sdkmetric.MeterProvider
	// Prometheus serves the scrape endpoint when Config.Prometheus is set.
	Prometheus http.Handler
}

// MeterProvider is the meter provider to hand protoactor, nil when metrics
// are off (its metrics then cost nothing).
func (p *Providers) MeterProvider() metric.MeterProvider {
	if p == nil || p.Meter == nil {
		return nil
	}
	return p.Meter
}

// Shutdown flushes and stops the exporters.
func (p *Providers) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	var errs []error
	if p.Tracer != nil {
		errs = append(errs, p.Tracer.Shutdown(ctx))
	}
	if p.Meter != nil {
		errs = append(errs, p.Meter.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// Install builds the exporters c names and installs them as the global
// providers, with the W3C trace-context and baggage propagator (installed
// even when everything is off, so that a node without telemetry still
// passes a caller's trace on to the next node).
func Install(ctx context.Context, c Config) (*Providers, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	p := &Providers{}
	if !c.Enabled() {
		return p, nil
	}
	name := c.ServiceName
	if name == "" {
		name = "a2-node"
	}
	attrs := []resource.Option{resource.WithAttributes(semconv.ServiceName(name)), resource.WithTelemetrySDK(), resource.WithFromEnv()}
	if c.InstanceID != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceInstanceID(c.InstanceID)))
	}
	res, err := resource.New(ctx, attrs...)
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	if c.Traces != "" {
		var exp sdktrace.SpanExporter
		if c.TracesProtocol == "grpc" {
			exp, err = otlptracegrpc.New(ctx)
		} else {
			exp, err = otlptracehttp.New(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("trace exporter: %w", err)
		}
		opts := []sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(NewBatcher(exp)), sdktrace.WithResource(res)}
		if c.SampleRatio > 0 {
			opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))))
		}
		p.Tracer = sdktrace.NewTracerProvider(opts...)
		otel.SetTracerProvider(p.Tracer)
	}
	var readers []sdkmetric.Option
	if c.Metrics != "" {
		var exp sdkmetric.Exporter
		if c.MetricsProtocol == "grpc" {
			exp, err = otlpmetricgrpc.New(ctx)
		} else {
			exp, err = otlpmetrichttp.New(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("metric exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	if c.Prometheus {
		reg := prometheus.NewRegistry()
		exp, err := promexporter.New(promexporter.WithRegisterer(reg))
		if err != nil {
			return nil, fmt.Errorf("prometheus exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(exp))
		p.Prometheus = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	if len(readers) > 0 {
		p.Meter = sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
		otel.SetMeterProvider(p.Meter)
	}
	return p, nil
}
