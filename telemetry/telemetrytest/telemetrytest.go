// Package telemetrytest installs in-memory OpenTelemetry providers for a
// test: a span recorder and a manual metric reader, read back by trace ID,
// by metric name and by attribute. The providers are global (A2 records
// through the global providers), so tests of other traces may add spans
// concurrently: read spans by a trace ID the test made.
package telemetrytest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/a2-runtime/a2/telemetry"
)

// Recorder holds what the test's providers recorded.
type Recorder struct {
	t      testing.TB
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
}

// Install installs the providers until the test ends.
func Install(t testing.TB) *Recorder {
	r := &Recorder{t: t, spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	install(t, tp, mp)
	return r
}

// RestoreGlobals puts the global tracer and meter providers and the text
// map propagator back as they are now once tb ends: a test or benchmark
// that sets them itself calls it first.
func RestoreGlobals(tb testing.TB) {
	prevT, prevM, prevP := otel.GetTracerProvider(), otel.GetMeterProvider(), otel.GetTextMapPropagator()
	tb.Cleanup(func() {
		otel.SetTracerProvider(prevT)
		otel.SetMeterProvider(prevM)
		otel.SetTextMapPropagator(prevP)
	})
}

// install makes tp and mp the global providers, with the W3C propagators,
// until tb ends, and shuts them down then.
func install(tb testing.TB, tp *sdktrace.TracerProvider, mp *sdkmetric.MeterProvider) {
	RestoreGlobals(tb)
	otel.SetTracerProvider(tp)
	otel.SetMeterProvider(mp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	tb.Cleanup(func() { // before the globals are put back
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
}

// Root starts a root span of the test's own, whose trace the test then
// reads; end it when the traced work has been sent.
func (r *Recorder) Root(name string) (context.Context, trace.Span) {
	return otel.Tracer("telemetrytest").Start(context.Background(), name)
}

// Ended returns the ended spans of trace id.
func (r *Recorder) Ended(id trace.TraceID) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if s.SpanContext().TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

// WaitFor waits (bounded: 10 s) until the ended spans of trace id satisfy
// cond, and returns them.
func (r *Recorder) WaitFor(id trace.TraceID, what string, cond func([]sdktrace.ReadOnlySpan) bool) []sdktrace.ReadOnlySpan {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		spans := r.Ended(id)
		if cond(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s; the trace has:\n%s", what, Tree(spans))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Named returns the spans whose name is name or starts with name+" ".
func Named(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name || strings.HasPrefix(s.Name(), name+" ") {
			out = append(out, s)
		}
	}
	return out
}

// Count is a condition: at least n spans named name.
func Count(name string, n int) func([]sdktrace.ReadOnlySpan) bool {
	return func(spans []sdktrace.ReadOnlySpan) bool { return len(Named(spans, name)) >= n }
}

// Attr returns a span's attribute (the zero Value when absent).
func Attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// Events returns a span's events named name.
func Events(s sdktrace.ReadOnlySpan, name string) []sdktrace.Event {
	var out []sdktrace.Event
	for _, e := range s.Events() {
		if e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// EventAttr returns an event's attribute (the zero Value when absent).
func EventAttr(e sdktrace.Event, key string) attribute.Value {
	for _, kv := range e.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// Children returns the spans whose parent is p.
func Children(spans []sdktrace.ReadOnlySpan, p sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().SpanID() == p.SpanContext().SpanID() {
			out = append(out, s)
		}
	}
	return out
}

// Tree renders spans as an indented tree, children in start order, with
// their a2.* and gen_ai.* attributes: what a failing test prints, and what
// docs/telemetry.md shows.
func Tree(spans []sdktrace.ReadOnlySpan) string {
	byParent := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if p := s.Parent().SpanID(); p.IsValid() && ids[p] {
			byParent[p] = append(byParent[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func(ss []sdktrace.ReadOnlySpan, depth int)
	walk = func(ss []sdktrace.ReadOnlySpan, depth int) {
		sort.Slice(ss, func(i, j int) bool { return ss[i].StartTime().Before(ss[j].StartTime()) })
		for _, s := range ss {
			fmt.Fprintf(&b, "%s%s  %s", strings.Repeat("  ", depth), s.Name(), s.EndTime().Sub(s.StartTime()).Round(time.Microsecond))
			for _, kv := range s.Attributes() {
				k := string(kv.Key)
				if strings.HasPrefix(k, "a2.") || strings.HasPrefix(k, "gen_ai.") || k == "error.type" || k == "http.route" {
					fmt.Fprintf(&b, " %s=%s", k, kv.Value.Emit())
				}
			}
			if n := len(s.Links()); n > 0 {
				fmt.Fprintf(&b, " links=%d", n)
			}
			if n := len(Events(s, "a2.store.append")); n > 0 {
				fmt.Fprintf(&b, " store-writes=%d", n)
			}
			b.WriteByte('\n')
			walk(byParent[s.SpanContext().SpanID()], depth+1)
		}
	}
	walk(roots, 0)
	return b.String()
}

// Collect reads the metrics recorded so far.
func (r *Recorder) Collect() metricdata.ResourceMetrics {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		r.t.Fatal(err)
	}
	return rm
}

// Total returns, for the metric name, the sum of a counter's or
// up-down counter's points, or the count of a histogram's measurements
// (sum=false) or their sum (sum=true), over the points whose attributes
// include every key=value of match.
func Total(rm metricdata.ResourceMetrics, name string, sum bool, match ...attribute.KeyValue) float64 {
	var total float64
	has := func(set attribute.Set) bool {
		for _, kv := range match {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if has(p.Attributes) {
						total += float64(p.Value)
					}
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					if has(p.Attributes) {
						total += p.Value
					}
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					if has(p.Attributes) {
						if sum {
							total += float64(p.Sum)
						} else {
							total += float64(p.Count)
						}
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if has(p.Attributes) {
						if sum {
							total += p.Sum
						} else {
							total += float64(p.Count)
						}
					}
				}
			}
		}
	}
	return total
}

// InstallDiscarding installs providers that record everything and export
// to nowhere, in process (the node's span processor, telemetry.Batcher,
// and a periodic metric reader, with exporters that drop what they get):
// what telemetry costs A2 itself, without a collector's. It returns the
// meter provider, for protoactor's metrics.
func InstallDiscarding(tb testing.TB) *sdkmetric.MeterProvider {
	tp, mp := Discarding()
	install(tb, tp, mp)
	return mp
}

// Discarding makes, without installing them, the providers that
// InstallDiscarding installs; a benchmark that turns telemetry on and off
// in one process swaps them in and out itself.
func Discarding() (*sdktrace.TracerProvider, *sdkmetric.MeterProvider) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(telemetry.NewBatcher(discardSpans{})))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(discardMetrics{}, sdkmetric.WithInterval(time.Second))))
	return tp, mp
}

type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

type discardMetrics struct{}

func (discardMetrics) Temporality(k sdkmetric.InstrumentKind) metricdata.Temporality {
	return sdkmetric.DefaultTemporalitySelector(k)
}
func (discardMetrics) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	return sdkmetric.DefaultAggregationSelector(k)
}
func (discardMetrics) Export(context.Context, *metricdata.ResourceMetrics) error { return nil }
func (discardMetrics) ForceFlush(context.Context) error                          { return nil }
func (discardMetrics) Shutdown(context.Context) error                            { return nil }
