package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2-runtime/a2/bench/loadgen"
)

// turn3Script is the durable 3-step turn: a model step that calls the demo
// calculator tool, the tool's execution, and the continuation step.
const turn3Script = `{"default":{"text":"let me check","toolCalls":[{"name":"calculator","input":{"expression":"6*7"}}],"then":{"text":"the answer is forty two"}}}`

// BenchmarkHTTPTurn runs the 3-step turn over HTTP against a node process
// (the binary, Pebble on disk in a temporary directory, the script model),
// driven by bench/loadgen in this process: each turn one request, a push
// with stream=1 read to its end. For each history (1, 50 and 500 turns in
// each of 64 sessions, made before the timer starts) it measures b.N
// turns at 1 client (round robin over the 64 sessions) and at 64 clients
// (a session each), and reports turns/s, the push-to-completion p50 and
// p99, the node's and this process's (the clients') CPU per turn, and the
// node's synced writes per turn (its store appends, read from its
// Prometheus endpoint: the node runs with metrics on). Making 64 sessions
// of 500 turns takes about a minute on 2 cores; A2_BENCH_HTTP_HISTORIES=1,50
// picks the histories.
//
//	go test ./cmd/node -run '^$' -bench HTTPTurn -benchtime 640x
//	go run ./bench -only http-turn
func BenchmarkHTTPTurn(b *testing.B) {
	bin := nodeBinary(b)
	script := filepath.Join(b.TempDir(), "turn3.json")
	if err := os.WriteFile(script, []byte(turn3Script), 0o600); err != nil {
		b.Fatal(err)
	}
	const sessions = 64
	histories := []int{1, 50, 500}
	if v := os.Getenv("A2_BENCH_HTTP_HISTORIES"); v != "" {
		histories = nil
		for _, f := range strings.Split(v, ",") {
			h, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || h < 1 {
				b.Fatalf("A2_BENCH_HTTP_HISTORIES=%q: want turn counts of at least 1, comma-separated", v)
			}
			histories = append(histories, h)
		}
	}
	for _, history := range histories {
		b.Run("history="+strconv.Itoa(history), func(b *testing.B) {
			metrics := freePort(b)
			p := startNodeProcess(b, bin, "", script, "--data", b.TempDir(), "--allow-local-store", "--metrics-addr", metrics)
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: sessions}}
			prefix := fmt.Sprintf("h%d", history)
			ctx := context.Background()
			setup := loadgen.Run(ctx, loadgen.Options{URL: p.url, Streams: sessions, Turns: history, Prefix: prefix,
				Spread: 10 * time.Millisecond, OneRequest: true, Client: hc})
			if len(setup.Errors) > 0 {
				b.Fatalf("making the history: %v", setup.Errors[0])
			}
			for _, clients := range []int{1, sessions} {
				b.Run("clients="+strconv.Itoa(clients), func(b *testing.B) {
					turns := max(1, (b.N+clients-1)/clients)
					writes0, node0, self0 := appendsOf(b, metrics), loadgen.ProcessCPU([]int{p.cmd.Process.Pid}), selfCPU()
					b.ResetTimer()
					r := loadgen.Run(ctx, loadgen.Options{URL: p.url, Streams: clients, Sessions: sessions, Turns: turns, Prefix: prefix,
						Spread: 10 * time.Millisecond, OneRequest: true, Client: hc})
					b.StopTimer()
					node, self, writes := loadgen.ProcessCPU([]int{p.cmd.Process.Pid})-node0, selfCPU()-self0, appendsOf(b, metrics)-writes0
					if len(r.Errors) > 0 {
						b.Fatalf("%d turns failed, the first: %v", len(r.Errors), r.Errors[0])
					}
					n := float64(r.Turns)
					b.ReportMetric(n/r.Elapsed.Seconds(), "turns/s")
					b.ReportMetric(ms(loadgen.Quantile(r.Completion, 0.5)), "p50-ms")
					b.ReportMetric(ms(loadgen.Quantile(r.Completion, 0.99)), "p99-ms")
					b.ReportMetric(ms(node)/n, "node-cpu-ms/turn")
					b.ReportMetric(ms(self)/n, "client-cpu-ms/turn")
					b.ReportMetric(writes/n, "writes/turn")
				})
			}
		})
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// selfCPU is this process's user and system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// appendsOf reads the node's count of store appends (synced writes) from
// its Prometheus endpoint.
func appendsOf(b *testing.B, addr string) float64 {
	b.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "a2_store_append_duration_seconds_count") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			b.Fatalf("metrics: %q: %v", line, err)
		}
		return v
	}
	b.Fatalf("metrics: no a2_store_append_duration_seconds_count (read error: %v)", sc.Err())
	return 0
}
