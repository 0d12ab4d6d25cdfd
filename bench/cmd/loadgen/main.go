// Command loadgen runs concurrent turns against a running A2 node, or a
// cluster's gateways, over HTTP, each session followed by its own client on
// its SSE stream, and prints what the clients saw: turns and text deltas
// per second, push to first token and to completion (p50, p99), the gaps
// between consecutive deltas, failed turns, the events the store holds per
// turn, and, given the node processes' PIDs, their CPU time per turn.
// Start the nodes in test mode with a script whose reply streams at the
// token rate you want (docs/testing.md): 250 words with "delayMs": 20 is 50
// tokens per second. Then:
//
//	go run ./bench/cmd/loadgen -url http://127.0.0.1:8080 -streams 200
//	go run ./bench/cmd/loadgen -urls http://127.0.0.1:8080,http://127.0.0.1:8090 -streams 100 -turns 5 -pids 4242,4243,4244
//
// It sends traffic only where -url or -urls point; use nodes of your own.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a2-runtime/a2/bench/loadgen"
	"github.com/a2-runtime/a2/client"
)

func main() {
	var o loadgen.Options
	var urls, pids string
	flag.StringVar(&o.URL, "url", "http://127.0.0.1:8080", "the node's base URL")
	flag.StringVar(&urls, "urls", "", "comma-separated base URLs of several gateways or nodes (sessions round robin); overrides -url")
	flag.StringVar(&o.Agent, "agent", "assistant", "the agent's name")
	flag.IntVar(&o.Streams, "streams", 100, "concurrent sessions, each with its own stream")
	flag.IntVar(&o.Turns, "turns", 1, "turns per session, one after the other")
	flag.StringVar(&o.Prefix, "prefix", fmt.Sprintf("load-%d", time.Now().Unix()), "session name prefix")
	flag.DurationVar(&o.Spread, "spread", time.Second, "the time over which the sessions start")
	flag.DurationVar(&o.Timeout, "timeout", time.Minute, "the longest one turn may take")
	flag.StringVar(&pids, "pids", "", "comma-separated PIDs of the node processes on this machine, for their CPU time per turn")
	flag.IntVar(&o.Sessions, "sessions", 0, "sessions the streams take turns in, round robin (default: one per stream)")
	flag.BoolVar(&o.OneRequest, "one-request", false, "each turn one request: a push with stream=1 that answers with the turn's stream")
	quiet := flag.Bool("quiet", false, "no progress line")
	flag.Parse()
	if o.Streams <= 0 || o.Turns <= 0 {
		fmt.Fprintln(os.Stderr, "loadgen: -streams and -turns must be positive")
		os.Exit(2)
	}
	if urls != "" {
		o.URLs = strings.Split(urls, ",")
	}
	if !*quiet {
		o.Progress = os.Stderr
	}
	procs, err := parsePIDs(pids)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cpu0 := loadgen.ProcessCPU(procs)
	r := loadgen.Run(ctx, o)
	cpu := loadgen.ProcessCPU(procs) - cpu0
	secs := r.Elapsed.Seconds()
	fmt.Printf("%d streams over %d sessions, %d turns of %d finished in %v: %.1f turns/s, %.0f text deltas/s\n",
		o.Streams, max(o.Sessions, o.Streams), r.Turns, o.Streams*o.Turns, r.Elapsed.Round(time.Millisecond), float64(r.Turns)/secs, float64(r.Deltas)/secs)
	q := func(d []time.Duration, p float64) time.Duration {
		return loadgen.Quantile(d, p).Round(10 * time.Microsecond)
	}
	fmt.Printf("push to first token: p50 %v  p99 %v;  to completion: p50 %v  p99 %v\n",
		q(r.FirstToken, 0.5), q(r.FirstToken, 0.99), q(r.Completion, 0.5), q(r.Completion, 0.99))
	if len(r.Gaps) > 0 {
		fmt.Printf("gaps between deltas: p50 %v  p99 %v  p99.9 %v  max %v\n",
			r.Gap(0.5).Round(10*time.Microsecond), r.Gap(0.99).Round(10*time.Microsecond),
			r.Gap(0.999).Round(10*time.Microsecond), r.Gap(1).Round(10*time.Microsecond))
	}
	if r.Turns > 0 {
		if events := storedEvents(o); events > 0 {
			fmt.Printf("events persisted per turn: %.1f\n", float64(events)/float64(r.Turns))
		}
		if len(procs) > 0 {
			fmt.Printf("node CPU per turn: %.2f ms (%d processes, %v in all)\n", float64(cpu.Microseconds())/1000/float64(r.Turns), len(procs), cpu.Round(time.Millisecond))
		}
	}
	fmt.Printf("errors: %d\n", len(r.Errors))
	for i, err := range r.Errors {
		if i == 5 {
			fmt.Printf("... and %d more failures\n", len(r.Errors)-5)
			break
		}
		fmt.Println("failed:", err)
	}
	if len(r.Errors) > 0 {
		os.Exit(1)
	}
}

// storedEvents adds up the sessions' last indexes, read through the first
// URL (the events the store holds for them).
func storedEvents(o loadgen.Options) uint64 {
	base := o.URL
	if len(o.URLs) > 0 {
		base = o.URLs[0]
	}
	c, err := client.New(base, o.Agent, client.Options{})
	if err != nil {
		return 0
	}
	var (
		mu    sync.Mutex
		total uint64
		wg    sync.WaitGroup
	)
	slots := make(chan struct{}, 16)
	for s := range max(o.Sessions, o.Streams) {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, idx, err := c.State(ctx, fmt.Sprintf("%s-%d", o.Prefix, s)); err == nil {
				mu.Lock()
				total += idx
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return total
}

func parsePIDs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("-pids: %q is not a PID", f)
		}
		out = append(out, pid)
	}
	return out, nil
}
