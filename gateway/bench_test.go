package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/a2-runtime/a2/bench/loadgen"
	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/gateway/gatewaytest"
	"github.com/a2-runtime/a2/protocol"
)

// BenchmarkHTTPPush pushes passive messages over HTTP from 10 concurrent
// clients to 100 sessions and reports pushes per second.
func BenchmarkHTTPPush(b *testing.B) {
	f := wrapNodeB(b, `{}`)
	var next atomic.Int64
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < 10; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			hc := &http.Client{}
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				id := fmt.Sprintf("bench-%d-%d", c, i)
				passive := false
				m := protocol.UIMessage{ID: id, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: id}}}
				if _, err := postJSON(ctx, hc, f.URL+sessionsPath+fmt.Sprintf("s%03d", i%100)+"/events", pushBody(protocol.Inputs.Message(m, protocol.MessageOptions{Generate: &passive}))); err != nil {
					b.Error(err)
					return
				}
			}
		}(c)
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pushes/s")
}

// BenchmarkPushToFirstToken measures, over HTTP, the time from a push of a
// generating message to the first streamed text chunk of its answer on the
// session's Server-Sent Events stream (a fresh session each time), with one
// client (the latency of an idle node) and with 10 concurrent clients, on
// a single node (router=single) and through a cluster (router=cluster: the
// HTTP gateway of a gateway node that routes every push and the stream's
// events over the loopback remote to a member, in the same process), so
// that one run compares the two.
func BenchmarkPushToFirstToken(b *testing.B) {
	for _, router := range []string{"single", "cluster"} {
		for _, clients := range []int{1, 10} {
			b.Run(fmt.Sprintf("router=%s/clients=%d", router, clients), func(b *testing.B) { benchFirstToken(b, router == "cluster", clients) })
		}
	}
}

func benchFirstToken(b *testing.B, cluster bool, clients int) {
	f := &fixture{Node: gatewaytest.Start(b, gatewaytest.Options{Script: `{"default":{"text":"a short streamed answer"}}`, Cluster: cluster})}
	var next atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	b.ResetTimer()
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			hc := &http.Client{}
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				session := fmt.Sprintf("first-%d", i)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.URL+sessionsPath+session+"/stream", nil)
				resp, err := hc.Do(req)
				if err != nil {
					cancel()
					b.Error(err)
					return
				}
				t0 := time.Now()
				if _, err := postJSON(ctx, hc, f.URL+sessionsPath+session+"/events", pushBody(protocol.Inputs.Text("q-"+session, "hi"))); err != nil {
					cancel()
					b.Error(err)
					return
				}
				sc := bufio.NewScanner(resp.Body)
				// Lines up to 1 MiB, from a small buffer: a 1-MiB buffer
				// per stream made the client's own allocation (and the
				// collections it caused) most of the measured latency.
				sc.Buffer(make([]byte, 0, 4096), 1<<20)
				for sc.Scan() {
					line := sc.Text()
					if strings.HasPrefix(line, "data:") && strings.Contains(line, `"text-delta"`) {
						mu.Lock()
						lat = append(lat, time.Since(t0))
						mu.Unlock()
						break
					}
				}
				resp.Body.Close()
				cancel()
			}
		}(c)
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) == 0 {
		b.Fatal("no first token observed")
	}
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)-1)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkLoad runs the load generator (bench/loadgen) against a single
// node and against a cluster (a gateway node routing to a member, in this
// process) in one run: 50 sessions of 2 turns each, all at once, the script
// model streaming 50 words at one every 20 ms. It reports turns per
// second, push to first token and to completion (p50, p99) and the
// process's CPU time per turn (server and clients together: they share the
// process, and the machine's cores). A failed turn, or an event lost or
// repeated at a client, fails it.
func BenchmarkLoad(b *testing.B) {
	text := strings.TrimSpace(strings.Repeat("word ", 50))
	for _, router := range []string{"single", "cluster"} {
		b.Run("router="+router, func(b *testing.B) {
			n := gatewaytest.Start(b, gatewaytest.Options{Script: `{"default":{"text":"` + text + `","delayMs":20}}`, Cluster: router == "cluster"})
			var first, done []time.Duration
			turns := 0
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			began := time.Now()
			b.ResetTimer()
			for iter := range b.N {
				r := loadgen.Run(context.Background(), loadgen.Options{URL: n.URL, Streams: 50, Turns: 2, Prefix: fmt.Sprintf("load-%d", iter)})
				if len(r.Errors) > 0 {
					b.Fatalf("%d turns failed: %v", len(r.Errors), r.Errors[0])
				}
				turns += r.Turns
				first = append(first, r.FirstToken...)
				done = append(done, r.Completion...)
			}
			b.StopTimer()
			elapsed := time.Since(began)
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
			sort.Slice(first, func(i, j int) bool { return first[i] < first[j] })
			sort.Slice(done, func(i, j int) bool { return done[i] < done[j] })
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(float64(turns)/elapsed.Seconds(), "turns/s")
			b.ReportMetric(ms(loadgen.Quantile(first, 0.5)), "first-p50-ms")
			b.ReportMetric(ms(loadgen.Quantile(first, 0.99)), "first-p99-ms")
			b.ReportMetric(ms(loadgen.Quantile(done, 0.99)), "done-p99-ms")
			b.ReportMetric(ms(cpu)/float64(turns), "cpu-ms/turn")
		})
	}
}

