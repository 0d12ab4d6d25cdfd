// Command bench runs A2's bench suite, one benchmark at a time (the
// machine's cores are the benchmarks'), and prints one table of the
// figures that matter, each beside its baseline where it has one:
//
//	go run ./bench           # the suite, a few minutes on 2 cores
//	go run ./bench -quick    # smaller sizes, about a minute
//	go run ./bench -only fold,first-token
//
// The rows: the fold per event, store appends against raw Pebble, progress
// batching, a simple turn's synced writes, the 3-step turn against the
// conversation's length (in process, and over HTTP against a node
// process at 1 and 64 clients), push to first token and one
// router read (single node against a cluster hop), the load generator's
// load on a single node and on a cluster, the 3-step turn at 64 clients
// over 1,000 sessions against a single node on Pebble, one on PostgreSQL
// and a cluster of processes on PostgreSQL, the same turn on A2 and on
// Restate (a durable-execution engine, from bench/peer's lockfile) in one
// sitting, and start-up with a million idle sessions. Each row is a `go test -bench` run of the package that owns the
// benchmark (docs/benchmarks.md describes each and keeps their figures);
// bench/loadgen and bench/cmd/loadgen drive a running node or cluster over
// HTTP.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// entry is one benchmark of the suite.
type entry struct {
	key      string // for -only
	what     string
	pkg      string
	bench    string // the -bench pattern
	times    string // -benchtime, full and quick
	quick    string
	env      []string // full; quickEnv for -quick
	quickEnv []string
	// metrics are the units shown, in order.
	metrics []string
}

var suite = []entry{
	{key: "fold", what: "fold of a realistic session log, per event", pkg: "./protocol", bench: "^BenchmarkFold$",
		times: "200x", quick: "20x", metrics: []string{"ns/event", "events/log", "MB/s"}},
	{key: "append", what: "store appends, against raw Pebble in the same run", pkg: "./persistence/pebble", bench: "^BenchmarkAppend$/parallel=(1|64)$",
		times: "4000x", quick: "1000x", metrics: []string{"events/s", "raw-events/s", "x-raw"}},
	{key: "progress", what: "progress batching: chunks per event, chunk to subscriber (x fsync)", pkg: "./actors", bench: "^BenchmarkProgressBatching$/shape=burst10/streams=(100|1000)$",
		times: "1x", quick: "1x", metrics: []string{"chunks/event", "p99-ms", "p99/fsync"}},
	{key: "turn", what: "synced writes of a simple text turn", pkg: "./actors", bench: "^BenchmarkSimpleTurn$",
		times: "300x", quick: "100x", metrics: []string{"writes/turn", "writes/first-turn"}},
	{key: "history", what: "the 3-step turn (model step, tool, continuation) in sessions with 1, 50 and 500 turns of history: node CPU and synced writes per turn", pkg: "./actors", bench: "^BenchmarkToolTurnHistory$",
		times: "300x", quick: "50x", metrics: []string{"cpu-us/turn", "writes/turn"}},
	{key: "http-turn", what: "the 3-step turn over HTTP against a node process, each turn one request (push with stream=1), at 1 and 64 clients in sessions with 1, 50 and 500 turns of history", pkg: "./cmd/node", bench: "^BenchmarkHTTPTurn$",
		times: "640x", quick: "128x", quickEnv: []string{"A2_BENCH_HTTP_HISTORIES=1,50"},
		metrics: []string{"turns/s", "p50-ms", "p99-ms", "node-cpu-ms/turn", "client-cpu-ms/turn", "writes/turn"}},
	{key: "first-token", what: "push to first streamed token over HTTP, single node against a cluster hop", pkg: "./gateway", bench: "^BenchmarkPushToFirstToken$",
		times: "2000x", quick: "300x", metrics: []string{"p50-ms", "p99-ms"}},
	{key: "hop", what: "one state read through the router, single node against a cluster hop", pkg: "./gateway", bench: "^BenchmarkRouterState$",
		times: "2000x", quick: "500x", metrics: []string{"p50-ms", "p99-ms"}},
	{key: "load", what: "load: 50 sessions x 2 turns at 50 tokens/s, single node against a cluster (one process)", pkg: "./gateway", bench: "^BenchmarkLoad$",
		times: "3x", quick: "1x", metrics: []string{"turns/s", "first-p50-ms", "first-p99-ms", "done-p99-ms", "cpu-ms/turn"}},
	{key: "cluster", what: "the 3-step turn over HTTP, each turn one request, at 64 clients over 1,000 warm sessions, against node processes: a single node on Pebble, a single node on PostgreSQL, three members and a gateway on PostgreSQL (x-pebble: ratio to the Pebble node of the same run)", pkg: "./cmd/node", bench: "^BenchmarkClusterTurn$",
		times: "6400x", quick: "1280x",
		metrics: []string{"turns/s", "p50-ms", "p99-ms", "cpu-ms/turn", "node-cpu-ms/turn", "m1-cpu-ms/turn", "m2-cpu-ms/turn", "m3-cpu-ms/turn", "gateway-cpu-ms/turn",
			"xact/turn", "pg-cpu-ms/turn", "client-cpu-ms/turn", "x-pebble-turns/s", "x-pebble-p50", "x-pebble-p99", "x-pebble-cpu"}},
	{key: "peer", what: "the 3-step turn over HTTP, each turn one request, on A2 (a node on Pebble) and on Restate (its server and a Node.js service, from bench/peer's lockfile), alternating in one run: at 64 clients over 1,000 sessions, and the p50 at one client (x-: A2's over Restate's)", pkg: "./cmd/node", bench: "^BenchmarkPeerTurn$",
		times: "6400x", quick: "1280x", quickEnv: []string{"A2_BENCH_PEER_ROUNDS=1"},
		metrics: []string{"a2-turns/s", "restate-turns/s", "x-turns/s", "x-turns/s-min", "x-turns/s-max", "a2-p99-ms", "restate-p99-ms", "x-p99", "a2-cpu-ms/turn", "restate-cpu-ms/turn", "x-cpu", "a2-p50-1-ms", "restate-p50-1-ms", "x-p50-1"}},
	{key: "failover", what: "SIGKILL of one of 3 members while 24 sessions stream a turn through the gateway: from the kill, the killed member's sessions' state read answering again and their streams' next event (worst and median), and every turn completed", pkg: "./cmd/node", bench: "^BenchmarkClusterFailover$",
		times: "3x", quick: "1x", metrics: []string{"answer-max-ms", "answer-p50-ms", "stream-max-ms", "stream-p50-ms", "all-done-ms"}},
	{key: "startup", what: "start-up with idle sessions and 100 with work (index of sessions with work)", pkg: "./actors", bench: "^BenchmarkStartupWithAMillionIdleSessions$",
		times: "1x", quick: "1x", env: []string{"A2_IDLE_SESSIONS=1000000"}, quickEnv: []string{"A2_IDLE_SESSIONS=50000"}, metrics: []string{"open-ms", "start-ms"}},
}

