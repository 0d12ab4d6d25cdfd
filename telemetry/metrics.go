package telemetry

import (
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// Metric names (docs/telemetry.md lists each with its attributes).
const (
	MetricTokenUsage      = "gen_ai.client.token.usage"
	MetricOpDuration      = "gen_ai.client.operation.duration"
	MetricTimeToFirst     = "gen_ai.client.operation.time_to_first_chunk"
	MetricAppendDuration  = "a2.store.append.duration"
	MetricAppendBatch     = "a2.store.append.batch_size"
	MetricSyncedWrites    = "a2.store.synced_writes"
	MetricChunksPerEvent  = "a2.progress.chunks_per_event"
	MetricSessionsActive  = "a2.sessions.active"
	MetricPassivations    = "a2.sessions.passivations"
	MetricActivation      = "a2.session.activation.duration"
	MetricGenDuration     = "a2.generation.duration"
	MetricToolExecutions  = "a2.tool.executions"
	MetricToolDuration    = "gen_ai.execute_tool.duration"
	MetricHTTPDuration    = "http.server.request.duration"
	MetricSubscribersLive = "a2.subscribers.live"
)

// Instruments are A2's metric instruments, made once from the global meter
// provider. Instruments made before a provider is installed forward to it
// once it is (the global provider's delegation), so packages may record
// from their first use.
type Instruments struct {
	TokenUsage      metric.Int64Histogram
	OpDuration      metric.Float64Histogram
	TimeToFirst     metric.Float64Histogram
	AppendDuration  metric.Float64Histogram
	AppendBatch     metric.Int64Histogram
	SyncedWrites    metric.Int64Counter
	ChunksPerEvent  metric.Int64Histogram
	SessionsActive  metric.Int64UpDownCounter
	Passivations    metric.Int64Counter
	Activation      metric.Float64Histogram
	GenDuration     metric.Float64Histogram
	ToolExecutions  metric.Int64Counter
	ToolDuration    metric.Float64Histogram
	HTTPDuration    metric.Float64Histogram
	SubscribersLive metric.Int64UpDownCounter
}

type boundInstruments struct {
	provider metric.MeterProvider
	*Instruments
}

var (
	instMu sync.Mutex
	inst   atomic.Pointer[boundInstruments]
	// recent are the instruments of the last few providers: a process
	// that switches between providers (a benchmark turning telemetry on
	// and off) does not make its instruments again at each switch.
	recent []*boundInstruments
)

// Metrics returns the instruments of the global meter provider, made again
// when another provider is installed (tests install their own).
func Metrics() *Instruments {
	mp := otel.GetMeterProvider()
	if b := inst.Load(); b != nil && b.provider == mp {
		return b.Instruments
	}
	instMu.Lock()
	defer instMu.Unlock()
	for _, b := range recent {
		if b.provider == mp {
			inst.Store(b)
			return b.Instruments
		}
	}
	b := &boundInstruments{provider: mp, Instruments: newInstruments(mp.Meter(InstrumentationName))}
	if len(recent) == 4 {
		recent = recent[1:]
	}
	recent = append(recent, b)
	inst.Store(b)
	return b.Instruments
}

// Latency buckets in seconds, from a synced write (about 1 ms) to a long
// model call.
var secondsBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

func newInstruments(m metric.Meter) *Instruments {
	i := &Instruments{}
	// Errors of instrument creation are about names and units, fixed here;
	// the SDK returns a working no-op instrument with them.
	i.TokenUsage, _ = m.Int64Histogram(MetricTokenUsage, metric.WithUnit("{token}"),
		metric.WithDescription("Tokens used per model call, by gen_ai.token.type (input, output)."),
		metric.WithExplicitBucketBoundaries(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576))
	i.OpDuration, _ = m.Float64Histogram(MetricOpDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of a model call, from the request to the last chunk."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	i.TimeToFirst, _ = m.Float64Histogram(MetricTimeToFirst, metric.WithUnit("s"),
		metric.WithDescription("Time from a model request to its first chunk."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	i.AppendDuration, _ = m.Float64Histogram(MetricAppendDuration, metric.WithUnit("s"),
		metric.WithDescription("Latency of a session's batch write, until durable."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	i.AppendBatch, _ = m.Int64Histogram(MetricAppendBatch, metric.WithUnit("{event}"),
		metric.WithDescription("Events per batch write."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256))
	i.SyncedWrites, _ = m.Int64Counter(MetricSyncedWrites, metric.WithUnit("{write}"),
		metric.WithDescription("Batch writes made durable (their rate is synced writes per second)."))
	i.ChunksPerEvent, _ = m.Int64Histogram(MetricChunksPerEvent, metric.WithUnit("{chunk}"),
		metric.WithDescription("Chunks per ai.generation.progress event written."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256))
	i.SessionsActive, _ = m.Int64UpDownCounter(MetricSessionsActive, metric.WithUnit("{session}"),
		metric.WithDescription("Sessions with an actor in memory on this node."))
	i.Passivations, _ = m.Int64Counter(MetricPassivations, metric.WithUnit("{session}"),
		metric.WithDescription("Sessions passivated (their actor stopped, state in the store)."))
	i.Activation, _ = m.Float64Histogram(MetricActivation, metric.WithUnit("s"),
		metric.WithDescription("Time to activate a session: snapshot and log tail folded; its count is the activations."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	i.GenDuration, _ = m.Float64Histogram(MetricGenDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of a generation attempt, by a2.outcome."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	i.ToolExecutions, _ = m.Int64Counter(MetricToolExecutions, metric.WithUnit("{execution}"),
		metric.WithDescription("Tool executions, by gen_ai.tool.name and a2.outcome."))
	i.ToolDuration, _ = m.Float64Histogram(MetricToolDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of a tool execution."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	i.HTTPDuration, _ = m.Float64Histogram(MetricHTTPDuration, metric.WithUnit("s"),
		metric.WithDescription("HTTP requests by http.route and http.response.status_code (a stream counts when it ends)."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	i.SubscribersLive, _ = m.Int64UpDownCounter(MetricSubscribersLive, metric.WithUnit("{subscriber}"),
		metric.WithDescription("Live stream subscribers on this node."))
	return i
}
