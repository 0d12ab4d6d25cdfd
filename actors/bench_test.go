package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/internal/gctune"
	"github.com/a2-runtime/a2/internal/testutil"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/telemetry"
	"github.com/a2-runtime/a2/telemetry/telemetrytest"
	"github.com/a2-runtime/a2/tools"
)

// stampModel streams one step of text whose deltas carry the time they
// were produced, "t<unix nanos> ", so that a subscriber can measure
// chunk-to-delivery latency: start-step, text-start, the deltas (in bursts
// of burst deltas, one burst every `every`), text-end, finish-step, finish.
//
// The schedule is open-loop, as a provider's is: burst k of a stream is
// due at the stream's start plus k x every, however late the runtime reads
// it. A reader that falls behind finds the burst waiting (Ready), its
// deltas carry the time they were due, and the delay counts in the
// latency; it does not push the stream's later bursts back. (A closed-loop
// schedule, each wait starting when the previous burst was read, let every
// stall of the runtime shift all the streams it delayed alike, so that
// their bursts came to arrive together: see docs/benchmarks.md, session 5.)
type stampModel struct {
	chunks int
	every  time.Duration
	burst  int // deltas per burst; 0 or 1: one delta every `every`
}

type stampStream struct {
	ctx      context.Context
	m        *stampModel
	start    time.Time
	i        int
	bursti   int       // the burst of the last delta read
	produced time.Time // when that burst was produced
}

func (m *stampModel) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	return &stampStream{ctx: ctx, m: m, start: time.Now()}, nil
}

// due is when the delta at chunk index i is produced.
func (s *stampStream) due(i int) time.Time {
	per := max(s.m.burst, 1)
	return s.start.Add(time.Duration((i-2)/per+1) * s.m.every)
}

func (s *stampStream) Next() (protocol.UIMessageChunk, error) {
	i := s.i
	s.i++
	switch {
	case i == 0:
		return protocol.UIMessageChunk{Type: protocol.ChunkStartStep}, nil
	case i == 1:
		return protocol.UIMessageChunk{Type: protocol.ChunkTextStart, ID: "t"}, nil
	case i < s.m.chunks+2:
		// A delta read late was produced when it was due; one waited for
		// is produced when the wait ends (Go's timers on an idle process
		// fire up to a millisecond late, which is the generator's slack,
		// not the runtime's: a socket wakes its reader without it).
		// The deltas of one burst are produced together.
		if b := (i - 2) / max(s.m.burst, 1); i == 2 || b != s.bursti {
			s.bursti, s.produced = b, s.due(i)
			if wait := time.Until(s.produced); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-s.ctx.Done():
					t.Stop()
					return protocol.UIMessageChunk{}, context.Cause(s.ctx)
				}
				s.produced = time.Now()
			}
		}
		return protocol.UIMessageChunk{Type: protocol.ChunkTextDelta, ID: "t", Delta: "t" + strconv.FormatInt(s.produced.UnixNano(), 10) + " "}, nil
	case i == s.m.chunks+2:
		return protocol.UIMessageChunk{Type: protocol.ChunkTextEnd, ID: "t"}, nil
	case i == s.m.chunks+3:
		return protocol.UIMessageChunk{Type: protocol.ChunkFinishStep}, nil
	case i == s.m.chunks+4:
		return protocol.UIMessageChunk{Type: protocol.ChunkFinish, FinishReason: "stop"}, nil
	}
	return protocol.UIMessageChunk{}, io.EOF
}

func (s *stampStream) Close() error { return nil }

// Ready implements harness.ReadyStream: the chunks around the deltas, and
// a delta whose time has come, are at hand without a wait.
func (s *stampStream) Ready() bool {
	i := s.i
	if i < 2 || i >= s.m.chunks+2 {
		return true
	}
	return !time.Now().Before(s.due(i))
}

// walFsync returns the median and 99th percentile of the store's WAL syncs
// since it opened (Pebble's histogram, 0.1 ms buckets below 5 ms): the
// disk's sync latency under the benchmark's own load, the floor of a
// durable chunk's latency (it waits for the sync in flight, then for its
// own).
func walFsync(b *testing.B, st *pebblestore.Store) (p50, p99 time.Duration) {
	m, err := st.Metrics()
	if err != nil {
		b.Fatal(err)
	}
	var pm dto.Metric
	if err := m.LogWriter.FsyncLatency.Write(&pm); err != nil {
		b.Fatal(err)
	}
	h := pm.GetHistogram()
	quantile := func(q float64) time.Duration {
		want := uint64(q * float64(h.GetSampleCount()))
		for _, bk := range h.GetBucket() {
			if bk.GetCumulativeCount() >= want {
				return time.Duration(bk.GetUpperBound()) // the histogram is in nanoseconds
			}
		}
		return 0
	}
	return quantile(0.5), quantile(0.99)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[int(float64(len(ds)-1)*p)]
}

