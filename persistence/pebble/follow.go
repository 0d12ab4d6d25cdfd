package pebble

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// Follow implements persistence.Follower.
//
// A follower is registered with its session's in-memory state, which it
// pins. Each acknowledged Append offers its batch to the session's
// followers without blocking: a follower with room in its buffer takes it
// and returns it from Next without reading Pebble (for a live subscriber,
// the common case, that saves an iterator per batch); a follower whose
// buffer is full is marked lagged, and its next Next reads the log from
// where it is up to the durable end, then skips what it already returned.
// A new follower starts lagged, its first Next reading the history, unless
// the session's recent events in memory (sessionState.recent) hold all of
// it: the usual start of a stream, just after its session's latest write.
func (s *Store) Follow(session string, after uint64) (persistence.Tail, error) {
	if err := persistence.CheckSession(session); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	st := s.sessions.acquire(session)
	f := &follower{s: s, session: session, st: st, after: after, ch: make(chan []protocol.Event, followBuffer)}
	st.mu.Lock()
	if r := st.recent; st.loaded && len(r) > 0 && r[len(r)-1].Index == st.last && r[0].Index <= after+1 && after < st.last {
		f.ch <- r[after+1-r[0].Index : len(r) : len(r)] // no room to append into the session's window
	} else if !st.loaded || after != st.last {
		f.lagged.Store(true)
	}
	if st.followers == nil {
		st.followers = map[*follower]struct{}{}
	}
	st.followers[f] = struct{}{}
	st.mu.Unlock()
	return f, nil
}

// followBuffer is how many batches a follower holds before it lags.
const followBuffer = 64

type follower struct {
	s       *Store
	session string
	st      *sessionState
	after   uint64
	ch      chan []protocol.Event
	// lagged is set when the follower must read the log: at start, after a
	// dropped offer, after a gap, and while a read filled a whole page.
	lagged    atomic.Bool
	closeOnce sync.Once
}

// offer hands a batch to the follower, or marks it lagged. The caller holds
// the session's mu.
func (f *follower) offer(batch []protocol.Event) {
	select {
	case f.ch <- batch:
	default:
		f.lagged.Store(true)
	}
}

func (f *follower) Next(ctx context.Context) ([]protocol.Event, error) {
	for {
		if f.lagged.Swap(false) {
			evs, err := f.s.Read(ctx, f.session, f.after, persistence.FollowPage)
			if err != nil {
				f.lagged.Store(true)
				return nil, err
			}
			if len(evs) == persistence.FollowPage {
				f.lagged.Store(true)
			}
			if len(evs) > 0 {
				f.after = evs[len(evs)-1].Index
				return evs, nil
			}
		}
		select {
		case batch := <-f.ch:
			if evs := f.take(batch); len(evs) > 0 {
				return evs, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-f.s.stopped:
			return nil, f.s.stopErr()
		}
	}
}

// take returns the events of batch after f.after, or nil when there are
// none, or when the batch does not follow on: then the next Next reads the
// log. (Offers come in index order and a dropped one marks the follower
// lagged before any later one is offered, so a gap is not expected here;
// the check keeps a gap from ever being returned.)
func (f *follower) take(batch []protocol.Event) []protocol.Event {
	i := 0
	for i < len(batch) && batch[i].Index <= f.after {
		i++
	}
	if i == len(batch) {
		return nil
	}
	if batch[i].Index != f.after+1 {
		f.lagged.Store(true)
		return nil
	}
	f.after = batch[len(batch)-1].Index
	return batch[i:]
}

func (f *follower) Close() {
	f.closeOnce.Do(func() {
		f.st.mu.Lock()
		delete(f.st.followers, f)
		if len(f.st.followers) == 0 {
			f.st.followers = nil // a cached idle session keeps no map
		}
		f.st.mu.Unlock()
		f.s.sessions.release(f.session, f.st)
	})
}
