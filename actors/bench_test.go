package actors

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/internal/gctune"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/telemetry"
	"github.com/a2-runtime/a2/telemetry/telemetrytest"
	"github.com/a2-runtime/a2/tools"
)

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[int(float64(len(ds)-1)*p)]
}

// BenchmarkSimpleTurn reports the synced writes one simple text turn costs
// from send to completion: the first turn of a new session, which also
// claims the session for its agent (owner.go), and the next turn in it.
func BenchmarkSimpleTurn(b *testing.B) { benchSimpleTurn(b, nil) }

// BenchmarkSimpleTurnInMemory is the simple turn on Pebble's in-memory
// filesystem: no fsync, so that its CPU per turn is the runtime's alone,
// steady enough to compare a few per cent (telemetry's cost, say).
func BenchmarkSimpleTurnInMemory(b *testing.B) { benchSimpleTurn(b, vfs.NewMem()) }

func benchSimpleTurn(b *testing.B, fs vfs.FS) {
	turn := simpleTurns(b, fs, benchOptions(b, Options{SnapshotEvery: -1}))
	ctx := context.Background()
	b.ResetTimer()
	cpu0 := processCPU()
	var first, next int64
	for i := 0; i < b.N; i++ {
		session := "turn-" + strconv.Itoa(i)
		first += turn(ctx, session, "m1-"+session)
		next += turn(ctx, session, "m2-"+session)
	}
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(2*b.N), "cpu-us/turn")
	b.ReportMetric(float64(first)/float64(b.N), "writes/first-turn")
	b.ReportMetric(float64(next)/float64(b.N), "writes/turn")
}

// simpleTurns opens a runtime with one agent on a script model answering
// a few words, on Pebble (on fs; nil is the disk), and returns a function
// that runs one turn of a session (push a message, wait for the turn's
// end on the session's live stream, not by polling its state, so that the
// CPU per turn is the turn's) and answers the synced writes it took.
func simpleTurns(b *testing.B, fs vfs.FS, o Options) func(ctx context.Context, session, id string) int64 {
	st, err := pebblestore.Open(filepath.Join(b.TempDir(), "data"), pebblestore.Options{FS: fs, Logger: quietPebble{}})
	if err != nil {
		b.Fatal(err)
	}
	cs := &countingStore{Store: st, countOnly: true}
	sc, _ := script.Parse([]byte(`{"default":{"text":"a short answer of a few words"}}`))
	model := script.New(sc).StopRecording()
	a, _ := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script"), Models: func(string) (harness.Model, error) { return model, nil }})
	rt, _ := New(cs, []*Agent{a}, o)
	b.Cleanup(func() { rt.Close(); _ = st.Close() })
	last := map[string]uint64{}
	return func(ctx context.Context, session, id string) int64 {
		before := cs.appends.Load()
		sctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		events, errc := rt.Subscribe(sctx, "assistant", session, last[session])
		if _, err := rt.Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Text(id, "hi")}, false); err != nil {
			b.Fatal(err)
		}
		for ev := range events {
			last[session] = ev.Index
			if ev.Type == protocol.TypeGenerationCompleted {
				return cs.appends.Load() - before
			}
		}
		b.Fatalf("the stream ended before the turn: %v", <-errc)
		return 0
	}
}