// row is one result line.
type row struct {
	what, name string
	values     map[string]string
}

func main() {
	quick := flag.Bool("quick", false, "smaller sizes: a quick look, not figures to record")
	only := flag.String("only", "", "comma-separated keys of the benchmarks to run: "+keys())
	flag.Parse()
	var pick []string
	if *only != "" {
		pick = strings.Split(*only, ",")
	}
	var rows []row
	var notes []string
	failed := false
	began := time.Now()
	for i, e := range suite {
		if pick != nil && !slices.Contains(pick, e.key) {
			continue
		}
		times, env := e.times, e.env
		if *quick {
			times, env = e.quick, e.quickEnv
		}
		fmt.Fprintf(os.Stderr, "[%d/%d %s] %s: go test %s -bench '%s' -benchtime %s\n", i+1, len(suite), time.Since(began).Round(time.Second), e.key, e.pkg, e.bench, times)
		out, err := run(e, times, env)
		if err != nil {
			failed = true
			fmt.Fprintf(os.Stderr, "%s failed: %v\n%s\n", e.key, err, out)
			continue
		}
		rows = append(rows, parse(e, out)...)
		notes = append(notes, skips(out)...)
	}
	printTable(rows)
	for _, n := range notes {
		fmt.Printf("\n%s\n", n)
	}
	fmt.Printf("\n%d rows in %s; machine: %d cores. docs/benchmarks.md says what each measures and keeps their figures.\n", len(rows), time.Since(began).Round(time.Second), runtime.NumCPU())
	if failed {
		os.Exit(1)
	}
}

func keys() string {
	var k []string
	for _, e := range suite {
		k = append(k, e.key)
	}
	return strings.Join(k, ", ")
}

// run runs one benchmark and returns its output.
func run(e entry, times string, env []string) ([]byte, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", e.bench, "-benchtime", times, "-count", "1", "-timeout", "30m", e.pkg)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// parse reads the benchmark lines of out: name, iterations, then value
// and unit pairs.
func parse(e entry, out []byte) []row {
	var rows []row
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		r := row{what: e.what, name: f[0], values: map[string]string{}}
		for i := 2; i+1 < len(f); i += 2 {
			r.values[f[i+1]] = f[i]
		}
		var shown []string
		for _, m := range e.metrics {
			if v, ok := r.values[m]; ok {
				shown = append(shown, v+" "+m)
			}
		}
		r.values = map[string]string{"": strings.Join(shown, ", ")}
		rows = append(rows, r)
	}
	return rows
}

// skips returns the lines of out in which a benchmark says it skipped a
// part, and why ("SKIP: name: why"): go test prints a benchmark's own
// skip only with -v.
func skips(out []byte) []string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "SKIP: ") {
			lines = append(lines, sc.Text())
		}
	}
	return lines
}

// printTable prints the table, in Markdown.
func printTable(rows []row) {
	fmt.Println("| what | benchmark | figures |")
	fmt.Println("|---|---|---|")
	last := ""
	for _, r := range rows {
		what := r.what
		if what == last {
			what = ""
		}
		last = r.what
		fmt.Printf("| %s | %s | %s |\n", what, strings.TrimSuffix(r.name, suffix(r.name)), r.values[""])
	}
}

// suffix is the -N GOMAXPROCS suffix of a benchmark's name.
func suffix(name string) string {
	if i := strings.LastIndex(name, "-"); i > 0 && !strings.ContainsAny(name[i+1:], "=/") {
		return name[i:]
	}
	return ""
}
