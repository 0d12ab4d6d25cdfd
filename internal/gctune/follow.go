package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// A follower sets the heap goal after each collection from the live heap
// that collection measured (PercentFor). It learns of a collection from
// the finalizer of an object it keeps no reference to, which the collector
// runs once that object is found unreachable; each run allocates the next.
// It needs no goroutine or timer of its own and costs nothing between
// collections.
type follower struct {
	headroom uint64
	most     int

	mu      sync.Mutex // guards stopped against a finalizer in flight
	stopped bool
	sample  []metrics.Sample
}

// liveMetric is the heap's live bytes as the last collection marked them.
const liveMetric = "/gc/heap/live:bytes"

func follow(headroom uint64, most int) *follower {
	f := &follower{headroom: headroom, most: most, sample: []metrics.Sample{{Name: liveMetric}}}
	f.arm()
	return f
}

// sentinel is what a follower's finalizer hangs on; it must not be a
// zero-size or pointer-free tiny allocation, which the runtime may batch
// with others (runtime.SetFinalizer's documentation).
type sentinel struct{ _ *follower }

func (f *follower) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) { f.collected() })
}

// collected runs on the runtime's finalizer goroutine after a collection.
func (f *follower) collected() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	metrics.Read(f.sample)
	if f.sample[0].Value.Kind() == metrics.KindUint64 {
		debug.SetGCPercent(PercentFor(f.sample[0].Value.Uint64(), f.headroom, f.most))
	}
	f.arm()
}

// stop ends the following; the heap goal stays as the last collection set
// it until the caller sets another.
func (f *follower) stop() {
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
}
