// Command tracetree is a small trace viewer for a terminal: an OTLP/HTTP
// endpoint that prints each trace it receives as an indented tree, once no
// span of it has arrived for a moment. Point a node at it with the
// standard variables:
//
//	go run ./cmd/tracetree --addr 127.0.0.1:4318 &
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 go run ./cmd/node
//
// docs/telemetry.md shows its output for a turn, and how to use a full
// viewer (Jaeger) instead.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/a2-runtime/a2/telemetry/otlpview"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:4318", "address to receive OTLP/HTTP traces on (POST /v1/traces)")
	quiet := flag.Duration("quiet", time.Second, "print a trace once no span of it has arrived for this long")
	skip := flag.String("skip", "a2.request.id,a2.generation.id,a2.turn.id", "comma-separated attribute keys (substrings) to leave out of the tree")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, *quiet, strings.Split(*skip, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "tracetree:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string, quiet time.Duration, skip []string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	var (
		mu      sync.Mutex
		seen    = map[string]int{}       // spans of each trace already printed
		changed = map[string]time.Time{} // when each trace last grew
	)
	recv := &otlpview.Receiver{}
	recv.OnSpans = func() {
		ids, counts := recv.Traces()
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if counts[id] != seen[id] {
				changed[id] = time.Now()
			}
		}
	}
	srv := &http.Server{Handler: recv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("tracetree: receiving OTLP/HTTP traces at http://%s/v1/traces\n", ln.Addr())
	tick := time.NewTicker(quiet / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		case <-tick.C:
		}
		mu.Lock()
		var due []string
		for id, at := range changed {
			if time.Since(at) >= quiet {
				due = append(due, id)
				delete(changed, id)
			}
		}
		mu.Unlock()
		for _, id := range due {
			spans := recv.Trace(id)
			mu.Lock()
			seen[id] = len(spans)
			mu.Unlock()
			fmt.Printf("\ntrace %s (%d spans)\n%s", id, len(spans), otlpview.Tree(spans, skip...))
		}
	}
}
