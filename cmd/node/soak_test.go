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
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/a2-runtime/a2/bench/loadgen"
)

// BenchmarkSoak runs the 3-step turn for A2_SOAK (a duration) against a
// single node on Pebble and against three members and a gateway on
// PostgreSQL, with 16 closed-loop clients. Each round gives every session
// of a pool of A2_SOAK_SESSIONS (default 2,000) one turn; rounds alternate
// between two pools, and every 20 rounds both are replaced by new ones, so
// that a session has at most 10 turns (its state stays small) and, idle a
// round long, is passivated (after 2 s) and activated again from the store
// at its next turn. Every 10 s it samples each process's live heap (after
// a collection), goroutines, open sockets and pipes, threads and resident memory. It
// fails on any failed turn and on growth: the last quarter's highest
// sample against the first quarter's (after a tenth of the run as
// warm-up) may not exceed it by more than half plus 32 MB for the live
// heap, a fifth plus 50 for goroutines, 20 open sockets and pipes (the
// store's own files are not counted) or 10 threads.
// Resident memory is reported, not bounded: a node lets its heap grow to 9
// times what is live (docs/http.md, "Memory and the garbage collector").
// It is not part of the suite (docs/reliability.md):
//
//	A2_SOAK=1h go test ./cmd/node -run '^$' -bench '^BenchmarkSoak$' -benchtime 1x -timeout 0
func BenchmarkSoak(b *testing.B) {
	v := os.Getenv("A2_SOAK")
	if v == "" {
		b.Skip("a soak runs for a while: A2_SOAK=1h go test ./cmd/node -run '^$' -bench '^BenchmarkSoak$' -benchtime 1x -timeout 0")
	}
	dur, err := time.ParseDuration(v)
	if err != nil || dur < time.Minute {
		b.Fatalf("A2_SOAK=%q: a duration of a minute or more", v)
	}
	sessions := 2000
	if n, err := strconv.Atoi(os.Getenv("A2_SOAK_SESSIONS")); err == nil && n > 0 {
		sessions = n
	}
	nodeBinary(b)
	script := filepath.Join(b.TempDir(), "turn3.json")
	if err := os.WriteFile(script, []byte(turn3Script), 0o600); err != nil {
		b.Fatal(err)
	}
	pg := &benchPostgres{parent: b}
	for _, deploy := range []string{"pebble", "cluster"} {
		b.Run("deploy="+deploy, func(b *testing.B) {
			var admin *pgx.Conn
			var adminURL string
			if deploy != "pebble" {
				admin, adminURL = pg.server(b)
			}
			d := startBenchDeployment(b, deploy, admin, adminURL, "a2soak", "--script", script, "--passivate-after", "2s")
			soak(b, d, dur, sessions)
			for _, p := range d.procs {
				p.kill()
			}
		})
	}
}

// soakSample is one process's figures at one moment.
type soakSample struct {
	at                                      time.Duration
	rssKB, liveKB, goroutines, fds, threads int
}

