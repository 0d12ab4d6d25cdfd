package actors

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestReuseDispatcher: a scheduled run always runs, even while every
// worker is busy (Schedule never waits for one, so an actor scheduling
// another from a worker cannot deadlock the pool); after a burst at most
// maxIdleWorkers stay; an idle worker takes the next run instead of a new
// goroutine; closing lets idle workers exit.
func TestReuseDispatcher(t *testing.T) {
	d := newReuseDispatcher(mailboxThroughput)

	// Runs that schedule further runs from inside a worker, all blocked
	// until released: none may wait for a free worker.
	const n = maxIdleWorkers + 72
	release := make(chan struct{})
	var started, done sync.WaitGroup
	started.Add(n)
	done.Add(n)
	var schedule func(k int)
	schedule = func(k int) {
		d.Schedule(func() {
			if k+1 < n {
				schedule(k + 1)
			}
			started.Done()
			<-release
			done.Done()
		})
	}
	schedule(0)
	waitOrFail(t, &started, fmt.Sprintf("%d nested runs to start while all workers are busy", n))
	if w := d.workers.Load(); w != n {
		t.Fatalf("%d workers run %d blocked runs, want %d", w, n, n)
	}
	close(release)
	waitOrFail(t, &done, "the released runs to finish")
	if w := settle(d, maxIdleWorkers); w != maxIdleWorkers {
		t.Fatalf("%d workers stay after the burst, want %d", w, maxIdleWorkers)
	}

	// The workers left wait for work: the next runs reuse them. (A run
	// scheduled just before its worker is back waiting starts one more.)
	before := d.started.Load()
	for i := 0; i < 200; i++ {
		ran := make(chan struct{})
		d.Schedule(func() { close(ran) })
		<-ran
	}
	if more := d.started.Load() - before; more > 20 {
		t.Errorf("200 runs one at a time started %d new workers; idle ones should take them", more)
	}
	if w := settle(d, maxIdleWorkers); w != maxIdleWorkers {
		t.Errorf("%d workers after 200 more runs one at a time, want %d", w, maxIdleWorkers)
	}

	d.close()
	if w := settle(d, 0); w != 0 {
		t.Errorf("%d workers 10 s after close, want 0", w)
	}
	ran := make(chan struct{})
	d.Schedule(func() { close(ran) }) // after close: a goroutine of its own
	<-ran
}

func waitOrFail(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// settle waits up to 10 s for the worker count to reach want (a worker
// that has just run may still be on its way out) and returns the count.
func settle(d *reuseDispatcher, want int64) int64 {
	deadline := time.Now().Add(10 * time.Second)
	for d.workers.Load() != want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return d.workers.Load()
}
