package persistence

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/a2-runtime/a2/protocol"
)

// Fanout is the live tails of a store whose appends are made in this
// process: the store offers each batch it has made durable (Offer) to the
// session's tails, which return it from Next without reading the store. It
// also keeps, per session this process wrote last, the end of the log it
// made durable and the latest events up to recentBytes (recent), so that
// a tail that starts at or near the end of the log (a push answered with
// its own stream, a subscriber that reconnects) reads nothing either. A
// tail reads the store only to catch up: when it starts further back,
// after an offer it had no room for, after a gap, or when the store says
// the session was written by another process (Lagged). A store that
// implements Follower with it keeps one Fanout and calls Offer after each
// acknowledged append, in commit order per session where it can (a batch
// offered out of order costs a tail a read, never a wrong answer).
type Fanout struct {
	read    func(ctx context.Context, session string, after uint64, limit int) ([]protocol.Event, error)
	stopped <-chan struct{}
	stopErr func() error

	mu        sync.Mutex
	bySession map[string]map[*fanTail]struct{}
	// recent holds, per session this process appended to and no other
	// process has since (Lagged forgets it), the contiguous latest events
	// it made durable, ending at the session's durable end. Bounded: at
	// most recentBytes of payloads per session (whole batches, the latest
	// always kept), and at most recentBudget in all (past it, every
	// session's is forgotten: a forgotten session costs its next tail one
	// read).
	recent      map[string]*recentEvents
	recentTotal int
}

type recentEvents struct {
	events []protocol.Event // contiguous; shared, never modified
	bytes  int
}

const (
	recentBytes  = 16 << 10
	recentBudget = 64 << 20
)

// NewFanout returns a Fanout whose tails read with read, and end with
// stopErr's error once stopped is closed.
func NewFanout(read func(ctx context.Context, session string, after uint64, limit int) ([]protocol.Event, error), stopped <-chan struct{}, stopErr func() error) *Fanout {
	return &Fanout{read: read, stopped: stopped, stopErr: stopErr, bySession: map[string]map[*fanTail]struct{}{}}
}

// tailBuffer is how many batches a tail holds before it lags.
const tailBuffer = 64

// Follow returns a tail of session after the index after. When the
// session's recent events reach back to after, its first Next returns
// them; otherwise it reads the history.
func (f *Fanout) Follow(session string, after uint64) (Tail, error) {
	if err := CheckSession(session); err != nil {
		return nil, err
	}
	t := &fanTail{f: f, session: session, after: after, ch: make(chan []protocol.Event, tailBuffer)}
	f.mu.Lock()
	t.first, t.known = f.recentAfter(session, after)
	if !t.known {
		t.lagged.Store(true)
	}
	m := f.bySession[session]
	if m == nil {
		m = map[*fanTail]struct{}{}
		f.bySession[session] = m
	}
	m[t] = struct{}{}
	f.mu.Unlock()
	return t, nil
}

// recentAfter returns the recent events of session after the index after,
// and whether they are all there is after it; the caller holds mu.
func (f *Fanout) recentAfter(session string, after uint64) ([]protocol.Event, bool) {
	r := f.recent[session]
	if r == nil || len(r.events) == 0 {
		return nil, false
	}
	first, last := r.events[0].Index, r.events[len(r.events)-1].Index
	switch {
	case after >= last:
		return nil, after == last
	case after+1 < first:
		return nil, false
	}
	return r.events[after+1-first:], true
}