// BenchmarkTelemetryCost is what traces and metrics cost the simple turn,
// measured in one process against itself: the same runtime and store run
// turns with telemetry off (no-op providers, as when nothing is
// configured) and on (every span recorded and every metric aggregated,
// exported in process to exporters that drop them: telemetrytest.
// Discarding), alternating every 20 sessions (40 turns), so that the
// machine's drift between runs does not move the comparison. With
// telemetry on, each push carries the span of its caller and the W3C
// propagator is set, as the gateway does for an HTTP push, so the turn has
// its whole tree (admit, invoke_agent, a2.generation, chat).
//
// The CPU of a block includes whatever runs then, Pebble's compactions
// too, which come every few hundred turns and cost several blocks' worth:
// the mean per turn moves by several per cent between runs even with
// telemetry on in both halves. So the figures compared are the medians of
// the blocks' CPU per turn, which keep the garbage collections (one every
// block or two here) and drop the rare compactions; the means are
// reported too. A2_BENCH_TELEMETRY_AA=on or =off runs both halves the same
// way, to see the method's own error. A2_BENCH_TELEMETRY_EXPORT=otlp
// exports what the on half records through a node's own OTLP/HTTP
// exporters to a receiver in another process (otlpsink_test.go), the
// sampler as OTEL_TRACES_SAMPLER says (the SDK's default: every trace).
func BenchmarkTelemetryCost(b *testing.B) {
	for _, store := range []string{"memory", "disk"} {
		b.Run("store="+store, func(b *testing.B) {
			var fs vfs.FS
			if store == "memory" {
				fs = vfs.NewMem()
			}
			// The collector's settings of a node (cmd/node), unless GOGC or
			// GOMEMLIMIT are set (GOGC=100 measures a test's default).
			_, restoreGC := gctune.ForNode()
			defer restoreGC()
			percent := debug.SetGCPercent(100)
			debug.SetGCPercent(percent)
			b.ReportMetric(float64(percent), "gc-percent")
			turn := simpleTurns(b, fs, Options{SnapshotEvery: -1})
			tp, mp := telemetrytest.Discarding()
			telemetrytest.RestoreGlobals(b)
			b.Cleanup(func() {
				_ = tp.Shutdown(context.Background())
				_ = mp.Shutdown(context.Background())
			})
			offT, offM := tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider()
			otel.SetTextMapPropagator(propagation.TraceContext{})
			aa := os.Getenv("A2_BENCH_TELEMETRY_AA")
			// A2_BENCH_TELEMETRY_PARTS=traces or =metrics turns on only
			// that half, to see what each costs.
			onT, onM := trace.TracerProvider(tp), metric.MeterProvider(mp)
			// A2_BENCH_TELEMETRY_EXPORT=otlp exports for real instead: a
			// node's OTLP/HTTP exporters (the sampler from
			// OTEL_TRACES_SAMPLER) to a receiver in a process of its own.
			if os.Getenv("A2_BENCH_TELEMETRY_EXPORT") == "otlp" {
				onT, onM = exportingProviders(b, startOTLPSink(b))
			}
			switch os.Getenv("A2_BENCH_TELEMETRY_PARTS") {
			case "traces":
				onM = offM
			case "metrics":
				onT = offT
			case "none": // the halves switch, to the same providers
				onT, onM = offT, offM
			}
			const block = 20
			var perTurn [2][]float64     // CPU µs per turn of each block
			var wallPerTurn [2][]float64 // and wall µs
			var blockStart time.Time
			var cpu [2]time.Duration
			var allocs [2]uint64
			var writes [2]int64
			var sessions [2]int
			sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
			allocated := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
			var blockCPU time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				half := (i / block) % 2
				on := half == 1
				if aa != "" {
					on = aa == "on"
				}
				if i%block == 0 {
					blockCPU, blockStart = 0, time.Now()
					if on {
						otel.SetTracerProvider(onT)
						otel.SetMeterProvider(onM)
					} else {
						otel.SetTracerProvider(offT)
						otel.SetMeterProvider(offM)
					}
				}
				session := "turn-" + strconv.Itoa(i)
				c0, a0 := processCPU(), allocated()
				for _, id := range []string{"m1-", "m2-"} {
					ctx := context.Background()
					var span trace.Span
					if on {
						ctx, span = telemetry.Start(ctx, "POST", trace.WithSpanKind(trace.SpanKindServer))
					}
					writes[half] += turn(ctx, session, id+session)
					if span != nil {
						span.End()
					}
				}
				took := processCPU() - c0
				allocs[half] += allocated() - a0
				cpu[half] += took
				blockCPU += took
				sessions[half]++
				if i%block == block-1 {
					perTurn[half] = append(perTurn[half], float64(blockCPU.Microseconds())/(2*block))
					wallPerTurn[half] = append(wallPerTurn[half], float64(time.Since(blockStart).Microseconds())/(2*block))
				}
			}
			b.StopTimer()
			if len(perTurn[0]) == 0 || len(perTurn[1]) == 0 {
				return // too few iterations for both halves (the first, calibrating run)
			}
			median := func(v []float64) float64 { sort.Float64s(v); return v[len(v)/2] }
			offMed, onMed := median(perTurn[0]), median(perTurn[1])
			offMean := float64(cpu[0].Microseconds()) / float64(2*sessions[0])
			onMean := float64(cpu[1].Microseconds()) / float64(2*sessions[1])
			offAlloc := float64(allocs[0]) / float64(2*sessions[0])
			onAlloc := float64(allocs[1]) / float64(2*sessions[1])
			b.ReportMetric(offMed, "cpu-us/turn-off")
			b.ReportMetric(onMed, "cpu-us/turn-on")
			b.ReportMetric(100*(onMed-offMed)/offMed, "cpu-cost-%")
			b.ReportMetric(100*(onMean-offMean)/offMean, "cpu-mean-cost-%")
			// The time a turn takes, as BenchmarkSimpleTurn's ns/op: the
			// median of the blocks' wall time per turn.
			wallOff, wallOn := median(wallPerTurn[0]), median(wallPerTurn[1])
			b.ReportMetric(wallOff, "us/turn-off")
			b.ReportMetric(wallOn, "us/turn-on")
			b.ReportMetric(100*(wallOn-wallOff)/wallOff, "time-cost-%")
			b.ReportMetric(float64(writes[0])/float64(2*sessions[0]), "writes/turn-off")
			b.ReportMetric(float64(writes[1])/float64(2*sessions[1]), "writes/turn-on")
			b.ReportMetric(offAlloc, "B/turn-off")
			b.ReportMetric(onAlloc, "B/turn-on")
		})
	}
}

