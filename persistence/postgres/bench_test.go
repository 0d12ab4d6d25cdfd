package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/protocol"
)

// BenchmarkAppend measures appends of one small event per call, each of
// `parallel` workers appending to its own session, against the server of
// A2_TEST_POSTGRES_URL (a fresh schema per sub-benchmark). It mirrors the
// Pebble store's BenchmarkAppend (same event, same metrics but the fsync
// counts, which only the server knows): events/s, p50-µs and p99-µs of one
// Append. The pool has parallel+2 connections.
func BenchmarkAppend(b *testing.B) {
	url := testURL(b)
	for _, parallel := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("parallel=%d", parallel), func(b *testing.B) {
			s := openStore(b, url, newSchema(b, url), Options{MaxConns: int32(parallel + 2)})
			last := make([]uint64, parallel)
			lat := make([][]time.Duration, parallel)
			errs := make([]error, parallel)
			var next atomic.Int64
			b.SetBytes(int64(len(benchEvent(0, 0).Payload)))
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for w := range parallel {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						t0 := time.Now()
						got, err := s.Append(context.Background(), benchSession(w), last[w], []protocol.Event{benchEvent(w, int(last[w]))})
						if err != nil {
							errs[w] = err
							return
						}
						lat[w] = append(lat[w], time.Since(t0))
						last[w] = got[0].Index
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			all := slices.Concat(lat...)
			slices.Sort(all)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// benchEvent is the event appended by worker w as its n-th, the same as the
// Pebble benchmark's.
func benchEvent(w, n int) protocol.Event {
	id := fmt.Sprintf("bench-w%03d-%08d", w, n)
	return protocol.Event{
		ID:      id,
		Type:    "ai.generation.progress",
		Payload: fmt.Appendf(nil, `{"generationId":"g-%03d","chunks":[{"type":"text-delta","id":"t1","delta":"a few words of model output, %08d"}]}`, w, n),
	}
}

func benchSession(w int) string { return fmt.Sprintf("bench-session-%03d", w) }
