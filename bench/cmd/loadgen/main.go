// Command loadgen runs concurrent turns against a running A2 node over
// HTTP, each followed by its own client on the session's SSE stream, and
// prints what the clients saw: failed turns and the gaps between
// consecutive text deltas. Start the node in test mode with a script
// whose reply streams at a known pace (docs/testing.md), for example 250
// words with "delayMs": 20, then:
//
//	go run ./bench/cmd/loadgen -url http://127.0.0.1:8080 -streams 200
//
// It sends traffic only where -url points; use a node of your own.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/a2-runtime/a2/bench/loadgen"
)

func main() {
	var o loadgen.Options
	flag.StringVar(&o.URL, "url", "http://127.0.0.1:8080", "the node's base URL")
	flag.StringVar(&o.Agent, "agent", "assistant", "the agent's name")
	flag.IntVar(&o.Streams, "streams", 100, "concurrent turns, one session each")
	flag.StringVar(&o.Prefix, "prefix", fmt.Sprintf("load-%d", time.Now().Unix()), "session name prefix")
	flag.DurationVar(&o.Spread, "spread", time.Second, "the time over which the streams start")
	flag.DurationVar(&o.Timeout, "timeout", time.Minute, "the longest one turn may take")
	flag.Parse()
	if o.Streams <= 0 {
		fmt.Fprintln(os.Stderr, "loadgen: -streams must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	began := time.Now()
	r := loadgen.Run(ctx, o)
	fmt.Printf("%d turns of %d finished in %v, %d text deltas\n", r.Turns, o.Streams, time.Since(began).Round(time.Millisecond), r.Deltas)
	if len(r.Gaps) > 0 {
		fmt.Printf("gaps between deltas: p50 %v  p99 %v  p99.9 %v  max %v\n",
			r.Gap(0.5).Round(10*time.Microsecond), r.Gap(0.99).Round(10*time.Microsecond),
			r.Gap(0.999).Round(10*time.Microsecond), r.Gap(1).Round(10*time.Microsecond))
	}
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