// Offer records that this process made batch (of session, in index order,
// Index set) durable, and hands it to the session's tails without
// blocking. The Fanout keeps a copy: the caller keeps batch. Both under
// one lock, so that a tail that starts meanwhile either gets the batch or
// reads it.
func (f *Fanout) Offer(session string, batch []protocol.Event) {
	if len(batch) == 0 {
		return
	}
	shared := make([]protocol.Event, len(batch))
	size := 0
	for i, e := range batch {
		e.Payload = append([]byte(nil), e.Payload...)
		shared[i] = e
		size += len(e.Payload)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.remember(session, shared, size)
	for t := range f.bySession[session] {
		select {
		case t.ch <- shared:
		default:
			t.lagged.Store(true)
		}
	}
}

// remember adds batch to session's recent events; the caller holds mu.
func (f *Fanout) remember(session string, batch []protocol.Event, size int) {
	if f.recent == nil || f.recentTotal+size > recentBudget {
		f.recent, f.recentTotal = map[string]*recentEvents{}, 0
	}
	r := f.recent[session]
	if r == nil {
		r = &recentEvents{}
		f.recent[session] = r
	}
	if n := len(r.events); n == 0 || r.events[n-1].Index+1 != batch[0].Index {
		// Not contiguous (another writer, or an offer out of order): start
		// again from this batch.
		f.recentTotal -= r.bytes
		r.events, r.bytes = nil, 0
	}
	r.events = append(r.events, batch...)
	r.bytes += size
	f.recentTotal += size
	// Drop the oldest events past the bound, keeping this batch whole.
	drop := 0
	for r.bytes > recentBytes && drop < len(r.events)-len(batch) {
		r.bytes -= len(r.events[drop].Payload)
		f.recentTotal -= len(r.events[drop].Payload)
		drop++
	}
	// Dropped from the front by slicing: the next append that outgrows the
	// array copies only the events kept (a copy here, per batch, was a
	// tenth of a member's CPU). Events in the array are never written
	// again, so a tail's slice of them (recentAfter) stays as it was.
	r.events = r.events[drop:]
}

// Lagged tells the session's tails that it was written elsewhere: each
// reads the store at its next Next (and a waiting one wakes).
func (f *Fanout) Lagged(session string) {
	f.mu.Lock()
	if r := f.recent[session]; r != nil {
		f.recentTotal -= r.bytes
		delete(f.recent, session)
	}
	for t := range f.bySession[session] {
		t.lagged.Store(true)
		select {
		case t.ch <- nil:
		default:
		}
	}
	f.mu.Unlock()
}

// LaggedAll is Lagged for every session (notifications may have been
// missed).
func (f *Fanout) LaggedAll() {
	f.mu.Lock()
	sessions := make([]string, 0, len(f.bySession))
	for session := range f.bySession {
		sessions = append(sessions, session)
	}
	f.recent, f.recentTotal = nil, 0
	f.mu.Unlock()
	for _, session := range sessions {
		f.Lagged(session)
	}
}

type fanTail struct {
	f       *Fanout
	session string
	after   uint64
	// first is what the first Next returns without reading (recent events
	// after after), when known is set.
	first []protocol.Event
	known bool
	ch    chan []protocol.Event
	// lagged is set when the tail must read the store.
	lagged    atomic.Bool
	closeOnce sync.Once
}

func (t *fanTail) Next(ctx context.Context) ([]protocol.Event, error) {
	if first := t.first; len(first) > 0 {
		t.first = nil
		if !t.lagged.Load() {
			t.after = first[len(first)-1].Index
			return first, nil
		}
	}
	for {
		if t.lagged.Swap(false) {
			evs, err := t.f.read(ctx, t.session, t.after, FollowPage)
			if err != nil {
				t.lagged.Store(true)
				return nil, err
			}
			if len(evs) == FollowPage {
				t.lagged.Store(true)
			}
			if len(evs) > 0 {
				t.after = evs[len(evs)-1].Index
				return evs, nil
			}
		}
		select {
		case batch := <-t.ch:
			if evs := t.take(batch); len(evs) > 0 {
				return evs, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.f.stopped:
			return nil, t.f.stopErr()
		}
	}
}

// take returns the events of batch after t.after, or nil when there are
// none or the batch does not follow on (then the tail reads the store).
func (t *fanTail) take(batch []protocol.Event) []protocol.Event {
	i := 0
	for i < len(batch) && batch[i].Index <= t.after {
		i++
	}
	if i == len(batch) {
		return nil
	}
	if batch[i].Index != t.after+1 {
		t.lagged.Store(true)
		return nil
	}
	t.after = batch[len(batch)-1].Index
	return batch[i:]
}

func (t *fanTail) Close() {
	t.closeOnce.Do(func() {
		t.f.mu.Lock()
		if m := t.f.bySession[t.session]; m != nil {
			delete(m, t)
			if len(m) == 0 {
				delete(t.f.bySession, t.session)
			}
		}
		t.f.mu.Unlock()
	})
}
