package actors

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// reuseDispatcher runs actor mailboxes on a bounded pool of goroutines that
// it keeps.
//
// protoactor's default dispatcher starts a new goroutine each time an idle
// mailbox receives a message. A session actor's turn through its mailbox
// (fold, decide, encode) needs more stack than a new goroutine starts
// with, so with a thousand busy sessions the runtime spent about a sixth of
// its CPU growing and copying fresh stacks (BenchmarkProgressBatching's
// profile). An earlier version of this dispatcher reused waiting goroutines
// but still started a new one whenever none waited; on a saturated node
// none ever waits, and it started some 100,000 goroutines in 6 s (8% of
// the CPU in stack growth; docs/benchmarks.md,
// "A bounded mailbox pool for the saturated node").
//
// Here a run is handed to a waiting worker; if none waits and fewer than
// maxWorkers run, a new worker starts with it; otherwise it joins a FIFO
// queue that every worker drains before it waits. Schedule never blocks, so
// an actor that sends a message while running on a worker cannot deadlock
// the pool. The bound is safe because no mailbox run waits for another
// run: a run's work is bounded (fold, decide, the store's pre-commit
// steps), and everything that can take long (model streams, tool
// executions, application handlers, appends) has a goroutine of its own.
//
// A few runs wait on the store: an activation reads the session's snapshot
// and log, a push looks its IDs up. On a remote store (PostgreSQL) that is
// a network round trip or several, and a slow database must not let a
// burst of activations occupy every worker while the runs of active
// sessions queue behind them. Such a run calls blocking around its I/O:
// meanwhile it does not count against maxWorkers, so a queued run gets a
// worker (one is started if none waits), as Go's scheduler hands a P on
// when a goroutine enters a system call. A worker that finishes a run while
// more than maxWorkers run outside blocking exits.
//
// A mailbox run returns when its mailbox is empty (protoactor yields with
// runtime.Gosched every `throughput` messages but keeps the goroutine). Our
// actors' messages take microseconds, so runs are short; but a mailbox fed
// faster than it drains would hold its worker, and maxWorkers of them
// would leave the queue waiting. So while runs are queued a watchdog looks
// every stallAfter: if no worker took a run from the queue since its last
// look, it starts one more worker, beyond the bound, for the first queued
// run (it exits after that run). Runs then wait at most about stallAfter
// each, whatever the other mailboxes do; on a node that is merely busy the
// queue moves and the watchdog starts nothing.
//
// The queue holds at most one run per mailbox (protoactor schedules a
// mailbox only while it is idle), so it is bounded by the number of live
// actors. Workers exit when the dispatcher is closed, after the queue is
// empty; a run scheduled after that gets a goroutine of its own.
type reuseDispatcher struct {
	throughput int
	maxWorkers int64

	mu        sync.Mutex
	wake      *sync.Cond // signalled once per run handed to a waiting worker
	queue     []func()   // runs waiting for a worker, from head on
	head      int
	waiting   int   // workers in wake.Wait
	signalled int   // of them, woken for a run and not yet back
	blocked   int64 // runs inside blocking
	closed    bool  // set by close

	stallAfter time.Duration
	popped     uint64 // runs taken from the queue
	watching   bool   // a watchdog look is due
	stalls     int    // workers the watchdog started

	workers atomic.Int64 // live worker goroutines (changed under mu)
	started atomic.Int64 // worker goroutines ever started
}

// maxWorkers is the bound on the pool: a few goroutines per core run the
// CPU-bound runs as fast as more would, and the floor leaves room for runs
// that wait on the store's reads (an activation on PostgreSQL).
func maxWorkers() int64 { return int64(max(128, 4*runtime.GOMAXPROCS(0))) }

// stallAfter is how long queued runs wait with no worker taking any before
// the watchdog starts one more.
const stallAfter = 5 * time.Millisecond

func newReuseDispatcher(throughput int) *reuseDispatcher {
	d := &reuseDispatcher{throughput: throughput, maxWorkers: maxWorkers(), stallAfter: stallAfter}
	d.wake = sync.NewCond(&d.mu)
	return d
}

var _ actor.Dispatcher = (*reuseDispatcher)(nil)

