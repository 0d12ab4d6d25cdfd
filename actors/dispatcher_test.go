package actors

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestDispatcherBlocking: a run waiting on I/O inside blocking does not
// hold up a run queued behind it, nor one scheduled while it waits, even
// when it holds the only worker of the bound; once it is back, the pool
// shrinks to the bound again. Outside blocking, the other run waits (the
// bound holds).
func TestDispatcherBlocking(t *testing.T) {
	for _, queuedBefore := range []bool{true, false} {
		for _, viaBlocking := range []bool{true, false} {
			name := fmt.Sprintf("queuedBefore=%v/blocking=%v", queuedBefore, viaBlocking)
			d := newReuseDispatcher(mailboxThroughput)
			d.maxWorkers = 1
			d.stallAfter = time.Hour // the watchdog (TestDispatcherWatchdog) stays out
			enter, release, inIO := make(chan struct{}), make(chan struct{}), make(chan struct{})
			d.Schedule(func() {
				<-enter
				io := func() { close(inIO); <-release }
				if viaBlocking {
					d.blocking(io)
				} else {
					io()
				}
			})
			ran := make(chan struct{})
			if queuedBefore {
				d.Schedule(func() { close(ran) }) // queued: the one worker is taken
			}
			close(enter)
			<-inIO
			if !queuedBefore {
				d.Schedule(func() { close(ran) })
			}
			if viaBlocking {
				select {
				case <-ran:
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: the other run did not run while the first waited inside blocking", name)
				}
			} else {
				select {
				case <-ran:
					t.Fatalf("%s: a second run ran beside a run outside blocking, over a bound of one worker", name)
				case <-time.After(200 * time.Millisecond):
				}
			}
			close(release)
			<-ran
			if w := settle(d, 1); w != 1 {
				t.Errorf("%s: %d workers after the blocked run returned, want the bound, 1", name, w)
			}
			d.close()
		}
	}
}

// TestDispatcherWatchdog: when every worker is held by a long run (a
// mailbox fed faster than it drains), queued runs still run: the watchdog
// starts one more worker each time the queue has not moved for stallAfter,
// and those workers leave after their run. A queue that moves (one worker
// draining a thousand short runs) starts none.
func TestDispatcherWatchdog(t *testing.T) {
	d := newReuseDispatcher(mailboxThroughput)
	d.maxWorkers = 2
	d.stallAfter = 10 * time.Millisecond
	release := make(chan struct{})
	var holding sync.WaitGroup
	holding.Add(2)
	for range 2 {
		d.Schedule(func() { holding.Done(); <-release })
	}
	holding.Wait()
	runAll(t, d, 3, "three runs queued behind two long ones")
	if stalls := stallsOf(d); stalls != 3 {
		t.Errorf("the watchdog started %d workers for 3 stuck runs, want 3", stalls)
	}
	close(release)
	if w := settle(d, 2); w != 2 {
		t.Errorf("%d workers after the long runs ended, want the bound, 2", w)
	}
	d.close()

	moving := newReuseDispatcher(mailboxThroughput)
	moving.maxWorkers = 1
	moving.stallAfter = time.Second
	runAll(t, moving, 1000, "a thousand short runs on one worker")
	if stalls := stallsOf(moving); stalls != 0 {
		t.Errorf("the watchdog started %d workers while the queue moved", stalls)
	}
	moving.close()
}

// runAll schedules n empty runs on d and waits (10 s at most) for them.
func runAll(t *testing.T, d *reuseDispatcher, n int, what string) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(n)
	for range n {
		d.Schedule(wg.Done)
	}
	waitOrFail(t, &wg, what)
}

func stallsOf(d *reuseDispatcher) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stalls
}

