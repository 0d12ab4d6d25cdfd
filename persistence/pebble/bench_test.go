package pebble

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	dto "github.com/prometheus/client_model/go"

	"github.com/a2-runtime/a2/internal/testutil"
	"github.com/a2-runtime/a2/protocol"
)

// BenchmarkAppend measures synced appends of one small event (about 200
// bytes encoded) per call, each of `parallel` workers appending to its own
// session, on a temporary directory of the real filesystem (real fsync).
//
// The baseline is Pebble alone (same options), committing with pebble.Sync
// batches of the same keys and bytes the store writes per append: the log
// record, the event-ID index entry and the session meta. Store and baseline
// run in the same benchmark, in alternating rounds (store, raw, store, raw,
// ...) of b.N/benchRounds appends each, so that the disk's slow minutes
// weigh on both alike; only the store's rounds are timed by b.
//
// Reported, for the store and (prefixed raw-) for the baseline:
//   - events/s: appended events per second of append time;
//   - syncs/s and events/sync: WAL fsyncs counted by Pebble's
//     LogWriter.FsyncLatency histogram (one sample per fsync), so
//     events/sync is the group-commit factor;
//   - p50-µs, p99-µs: latency of one Append (or one baseline commit);
//   - x-raw: the store's events/s over the baseline's.
func BenchmarkAppend(b *testing.B) {
	for _, parallel := range []int{1, 8, 64, 128, 1024} {
		b.Run(fmt.Sprintf("parallel=%d", parallel), func(b *testing.B) {
			store := &benchRun{a: newStoreAppender(b, parallel)}
			raw := &benchRun{a: newRawAppender(b, parallel)}
			defer store.close(b)
			defer raw.close(b)
			e := benchEvent(0, 0)
			e.Session, e.Index, e.Time = benchSession(0), 1, time.Now().UnixMilli()
			b.SetBytes(int64(len(encodeEvent(nil, &e))))
			b.ResetTimer()
			b.StopTimer()
			for round := range benchRounds {
				ops := b.N / benchRounds
				if round < b.N%benchRounds {
					ops++
				}
				b.StartTimer()
				store.round(b, parallel, ops)
				b.StopTimer()
				raw.round(b, parallel, ops)
			}
			store.report(b, "")
			raw.report(b, "raw-")
			if store.elapsed > 0 && raw.elapsed > 0 {
				b.ReportMetric(store.rate()/raw.rate(), "x-raw")
			}
		})
	}
}

const benchRounds = 4

// appender performs one synced append for worker w.
type appender interface {
	append(w int) error
	appendEvent(w int, e protocol.Event) error
	fsyncs() uint64
	close() error
}

// benchEvent is the event appended by worker w as its n-th: about 200 bytes
// once encoded.
func benchEvent(w, n int) protocol.Event {
	id := fmt.Sprintf("bench-w%03d-%08d", w, n)
	return protocol.Event{
		ID:      id,
		Type:    "ai.generation.progress",
		Payload: fmt.Appendf(nil, `{"generationId":"g-%03d","chunks":[{"type":"text-delta","id":"t1","delta":"a few words of model output, %08d"}]}`, w, n),
	}
}

func benchSession(w int) string { return fmt.Sprintf("bench-session-%03d", w) }

// benchRun accumulates the measurements of one appender over its rounds.
type benchRun struct {
	a         appender
	n         int
	elapsed   time.Duration
	syncs     uint64
	latencies []time.Duration
}