func soak(b *testing.B, d *benchDeployment, dur time.Duration, sessions int) {
	const streams = 16
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	began := time.Now()
	samples := make([][]soakSample, len(d.procs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for i, p := range d.procs {
				s := sampleProcess(p)
				s.at = time.Since(began)
				mu.Lock()
				samples[i] = append(samples[i], s)
				mu.Unlock()
			}
		}
	})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams}}
	defer hc.CloseIdleConnections()
	var turns, rounds int
	var failed []error
	for time.Since(began) < dur {
		prefix := fmt.Sprintf("soak-%d%c", rounds/20, 'a'+rounds%2)
		r := loadgen.Run(ctx, loadgen.Options{URL: d.url, Streams: streams, Sessions: sessions, Turns: sessions / streams,
			Prefix: prefix, Spread: 100 * time.Millisecond, OneRequest: true, Client: hc, Timeout: time.Minute})
		turns += r.Turns
		rounds++
		failed = append(failed, r.Errors...)
		if len(failed) > 0 {
			break
		}
	}
	elapsed := time.Since(began)
	cancel()
	wg.Wait()
	if len(failed) > 0 {
		b.Fatalf("round %d: %d turns failed, the first: %v", rounds, len(failed), failed[0])
	}
	b.ReportMetric(float64(turns), "turns")
	b.ReportMetric(float64(turns)/elapsed.Seconds(), "turns/s")
	b.ReportMetric(float64(rounds), "rounds")
	var grew []string
	warm := elapsed / 10
	for i, p := range d.procs {
		first, last := soakWindow(samples[i], warm, warm+(elapsed-warm)/4), soakWindow(samples[i], elapsed-(elapsed-warm)/4, elapsed)
		if first.liveKB == 0 || last.liveKB == 0 {
			b.Fatalf("%s: too few samples (%d) for a run of %s", p.name, len(samples[i]), elapsed.Round(time.Second))
		}
		b.Logf("%s: first quarter's highest: %d MB live heap, %d MB resident, %d goroutines, %d open sockets and pipes, %d threads; last quarter's: %d MB, %d MB, %d, %d, %d",
			p.name, first.liveKB>>10, first.rssKB>>10, first.goroutines, first.fds, first.threads, last.liveKB>>10, last.rssKB>>10, last.goroutines, last.fds, last.threads)
		b.ReportMetric(float64(last.liveKB>>10), p.name+"-live-mb")
		b.ReportMetric(float64(last.liveKB)/float64(first.liveKB), p.name+"-live-x")
		b.ReportMetric(float64(last.rssKB>>10), p.name+"-rss-mb")
		b.ReportMetric(float64(last.goroutines), p.name+"-goroutines")
		b.ReportMetric(float64(last.fds-first.fds), p.name+"-sockets-delta")
		switch {
		case float64(last.liveKB) > 1.5*float64(first.liveKB)+32<<10:
			grew = append(grew, fmt.Sprintf("%s's live heap %d MB to %d MB", p.name, first.liveKB>>10, last.liveKB>>10))
		case float64(last.goroutines) > 1.2*float64(first.goroutines)+50:
			grew = append(grew, fmt.Sprintf("%s's goroutines %d to %d", p.name, first.goroutines, last.goroutines))
		case last.fds > first.fds+20:
			grew = append(grew, fmt.Sprintf("%s's open sockets and pipes %d to %d", p.name, first.fds, last.fds))
		case last.threads > first.threads+10:
			grew = append(grew, fmt.Sprintf("%s's threads %d to %d", p.name, first.threads, last.threads))
		}
	}
	if len(grew) > 0 {
		b.Fatalf("after %d turns in %s: %s", turns, elapsed.Round(time.Second), strings.Join(grew, "; "))
	}
}

// soakWindow is the highest of each figure among the samples taken in
// [from, to).
func soakWindow(samples []soakSample, from, to time.Duration) soakSample {
	var w soakSample
	for _, s := range samples {
		if s.at >= from && s.at < to {
			w.rssKB, w.liveKB, w.goroutines = max(w.rssKB, s.rssKB), max(w.liveKB, s.liveKB), max(w.goroutines, s.goroutines)
			w.fds, w.threads = max(w.fds, s.fds), max(w.threads, s.threads)
		}
	}
	return w
}

// sampleProcess reads a process's resident memory and threads
// (/proc/<pid>/status), its open sockets, pipes and other files that are
// not on disk (/proc/<pid>/fd), and from its profiler its live heap and
// goroutines.
func sampleProcess(p benchProc) soakSample {
	var s soakSample
	if f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.pid)); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ":")
			fields := strings.Fields(v)
			if len(fields) == 0 {
				continue
			}
			switch k {
			case "VmRSS":
				s.rssKB, _ = strconv.Atoi(fields[0])
			case "Threads":
				s.threads, _ = strconv.Atoi(fields[0])
			}
		}
		f.Close()
	}
	// Open files other than the store's (a growing store opens more of
	// its own files: that is not a leak): sockets, pipes, event files.
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.pid)); err == nil {
		for _, fd := range fds {
			if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", p.pid, fd.Name())); err == nil && !strings.HasPrefix(target, "/") {
				s.fds++
			}
		}
	}
	if p.pprof != "" {
		// The heap profile after a collection ends with the runtime's
		// MemStats: HeapAlloc is then what is live.
		if resp, err := http.Get("http://" + p.pprof + "/debug/pprof/heap?gc=1&debug=1"); err == nil {
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 16<<20)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					s.liveKB = int(n >> 10)
				}
			}
			resp.Body.Close()
		}
		if resp, err := http.Get("http://" + p.pprof + "/debug/pprof/goroutine?debug=1"); err == nil {
			line, _ := bufio.NewReader(resp.Body).ReadString('\n')
			resp.Body.Close()
			if _, n, ok := strings.Cut(strings.TrimSpace(line), "total "); ok {
				s.goroutines, _ = strconv.Atoi(n)
			}
		}
	}
	return s
}