func (d *reuseDispatcher) Schedule(fn func()) {
	d.mu.Lock()
	switch {
	case d.closed:
		d.mu.Unlock()
		go fn()
	case d.waiting > d.signalled:
		// A waiting worker not yet woken takes it (or a worker that
		// finishes its run first does, and the woken one waits again).
		d.queue = append(d.queue, fn)
		d.signalled++
		d.mu.Unlock()
		d.wake.Signal()
	case d.workers.Load()-d.blocked < d.maxWorkers:
		d.workers.Add(1)
		d.started.Add(1)
		d.mu.Unlock()
		go d.worker(fn)
	default:
		// Every worker is busy: the first to finish takes it.
		d.queue = append(d.queue, fn)
		d.watch()
		d.mu.Unlock()
	}
}

// watch arms the watchdog unless it is armed; d.mu is held.
func (d *reuseDispatcher) watch() {
	if d.watching || d.closed {
		return
	}
	d.watching = true
	seen := d.popped
	time.AfterFunc(d.stallAfter, func() { d.look(seen) })
}

// look is the watchdog: runs are queued, and if no worker has taken one
// since seen, every worker is in a long run, and one more worker starts
// with the first queued run. It watches on while runs are queued.
func (d *reuseDispatcher) look(seen uint64) {
	d.mu.Lock()
	d.watching = false
	if d.closed || d.head == len(d.queue) {
		d.mu.Unlock()
		return
	}
	var next func()
	if d.popped == seen && d.waiting == d.signalled {
		next = d.pop()
		d.workers.Add(1)
		d.started.Add(1)
		d.stalls++
	}
	if d.head < len(d.queue) {
		d.watch()
	}
	d.mu.Unlock()
	if next != nil {
		go d.worker(next)
	}
}

func (d *reuseDispatcher) Throughput() int { return d.throughput }

func (d *reuseDispatcher) worker(fn func()) {
	for {
		fn()
		fn = nil // do not keep the last actor reachable while waiting
		d.mu.Lock()
		if d.workers.Load()-d.blocked > d.maxWorkers {
			// One more was started while a run was blocking.
			d.workers.Add(-1)
			d.mu.Unlock()
			return
		}
		for d.head == len(d.queue) {
			if d.closed {
				d.workers.Add(-1)
				d.mu.Unlock()
				return
			}
			d.waiting++
			d.wake.Wait()
			d.waiting--
			if d.signalled > 0 { // 0 only when woken by close
				d.signalled--
			}
		}
		fn = d.pop()
		d.mu.Unlock()
	}
}

// pop takes the queue's first run; d.mu is held and the queue not empty.
// The queue reuses its array: emptied, it starts again at the front, and a
// queue that never empties (a saturated node) moves its runs to the front
// once half of the array is taken, so it stays within twice its length.
func (d *reuseDispatcher) pop() func() {
	d.popped++
	fn := d.queue[d.head]
	d.queue[d.head] = nil
	d.head++
	switch n := len(d.queue) - d.head; {
	case n == 0:
		d.queue, d.head = d.queue[:0], 0
	case d.head >= 64 && d.head >= n:
		copy(d.queue, d.queue[d.head:])
		clear(d.queue[n:])
		d.queue, d.head = d.queue[:n], 0
	}
	return fn
}

// blocking runs f, which waits on I/O, from a mailbox run: while f runs,
// the run does not count against maxWorkers, and a queued run starts on
// another worker at once. Called from elsewhere it only lets one more
// worker run for a while.
func (d *reuseDispatcher) blocking(f func()) {
	d.mu.Lock()
	d.blocked++
	var next func()
	if !d.closed && d.head < len(d.queue) && d.waiting == d.signalled && d.workers.Load()-d.blocked < d.maxWorkers {
		next = d.pop()
		d.workers.Add(1)
		d.started.Add(1)
	}
	d.mu.Unlock()
	if next != nil {
		go d.worker(next)
	}
	defer func() {
		d.mu.Lock()
		d.blocked--
		d.mu.Unlock()
	}()
	f()
}

// close lets the workers exit once the queue is empty.
func (d *reuseDispatcher) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.wake.Broadcast()
}
