package actors

import (
	"sync"
	"sync/atomic"
	"time"

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
// running on a worker cannot deadlock the pool. A worker idle for
// idleWorker exits, and all idle workers exit once the dispatcher is
// closed; a run scheduled after that gets a goroutine of its own.
type reuseDispatcher struct {
	throughput int
	work       chan func() // unbuffered: a send succeeds only to a waiting worker
	quit       chan struct{}
	closeOnce  sync.Once
	workers    atomic.Int64 // live worker goroutines
}

const idleWorker = 10 * time.Second

func newReuseDispatcher(throughput int) *reuseDispatcher {
	return &reuseDispatcher{throughput: throughput, work: make(chan func()), quit: make(chan struct{})}
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
	defer d.workers.Add(-1)
	fn()
	idle := time.NewTimer(idleWorker)
	defer idle.Stop()
	for {
		select {
		case fn := <-d.work:
			fn()
			idle.Reset(idleWorker)
		case <-idle.C:
			return
		case <-d.quit:
			return
		}
	}
}

// close lets idle workers exit.
func (d *reuseDispatcher) close() { d.closeOnce.Do(func() { close(d.quit) }) }