// TestReuseDispatcher: a scheduled run always runs and Schedule never
// waits, even while every worker is busy (so an actor scheduling another
// from a worker cannot deadlock the pool); no more than maxWorkers
// goroutines ever run mailboxes, the runs beyond them wait in order of
// scheduling (first in, first out); the workers are reused, not replaced; closing lets them exit
// once the queue is empty.
func TestReuseDispatcher(t *testing.T) {
	d := newReuseDispatcher(mailboxThroughput)
	const workers = 8
	d.maxWorkers = workers
	d.stallAfter = time.Hour // the watchdog (TestDispatcherWatchdog) stays out

	// One run schedules the others from inside its worker, and all block
	// until released: the first `workers` start, the rest queue.
	const n = workers + 72
	release := make(chan struct{})
	var started, done sync.WaitGroup
	started.Add(workers)
	done.Add(n)
	var mu sync.Mutex
	var order []int // the runs that started
	var schedule func(k int)
	schedule = func(k int) {
		d.Schedule(func() {
			mu.Lock()
			order = append(order, k)
			mu.Unlock()
			if k == 0 {
				for j := 1; j < n; j++ {
					schedule(j) // returns at once, with every worker busy too
				}
			}
			if k < workers {
				started.Done()
			}
			<-release
			done.Done()
		})
	}
	schedule(0)
	waitOrFail(t, &started, fmt.Sprintf("%d nested runs to start", workers))
	d.mu.Lock()
	queued := len(d.queue) - d.head
	d.mu.Unlock()
	mu.Lock()
	ran := len(order)
	mu.Unlock()
	if w := d.workers.Load(); w != workers || ran != workers || queued != n-workers {
		t.Fatalf("with %d blocked runs: %d workers, %d runs started, %d queued; want %d, %d, %d",
			n, w, ran, queued, workers, workers, n-workers)
	}
	close(release)
	waitOrFail(t, &done, "the released and the queued runs to finish")
	if s := d.started.Load(); s != workers {
		t.Errorf("%d worker goroutines started for %d runs, want %d", s, n, workers)
	}

	// The workers wait for work: the next runs reuse them.
	for i := 0; i < 200; i++ {
		ran := make(chan struct{})
		d.Schedule(func() { close(ran) })
		<-ran
	}
	if s := d.started.Load(); s != workers {
		t.Errorf("200 runs one at a time started %d more workers; the waiting ones should take them", s-workers)
	}

	// Many schedulers at once, some from inside runs: every run runs
	// exactly once and the pool stays within its bound.
	const schedulers, each = 16, 500
	var count sync.WaitGroup
	var runs [schedulers * each]atomic.Int32
	count.Add(schedulers * each)
	var wg sync.WaitGroup
	for g := 0; g < schedulers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				k := g*each + i
				run := func() { runs[k].Add(1); count.Done() }
				if i%2 == 0 {
					d.Schedule(run)
					continue
				}
				d.Schedule(func() { d.Schedule(run) })
			}
		}()
	}
	wg.Wait()
	waitOrFail(t, &count, "8,000 concurrently scheduled runs")
	for k := range runs {
		if c := runs[k].Load(); c != 1 {
			t.Fatalf("run %d ran %d times, want once", k, c)
		}
	}
	if w := d.workers.Load(); w > workers {
		t.Errorf("%d workers, more than the bound %d", w, workers)
	}

	// With one worker the queued runs run in the order they were
	// scheduled (with more, they start in that order on several workers).
	one := newReuseDispatcher(mailboxThroughput)
	one.maxWorkers = 1
	one.stallAfter = time.Hour
	gate, seq := make(chan struct{}), make(chan int, 100)
	one.Schedule(func() { <-gate })
	for i := 0; i < 100; i++ {
		one.Schedule(func() { seq <- i })
	}
	close(gate)
	for i := 0; i < 100; i++ {
		if k := <-seq; k != i {
			t.Fatalf("with one worker, run %d ran %d-th: the queue is not first in, first out", k, i)
		}
	}
	one.close()

	// Closing: a run queued before close still runs; then the workers
	// exit; a run scheduled after close gets a goroutine of its own.
	hold, held := make(chan struct{}), make(chan struct{}, workers)
	for i := 0; i < workers; i++ {
		d.Schedule(func() { held <- struct{}{}; <-hold })
	}
	for i := 0; i < workers; i++ {
		<-held
	}
	late := make(chan struct{})
	d.Schedule(func() { close(late) }) // queued: every worker is held
	d.close()
	close(hold)
	select {
	case <-late:
	case <-time.After(10 * time.Second):
		t.Fatal("a run queued before close never ran")
	}
	if w := settle(d, 0); w != 0 {
		t.Errorf("%d workers 10 s after close, want 0", w)
	}
	after := make(chan struct{})
	d.Schedule(func() { close(after) })
	<-after
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

// TestDispatcherQueueStaysBounded drives pop directly: a queue that
// empties starts again at its front, and one that never empties (a
// saturated node, with a backlog under 64 runs and one over it) is moved
// to the front, so its array stays within a small multiple of its backlog
// instead of growing by a slot for every run that ever went through it.
func TestDispatcherQueueStaysBounded(t *testing.T) {
	d := newReuseDispatcher(10)
	ran := 0
	run := func() { ran++ }
	for i := 0; i < 10; i++ {
		d.queue = append(d.queue, run)
	}
	for i := 0; i < 10; i++ {
		d.pop()()
	}
	if len(d.queue) != 0 || d.head != 0 || ran != 10 {
		t.Fatalf("an emptied queue: len %d head %d after %d runs; want it reset to its front", len(d.queue), d.head, ran)
	}
	for _, backlog := range []int{10, 100} {
		d := newReuseDispatcher(10)
		for i := 0; i < backlog; i++ {
			d.queue = append(d.queue, run)
		}
		for i := 0; i < 20000; i++ {
			d.queue = append(d.queue, run)
			d.pop()()
		}
		if n := len(d.queue) - d.head; n != backlog {
			t.Fatalf("backlog %d: %d runs queued after as many pops as pushes", backlog, n)
		}
		if limit := 4 * max(backlog, 64); cap(d.queue) > limit {
			t.Fatalf("backlog %d: the queue's array holds %d slots after 20,000 runs (want at most %d): it grows with every run", backlog, cap(d.queue), limit)
		}
	}
}

// A run scheduled while the pool's only worker is busy (it took the
// previous run from the queue, woken for it) starts another worker: the
// woken worker no longer counts as waiting (mutants dispatcher.go:108,
// which drove the count of woken workers negative, and dispatcher.go:181,
// which counted a woken worker as waiting twice: either way the run was
// queued for a worker that never came).
func TestDispatcherStartsAWorkerWhenTheWaitingOneIsTaken(t *testing.T) {
	d := newReuseDispatcher(mailboxThroughput)
	d.stallAfter = time.Hour // the watchdog stays out: the pool must grow by itself
	defer d.close()
	first := make(chan struct{})
	d.Schedule(func() { close(first) })
	<-first
	// The worker goes back to wait: the next run is handed to it.
	for deadline := time.Now().Add(10 * time.Second); ; {
		d.mu.Lock()
		waiting := d.waiting
		d.mu.Unlock()
		if waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first worker did not wait for work within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	release := make(chan struct{})
	defer close(release)
	busy := make(chan struct{})
	d.Schedule(func() { close(busy); <-release })
	<-busy // the only worker holds this run
	ran := make(chan struct{})
	d.Schedule(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatalf("a run scheduled while the only worker was busy did not run within 10 s (%d workers)", d.workers.Load())
	}
}