// BenchmarkProgressBatching streams model chunks in 1, 100 and 1,000
// concurrent sessions on an on-disk Pebble store (real fsync) and reports
// how many chunks share a persisted progress event, the synced writes per
// second, and the p50/p99 latency from a chunk's production by the model to
// its delivery to a subscriber of the session (Runtime.Subscribe), beside
// the median fsync of the same disk.
//
// Every stream averages 50 tokens per second for 5 seconds, in one of two
// shapes: steady, one text delta every 20 ms; burst10, ten deltas at once
// every 200 ms, as when a provider's deltas arrive in one network read.
// Streams start spread over the first second (each with its own phase) and
// the steady-state p99 counts the chunks produced while all of them run.
// Besides the percentiles, over-20xfsync-% is the share of deltas whose
// latency exceeds 20 times the median fsync (the bound on a chunk's latency,
// docs/benchmarks.md, "Progress batching"): how far the
// distribution's shoulder, not only its tail, is from it.
func BenchmarkProgressBatching(b *testing.B) {
	for _, shape := range []struct {
		name  string
		burst int
	}{{"steady", 1}, {"burst10", 10}} {
		for _, streams := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("shape=%s/streams=%d", shape.name, streams), func(b *testing.B) {
				benchProgress(b, streams, shape.burst)
			})
		}
	}
}

const (
	benchDeltas = 250                   // per stream: 5 s at 50 tokens/s
	benchEvery  = 20 * time.Millisecond // 50 tokens per second
	benchRamp   = time.Second           // streams start spread over it
)

