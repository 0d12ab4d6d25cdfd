package telemetry

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func TestFromEnv(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want Config
		err  string
	}{
		{"nothing set: off", nil, Config{TracesProtocol: "http/protobuf", MetricsProtocol: "http/protobuf"}, ""},
		{"an endpoint turns both on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
			Config{Traces: "otlp", TracesProtocol: "http/protobuf", Metrics: "otlp", MetricsProtocol: "http/protobuf", SampleRatio: DefaultSampleRatio}, ""},
		{"a sampler of the user's: none of ours", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_SAMPLER": "parentbased_always_on"},
			Config{Traces: "otlp", TracesProtocol: "http/protobuf", Metrics: "otlp", MetricsProtocol: "http/protobuf"}, ""},
		{"a traces endpoint turns traces on", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			Config{Traces: "otlp", TracesProtocol: "grpc", MetricsProtocol: "grpc", SampleRatio: DefaultSampleRatio}, ""},
		{"per-signal protocol wins", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
			Config{Traces: "otlp", TracesProtocol: "http/protobuf", MetricsProtocol: "grpc", SampleRatio: DefaultSampleRatio}, ""},
		{"prometheus metrics", map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"},
			Config{TracesProtocol: "http/protobuf", MetricsProtocol: "http/protobuf", Prometheus: true}, ""},
		{"none wins over an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"},
			Config{TracesProtocol: "http/protobuf", MetricsProtocol: "http/protobuf"}, ""},
		{"disabled SDK", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, Config{}, ""},
		{"an exporter this node lacks", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, Config{}, `OTEL_TRACES_EXPORTER="zipkin"`},
		{"prometheus traces", map[string]string{"OTEL_TRACES_EXPORTER": "prometheus"}, Config{}, "exports otlp or none"},
		{"a protocol that does not exist", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, Config{}, "use grpc or http/protobuf"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := FromEnv(func(k string) string { return c.env[k] })
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("FromEnv = %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestLogHandlerNamesTheTrace(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewTextHandler(&buf, nil)))
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	log.InfoContext(ctx, "traced", "session", "s1")
	log.Info("untraced")
	span.End()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	sc := span.SpanContext()
	if !strings.Contains(lines[0], "trace_id="+sc.TraceID().String()) || !strings.Contains(lines[0], "span_id="+sc.SpanID().String()) ||
		!strings.Contains(lines[0], "session=s1") {
		t.Fatalf("a traced line lacks its trace: %s", lines[0])
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Fatalf("a line without a span names a trace: %s", lines[1])
	}
}

func TestCarrierRoundTripAndMalformedInput(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	defer otel.SetTextMapPropagator(prev)
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	c := Inject(ctx)
	if got := trace.SpanContextFromContext(Extract(context.Background(), c)); got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() || !got.IsRemote() {
		t.Fatalf("the carrier %v names %v, want the span's context, remote", c, got)
	}
	if Inject(context.Background()) != nil {
		t.Fatal("a context without a span gives a carrier")
	}
	// What another node sends never fails a request: a malformed carrier
	// is no parent.
	for _, bad := range []Carrier{{"traceparent": "garbage"}, {"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"}, {"traceparent": strings.Repeat("f", 10000)}} {
		if sc := trace.SpanContextFromContext(Extract(context.Background(), bad)); sc.IsValid() {
			t.Fatalf("the malformed carrier %.40v gives a valid parent", bad)
		}
	}
}

// A node's default sampler records one trace in ten of those it starts,
// and follows a caller's traceparent either way; a sampler named in
// OTEL_TRACES_SAMPLER replaces it.
func TestTheDefaultSampler(t *testing.T) {
	sampled := func(p *Providers, parent trace.SpanContext, n int) int {
		count := 0
		for range n {
			ctx := context.Background()
			if parent.IsValid() {
				ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
			}
			_, span := p.Tracer.Tracer("t").Start(ctx, "s")
			if span.SpanContext().IsSampled() {
				count++
			}
			span.End()
		}
		return count
	}
	install := func(env map[string]string) *Providers {
		for k, v := range env {
			t.Setenv(k, v)
		}
		c, err := FromEnv(func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		c.Metrics = ""
		p, err := Install(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
		return p
	}
	parent := func(flags trace.TraceFlags) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: flags, Remote: true})
	}
	// The endpoint is never reached: the spans are not flushed before the
	// test ends, and Shutdown's failed export is ignored.
	endpoint := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_BSP_EXPORT_TIMEOUT": "1"}
	p := install(endpoint)
	// 4,000 roots at one in ten: 400 expected, with a standard deviation
	// of 19; the bounds are five of them away.
	if n := sampled(p, trace.SpanContext{}, 4000); n < 300 || n > 500 {
		t.Fatalf("the default sampler recorded %d of 4,000 traces it started, want about 400", n)
	}
	if n := sampled(p, parent(trace.FlagsSampled), 200); n != 200 {
		t.Fatalf("a caller's sampled trace: %d of 200 spans recorded", n)
	}
	if n := sampled(p, parent(0), 200); n != 0 {
		t.Fatalf("a caller's unsampled trace: %d of 200 spans recorded", n)
	}
	all := install(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_TRACES_SAMPLER": "parentbased_always_on"})
	if n := sampled(all, trace.SpanContext{}, 500); n != 500 {
		t.Fatalf("OTEL_TRACES_SAMPLER=parentbased_always_on: %d of 500 traces recorded", n)
	}
}