// BenchmarkRouterState measures one read of an active session's state
// through the Router, on a single node and through a cluster gateway (one
// hop over the loopback remote to the member, and back): the difference is
// the cost of the hop. It reports p50 and p99 per request, one caller.
func BenchmarkRouterState(b *testing.B) {
	for _, router := range []string{"single", "cluster"} {
		b.Run("router="+router, func(b *testing.B) {
			n := gatewaytest.Start(b, gatewaytest.Options{Script: `{"default":{"text":"ok"}}`, Cluster: router == "cluster"})
			var r gateway.Router = gateway.RuntimeRouter{Runtime: n.Runtime}
			if n.ClusterGateway != nil {
				r = n.ClusterGateway.Router()
			}
			ctx := context.Background()
			if _, err := r.Push(ctx, gatewaytest.Agent, "hop", []protocol.Event{protocol.Inputs.Text("m1", "hi")}, false); err != nil {
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				if _, _, err := r.State(ctx, gatewaytest.Agent, "hop"); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[(len(lat)-1)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

func wrapNodeB(b *testing.B, script string) *fixture {
	return &fixture{Node: gatewaytest.Start(b, gatewaytest.Options{Script: script, Gateway: gateway.Options{}})}
}

// BenchmarkHTTPStreams runs 100, 200 and 500 concurrent turns, each
// followed by its own client on the session's SSE stream (bench/loadgen,
// as bench/cmd/loadgen runs against a node), through one node on loopback
// (gatewaytest: Pebble on its in-memory filesystem, so no fsync): the
// script model streams 250 words, one every 20 ms (50 tokens per second),
// and the streams start spread over the first second. It reports the
// process's CPU time per delivered text delta (server and clients
// together: they share the process) and the gaps between two consecutive
// deltas at a client (nominally 20 ms plus the script's timer slack), over
// all streams: p50, p99 and the longest. A delta held back shows as a long
// gap followed by a short one. A turn that misses a delta fails the
// benchmark.
func BenchmarkHTTPStreams(b *testing.B) {
	for _, n := range []int{100, 200, 500} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			const words = 250
			text := strings.TrimSpace(strings.Repeat("word ", words))
			f := wrapNodeB(b, `{"default":{"text":"`+text+`","delayMs":20}}`)
			var gaps []time.Duration
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			b.ResetTimer()
			for iter := 0; iter < b.N; iter++ {
				r := loadgen.Run(context.Background(), loadgen.Options{URL: f.URL, Streams: n, Prefix: fmt.Sprintf("streams-%d", iter)})
				if len(r.Errors) > 0 || r.Deltas != n*words {
					b.Fatalf("%d text deltas of %d streamed; failures: %v", r.Deltas, n*words, r.Errors)
				}
				gaps = append(gaps, r.Gaps...)
			}
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
			sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n*words), "cpu-us/delta")
			b.ReportMetric(ms(gaps[len(gaps)/2]), "gap-p50-ms")
			b.ReportMetric(ms(gaps[len(gaps)*99/100]), "gap-p99-ms")
			b.ReportMetric(ms(gaps[len(gaps)-1]), "gap-max-ms")
		})
	}
}