func benchProgress(b *testing.B, streams, burst int) {
	// The collector's settings of a node (cmd/node), unless GOGC or
	// GOMEMLIMIT are set; reported as gc-percent.
	_, restoreGC := gctune.ForNode()
	defer restoreGC()
	percent := debug.SetGCPercent(100)
	debug.SetGCPercent(percent)
	dir := b.TempDir()
	// The baseline: 256-byte fsyncs before and after the streams (300
	// each), so that a slow or fast minute of the disk weighs on both.
	fsyncs := testutil.FsyncLatencies(b, dir, 300)
	st, err := pebblestore.Open(filepath.Join(dir, "data"), pebblestore.Options{Logger: quietPebble{}})
	if err != nil {
		b.Fatal(err)
	}
	cs := &countingStore{Store: st}
	model := &stampModel{chunks: benchDeltas, every: time.Duration(burst) * benchEvery, burst: burst}
	a, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("stamp"),
		Models: func(string) (harness.Model, error) { return model, nil }})
	if err != nil {
		b.Fatal(err)
	}
	rt, err := New(cs, []*Agent{a}, benchOptions(b, Options{SnapshotEvery: -1}))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { rt.Close(); _ = st.Close() }()
	cpu0 := processCPU()
	var (
		mu             sync.Mutex
		all            = make([]time.Duration, 0, b.N*streams*benchDeltas)
		steady         = make([]time.Duration, 0, b.N*streams*benchDeltas)
		events, chunks int
	)
	var mem0, mem1 runtime.MemStats
	runtime.ReadMemStats(&mem0)
	b.ResetTimer()
	start := time.Now()
	appends0 := cs.appends.Load()
	workers0 := rt.dispatcher.started.Load()
	for iter := 0; iter < b.N; iter++ {
		began := time.Now()
		// All streams run from the last start to the first end.
		from, to := began.Add(benchRamp), began.Add(benchDeltas*benchEvery)
		if streams == 1 {
			from = began
		}
		var wg sync.WaitGroup
		for s := 0; s < streams; s++ {
			wg.Add(1)
			go func(session string, delay time.Duration) {
				defer wg.Done()
				time.Sleep(delay)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				last, _ := st.LastIndex(ctx, session)
				live, _ := rt.Subscribe(ctx, "assistant", session, last)
				if _, err := rt.Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Text("m-"+session, "go")}, false); err != nil {
					b.Error(err)
					return
				}
				mine := make([]time.Duration, 0, benchDeltas)
				mineSteady := make([]time.Duration, 0, benchDeltas)
				var buf []time.Time
				ev, n := 0, 0
				for e := range live {
					switch e.Type {
					case protocol.TypeGenerationProgress:
						now := time.Now()
						ev++
						n += bytes.Count(e.Payload, []byte(`{"type":`))
						buf = stamps(buf[:0], e.Payload)
						for _, produced := range buf {
							d := now.Sub(produced)
							mine = append(mine, d)
							if !produced.Before(from) && produced.Before(to) {
								mineSteady = append(mineSteady, d)
							}
						}
					case protocol.TypeGenerationCompleted:
						cancel()
					}
				}
				mu.Lock()
				all = append(all, mine...)
				steady = append(steady, mineSteady...)
				events += ev
				chunks += n
				mu.Unlock()
			}(fmt.Sprintf("i%d-s%d", iter, s), time.Duration(s)*benchRamp/time.Duration(streams))
		}
		wg.Wait()
	}
	elapsed := time.Since(start)
	b.StopTimer()
	fsync := testutil.Median(append(fsyncs, testutil.FsyncLatencies(b, dir, 300)...))
	runtime.ReadMemStats(&mem1)
	walP50, walP99 := walFsync(b, st)
	// Pebble's background work in the run: a new store's memtable starts
	// at 256 KiB and doubles at each rotation, each with a WAL file of its
	// own, up to 64 MiB.
	if m, err := st.Metrics(); err == nil {
		b.ReportMetric(float64(m.Flush.Count), "flushes")
		b.ReportMetric(float64(m.Compact.Count), "compactions")
		b.ReportMetric(float64(m.WAL.Files), "wal-files")
	}
	if len(all) != b.N*streams*benchDeltas {
		b.Fatalf("%d deltas delivered, want %d", len(all), b.N*streams*benchDeltas)
	}
	writes := cs.appends.Load() - appends0
	p50, p90, p99, sp99 := percentile(all, 0.5), percentile(all, 0.9), percentile(all, 0.99), percentile(steady, 0.99)
	// The share of deltas over the latency bound (20 x the median fsync):
	// the p99 meets the bound only while this stays under 1%.
	over := len(all) - sort.Search(len(all), func(i int) bool { return all[i] > 20*fsync })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(chunks), "cpu-us/chunk")
	b.ReportMetric(float64(chunks)/float64(events), "chunks/event")
	b.ReportMetric(float64(writes)/elapsed.Seconds(), "writes/s")
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p90), "p90-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	b.ReportMetric(100*float64(over)/float64(len(all)), "over-20xfsync-%")
	b.ReportMetric(ms(sp99), "steady-p99-ms")
	b.ReportMetric(ms(fsync), "fsync-p50-ms")
	b.ReportMetric(ms(walP50), "wal-sync-p50-ms")
	b.ReportMetric(ms(walP99), "wal-sync-p99-ms")
	b.ReportMetric(float64(p99)/float64(fsync), "p99/fsync")
	b.ReportMetric(float64(sp99)/float64(fsync), "steady-p99/fsync")
	// What the garbage collector has to do, which sets much of the tail.
	b.ReportMetric(float64(mem1.TotalAlloc-mem0.TotalAlloc)/float64(chunks), "B/chunk")
	b.ReportMetric(float64(mem1.NumGC-mem0.NumGC)/elapsed.Seconds(), "GCs/s")
	b.ReportMetric(float64(percent), "gc-percent")
	// Mailbox goroutines started during the run: the reused workers
	// (dispatcher.go) should make this small.
	b.ReportMetric(float64(rt.dispatcher.started.Load()-workers0), "mailbox-goroutines")
}