// round performs ops appends spread over parallel workers.
func (r *benchRun) round(b *testing.B, parallel, ops int) {
	var next atomic.Int64
	lat := make([][]time.Duration, parallel)
	errs := make([]error, parallel)
	syncsBefore := r.a.fsyncs()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(ops) {
				t0 := time.Now()
				if err := r.a.append(w); err != nil {
					errs[w] = err
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	r.elapsed += time.Since(start)
	r.syncs += r.a.fsyncs() - syncsBefore
	r.n += ops
	r.latencies = append(r.latencies, slices.Concat(lat...)...)
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

func (r *benchRun) rate() float64 { return float64(r.n) / r.elapsed.Seconds() }

func (r *benchRun) report(b *testing.B, prefix string) {
	if r.n == 0 {
		return
	}
	slices.Sort(r.latencies)
	b.ReportMetric(r.rate(), prefix+"events/s")
	b.ReportMetric(float64(r.syncs)/r.elapsed.Seconds(), prefix+"syncs/s")
	if r.syncs > 0 {
		b.ReportMetric(float64(r.n)/float64(r.syncs), prefix+"events/sync")
	}
	b.ReportMetric(float64(r.latencies[len(r.latencies)/2].Microseconds()), prefix+"p50-µs")
	b.ReportMetric(float64(r.latencies[len(r.latencies)*99/100].Microseconds()), prefix+"p99-µs")
}

func (r *benchRun) close(b *testing.B) {
	if err := r.a.close(); err != nil {
		b.Fatal(err)
	}
}

// storeAppender appends through the Store.
type storeAppender struct {
	s    *Store
	last []uint64 // per worker; each worker owns its session
}

func newStoreAppender(b *testing.B, parallel int) *storeAppender {
	s, err := Open(b.TempDir(), Options{Logger: testLogger{b}})
	if err != nil {
		b.Fatal(err)
	}
	return &storeAppender{s: s, last: make([]uint64, parallel)}
}

func (a *storeAppender) append(w int) error {
	return a.appendEvent(w, benchEvent(w, int(a.last[w])))
}

func (a *storeAppender) appendEvent(w int, e protocol.Event) error {
	got, err := a.s.Append(context.Background(), benchSession(w), a.last[w], []protocol.Event{e})
	if err != nil {
		return err
	}
	a.last[w] = got[0].Index
	return nil
}

func (a *storeAppender) fsyncs() uint64 {
	m, err := a.s.Metrics()
	if err != nil {
		return 0
	}
	return fsyncCount(m)
}

func (a *storeAppender) close() error { return a.s.Close() }

// rawAppender commits, with Pebble alone, what the store writes for one
// event: its log record, its event-ID index entry and the session meta.
type rawAppender struct {
	db   *pebbledb.DB
	last []uint64
}

func newRawAppender(b *testing.B, parallel int) *rawAppender {
	// The same Pebble options as the store's (cache, filters, format).
	db, err := pebbledb.Open(b.TempDir(), pebbleOptions(Options{Logger: testLogger{b}}))
	if err != nil {
		b.Fatal(err)
	}
	return &rawAppender{db: db, last: make([]uint64, parallel)}
}

func (a *rawAppender) append(w int) error {
	return a.appendEvent(w, benchEvent(w, int(a.last[w])))
}

func (a *rawAppender) appendEvent(w int, e protocol.Event) error {
	session := benchSession(w)
	a.last[w]++
	e.Session, e.Index, e.Time = session, a.last[w], time.Now().UnixMilli()
	batch := a.db.NewBatch()
	defer batch.Close()
	if err := batch.Set(logKey(session, e.Index), encodeEvent(nil, &e), nil); err != nil {
		return err
	}
	if err := batch.Set(idKey(e.ID), encodeRef(nil, session, e.Index), nil); err != nil {
		return err
	}
	if err := batch.Set(metaKey(session), encodeMeta(nil, e.Index), nil); err != nil {
		return err
	}
	return batch.Commit(pebbledb.Sync)
}

func (a *rawAppender) fsyncs() uint64 { return fsyncCount(a.db.Metrics()) }

func (a *rawAppender) close() error { return a.db.Close() }

// fsyncCount is the number of WAL fsyncs so far: the sample count of
// Pebble's fsync latency histogram, which observes every WAL sync.
func fsyncCount(m *pebbledb.Metrics) uint64 {
	if m.LogWriter.FsyncLatency == nil {
		return 0
	}
	var pb dto.Metric
	if err := m.LogWriter.FsyncLatency.Write(&pb); err != nil {
		return 0
	}
	return pb.GetHistogram().GetSampleCount()
}

// BenchmarkPacedAppend measures the latency of synced appends under the
// load of BenchmarkProgressBatching's burst10 shape (actors/bench_test.go)
// without the runtime around the store: each of `streams` sessions appends
// one progress event of ten text deltas (about 800 bytes encoded) every
// 200 ms, the sessions' phases spread evenly over the period, for 3 s. It
// is the floor the store and the disk set under the runtime's
// chunk-to-subscriber latency at that load: a durable chunk waits at least
// for one such append.
//
// Reported for the store and (prefixed raw-) for Pebble alone committing
// the same keys and bytes from each session's goroutine: p50-ms and p99-ms
// of one append, from call to return; fsync-p50-ms, the median of 200
// 256-byte writes each followed by fsync on the same disk, measured first;
// and p99/fsync.
func BenchmarkPacedAppend(b *testing.B) {
	for _, streams := range []int{100, 1000} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			fsync := testutil.MedianFsync(b, b.TempDir())
			store := &benchRun{a: newStoreAppender(b, streams)}
			raw := &benchRun{a: newRawAppender(b, streams)}
			defer store.close(b)
			defer raw.close(b)
			for range b.N {
				for _, r := range []*benchRun{store, raw} {
					syncs := r.a.fsyncs()
					r.paced(b, streams)
					r.syncs += r.a.fsyncs() - syncs
				}
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			for _, r := range []struct {
				prefix string
				run    *benchRun
			}{{"", store}, {"raw-", raw}} {
				slices.Sort(r.run.latencies)
				p99 := r.run.latencies[len(r.run.latencies)*99/100]
				b.ReportMetric(ms(r.run.latencies[len(r.run.latencies)/2]), r.prefix+"p50-ms")
				b.ReportMetric(ms(p99), r.prefix+"p99-ms")
				b.ReportMetric(float64(p99)/float64(fsync), r.prefix+"p99/fsync")
				b.ReportMetric(float64(len(r.run.latencies))/float64(r.run.syncs), r.prefix+"events/sync")
			}
			b.ReportMetric(ms(fsync), "fsync-p50-ms")
		})
	}
}

const (
	pacedEvery  = 200 * time.Millisecond
	pacedRounds = 15 // 3 s
)

// pacedEvent is a progress event of ten text deltas, like one of burst10's.
func pacedEvent(w, n int) protocol.Event {
	p := fmt.Appendf(nil, `{"generationId":"g-%04d","chunks":[`, w)
	for i := range 10 {
		if i > 0 {
			p = append(p, ',')
		}
		p = fmt.Appendf(p, `{"type":"text-delta","id":"t","delta":"t%019d "}`, time.Now().UnixNano()+int64(i))
	}
	return protocol.Event{ID: fmt.Sprintf("paced-w%04d-%08d", w, n), Type: "ai.generation.progress", Payload: append(p, "]}"...)}
}

// paced runs one paced load of streams sessions, pacedRounds appends each.
func (r *benchRun) paced(b *testing.B, streams int) {
	lat := make([][]time.Duration, streams)
	errs := make([]error, streams)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := start.Add(time.Duration(w) * pacedEvery / time.Duration(streams))
			for n := range pacedRounds {
				time.Sleep(time.Until(next))
				next = next.Add(pacedEvery)
				t0 := time.Now()
				if err := r.a.appendEvent(w, pacedEvent(w, n)); err != nil {
					errs[w] = err
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	r.latencies = append(r.latencies, slices.Concat(lat...)...)
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}