// benchOptions turns telemetry on for a benchmark when A2_BENCH_TELEMETRY
// is "on": every trace recorded and every metric aggregated, exported in
// process to exporters that drop them (telemetrytest.InstallDiscarding);
// A2_BENCH_ACTOR_METRICS=on adds protoactor's own actor metrics (the
// node's --actor-metrics). Reported as telemetry (1 on, 0 off).
func benchOptions(b *testing.B, o Options) Options {
	if os.Getenv("A2_BENCH_TELEMETRY") == "on" {
		mp := telemetrytest.InstallDiscarding(b)
		if os.Getenv("A2_BENCH_ACTOR_METRICS") == "on" {
			o.Meter = mp // protoactor's own metrics too
		}
		b.ReportMetric(1, "telemetry")
		return o
	}
	b.ReportMetric(0, "telemetry")
	return o
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkToolTurnHistory is the durable 3-step turn (a model step that
// calls a tool, the tool's execution, the continuation) in sessions whose
// history already holds 1, 50 or 500 such turns: node CPU and synced
// writes per turn, which should not grow with the history. Four
// sessions take turns; Pebble in memory, so the figure is the runtime's
// own work, not the disk's.
func BenchmarkToolTurnHistory(b *testing.B) {
	for _, history := range []int{1, 50, 500} {
		b.Run("history="+strconv.Itoa(history), func(b *testing.B) {
			st, err := pebblestore.Open("data", pebblestore.Options{FS: vfs.NewMem(), Logger: quietPebble{}})
			if err != nil {
				b.Fatal(err)
			}
			cs := &countingStore{Store: st, countOnly: true}
			sc, err := script.Parse([]byte(`{"default":{"text":"let me look","toolCalls":[{"name":"lookup","input":{"q":"the weather"}}],"then":{"text":"it is sunny and warm today"}}}`))
			if err != nil {
				b.Fatal(err)
			}
			model := script.New(sc).StopRecording()
			lookup := tools.Tool{Name: "lookup", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
				return json.RawMessage(`{"forecast":"sunny","high":24}`), nil
			}}
			a, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script"), Tools: []tools.Tool{lookup},
				Models: func(string) (harness.Model, error) { return model, nil }})
			if err != nil {
				b.Fatal(err)
			}
			rt, err := New(cs, []*Agent{a}, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { rt.Close(); _ = st.Close() }()
			last := map[string]uint64{}
			n := 0
			turn := func(session string) {
				n++
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				events, errc := rt.Subscribe(ctx, "assistant", session, last[session])
				if _, err := rt.Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Text("m"+strconv.Itoa(n), "what is the weather?")}, false); err != nil {
					b.Fatal(err)
				}
				steps := 0
				for ev := range events {
					last[session] = ev.Index
					if ev.Type == protocol.TypeGenerationCompleted {
						if steps++; steps == 2 {
							return
						}
					}
				}
				b.Fatalf("the stream ended before the turn: %v", <-errc)
			}
			const sessions = 4
			for s := 0; s < sessions; s++ {
				for i := 0; i < history; i++ {
					turn("s" + strconv.Itoa(s))
				}
			}
			runtime.GC()
			writes0, cpu0 := cs.appends.Load(), processCPU()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				turn("s" + strconv.Itoa(i%sessions))
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/turn")
			b.ReportMetric(float64(cs.appends.Load()-writes0)/float64(b.N), "writes/turn")
		})
	}
}