// stamps returns the production times carried by the text deltas of a
// progress payload ("t<unix nanos> ", see stampModel), appended to out,
// read without decoding or allocating so that the measuring subscriber
// stays cheap.
func stamps(out []time.Time, payload []byte) []time.Time {
	marker := []byte(`"delta":"t`)
	for {
		i := bytes.Index(payload, marker)
		if i < 0 {
			return out
		}
		payload = payload[i+len(marker):]
		j := bytes.IndexByte(payload, ' ')
		if j < 0 {
			return out
		}
		ns, ok := int64(0), j > 0
		for _, c := range payload[:j] {
			if c < '0' || c > '9' {
				ok = false
				break
			}
			ns = ns*10 + int64(c-'0')
		}
		if ok {
			out = append(out, time.Unix(0, ns))
		}
		payload = payload[j:]
	}
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
	model := script.New(sc)
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
// way, to see the method's own error.
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

// BenchmarkStartupRecovery reports what the start-up scan costs per
// session (recover.go): a store of 2,000 sessions, each with one finished
// turn, and the time from New until Recovered closes, every session
// visited, none with work left.
func BenchmarkStartupRecovery(b *testing.B) {
	const sessions = 2000
	dir := b.TempDir()
	st, err := pebblestore.Open(filepath.Join(dir, "data"), pebblestore.Options{Logger: quietPebble{}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	sc, _ := script.Parse([]byte(`{"default":{"text":"a short answer of a few words"}}`))
	model := script.New(sc)
	a, _ := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script"), Models: func(string) (harness.Model, error) { return model, nil }})
	rt, _ := New(st, []*Agent{a}, Options{SkipRecovery: true})
	ctx := context.Background()
	for i := 0; i < sessions; i++ {
		session := "s" + strconv.Itoa(i)
		if _, err := rt.Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Text("m-"+session, "hi")}, false); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < sessions; i++ {
		for {
			s, _, err := rt.State(ctx, "assistant", "s"+strconv.Itoa(i))
			if err != nil {
				b.Fatal(err)
			}
			if s.AI.Active == nil && len(s.AI.Messages) == 2 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	rt.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		rt, err := New(st, []*Agent{a}, Options{})
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-rt.Recovered():
		case <-time.After(2 * time.Minute):
			b.Fatal("the scan did not end")
		}
		elapsed := time.Since(start)
		if n := rt.ActiveSessions(); n != 0 {
			b.Fatalf("%d sessions left active after the scan", n)
		}
		rt.Close()
		b.ReportMetric(float64(elapsed.Microseconds())/1000/sessions, "ms/session")
	}
}

// BenchmarkStartupWithAMillionIdleSessions measures start-up at scale: a
// Pebble store on disk with 1,000,000 idle sessions (one event each) and
// 100 held in the middle of a turn. It reports the time from opening the
// store to the end of the start-up scan (the node serves from the
// store's open on; the scan resumes the sessions with work in the
// background), and fails unless exactly the 100 were resumed. A2_IDLE_SESSIONS
// sets another count of idle sessions.
func BenchmarkStartupWithAMillionIdleSessions(b *testing.B) {
	idle := 1_000_000
	if v := os.Getenv("A2_IDLE_SESSIONS"); v != "" {
		idle, _ = strconv.Atoi(v)
	}
	const busy = 100
	dir := filepath.Join(b.TempDir(), "data")
	st, err := pebblestore.Open(dir, pebblestore.Options{Logger: quietPebble{}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	built := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < idle; i += 64 {
				id := "idle-" + strconv.Itoa(i)
				if _, err := st.Append(ctx, id, 0, []protocol.Event{protocol.Inputs.Text(id+"-m1", "hi")}); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d idle sessions written in %v", idle, time.Since(built).Round(time.Millisecond))
	sc, _ := script.Parse([]byte(`{"default":{"text":"held until the benchmark ends","gate":"never"}}`))
	model := script.New(sc)
	a, _ := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script"), Models: func(string) (harness.Model, error) { return model, nil }})
	rt, _ := New(st, []*Agent{a}, Options{SkipRecovery: true})
	for i := range busy {
		session := "busy-" + strconv.Itoa(i)
		if _, err := rt.Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Text("m-"+session, "hi")}, false); err != nil {
			b.Fatal(err)
		}
	}
	for i := range busy {
		for {
			s, _, err := rt.State(ctx, "assistant", "busy-"+strconv.Itoa(i))
			if err != nil {
				b.Fatal(err)
			}
			if s.AI.Status == protocol.StatusStreaming {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	rt.Close()
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		st, err := pebblestore.Open(dir, pebblestore.Options{Logger: quietPebble{}})
		if err != nil {
			b.Fatal(err)
		}
		opened := time.Since(start)
		rt, err := New(st, []*Agent{a}, Options{})
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-rt.Recovered():
		case <-time.After(2 * time.Minute):
			b.Fatal("the scan did not end")
		}
		elapsed := time.Since(start)
		b.StopTimer()
		if n := rt.ActiveSessions(); n != busy {
			b.Fatalf("%d sessions active after the scan, want the %d with work", n, busy)
		}
		for i := range busy {
			if !rt.active(a, "busy-"+strconv.Itoa(i)) {
				b.Fatalf("busy-%d was not resumed", i)
			}
		}
		rt.Close()
		_ = st.Close()
		b.ReportMetric(float64(opened.Microseconds())/1000, "open-ms")
		b.ReportMetric(float64(elapsed.Microseconds())/1000, "start-ms")
		b.StartTimer()
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
			model := script.New(sc)
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
