package actors

import (
	"sync"
	"testing"
	"time"
)

// TestReuseDispatcher: a scheduled run always runs, even while every
// worker is busy (Schedule never waits for one, so an actor scheduling
// another from a worker cannot deadlock the pool); an idle worker takes the
// next run instead of a new goroutine; closing lets idle workers exit.
func TestReuseDispatcher(t *testing.T) {
	d := newReuseDispatcher(mailboxThroughput)

	// Runs that schedule further runs from inside a worker, all blocked
	// until released: none may wait for a free worker.
	const n = 50
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
	waitOrFail(t, &started, "50 nested runs to start while all workers are busy")
	if w := d.workers.Load(); w != n {
		t.Fatalf("%d workers run 50 blocked runs, want 50", w)
	}
	close(release)
	waitOrFail(t, &done, "the released runs to finish")

	// The 50 workers now wait for work: the next runs reuse them. (A run
	// scheduled before any of them is back waiting starts one more.)
	for i := 0; i < 200; i++ {
		ran := make(chan struct{})
		d.Schedule(func() { close(ran) })
		<-ran
	}
	if w := d.workers.Load(); w > n+2 {
		t.Errorf("%d workers after 200 more runs one at a time, want the 50 reused (at most 52)", w)
	}

	d.close()
	deadline := time.Now().Add(10 * time.Second)
	for d.workers.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if w := d.workers.Load(); w != 0 {
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
