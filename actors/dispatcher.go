package actors

import (
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// reuseDispatcher runs actor mailboxes on goroutines it keeps for reuse.
//
// protoactor's default dispatcher starts a new goroutine each time an idle
// mailbox receives a message. A session actor's turn through its mailbox
// (fold, decide, encode) needs more stack than a new goroutine starts
// with, so with a thousand busy sessions the runtime spent about a sixth of
// its CPU growing and copying fresh stacks (BenchmarkProgressBatching's
// profile). Here a mailbox run is handed to a goroutine that is waiting for
// work, whose stack has already grown; only when none waits does Schedule
// start one. Schedule never blocks, so an actor that sends a message while
// running on a worker cannot deadlock the pool. At most maxIdle workers
// wait for work; one that finishes a run while as many wait exits, so a
// burst (ten thousand sessions activated at once) leaves no crowd of idle
// goroutines behind. Idle workers exit when the dispatcher is closed; a
// run scheduled after that gets a goroutine of its own.
type reuseDispatcher struct {
	throughput int
	maxIdle    int64
	work       chan func() // unbuffered: a send succeeds only to a waiting worker
	quit       chan struct{}
	closeOnce  sync.Once
	workers    atomic.Int64 // live worker goroutines
	started    atomic.Int64 // worker goroutines ever started
	idle       atomic.Int64 // workers waiting for work
}

// maxIdleWorkers bounds the workers kept waiting for work.
const maxIdleWorkers = 128

func newReuseDispatcher(throughput int) *reuseDispatcher {
	return &reuseDispatcher{throughput: throughput, maxIdle: maxIdleWorkers, work: make(chan func()), quit: make(chan struct{})}
}

var _ actor.Dispatcher = (*reuseDispatcher)(nil)

func (d *reuseDispatcher) Schedule(fn func()) {
	select {
	case d.work <- fn:
	default:
		go d.worker(fn)
	}
}

func (d *reuseDispatcher) Throughput() int { return d.throughput }

func (d *reuseDispatcher) worker(fn func()) {
	d.workers.Add(1)
	d.started.Add(1)
	defer d.workers.Add(-1)
	for {
		fn()
		fn = nil // do not keep the last actor reachable while waiting
		if d.idle.Add(1) > d.maxIdle {
			d.idle.Add(-1)
			return
		}
		select {
		case fn = <-d.work:
			d.idle.Add(-1)
		case <-d.quit:
			d.idle.Add(-1)
			return
		}
	}
}

// close lets idle workers exit.
func (d *reuseDispatcher) close() { d.closeOnce.Do(func() { close(d.quit) }) }
