// Progress batching: how model chunks become progress events, and how
// long a chunk takes to reach a subscriber, against the store's fsync.

package actors

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/internal/gctune"
	"github.com/a2-runtime/a2/internal/testutil"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
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
// their bursts came to arrive together: see docs/benchmarks.md,
// "The 1,000-stream p99 within the bound".)
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
