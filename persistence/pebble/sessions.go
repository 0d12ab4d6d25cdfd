package pebble

import (
	"context"
	"sync"

	"github.com/a2-runtime/a2/protocol"
)

// sessionState is what the store keeps in memory about one session.
//
// Two locks, because they are held for very different times:
//   - appendMu serializes the writes of the session (Append, SaveSnapshot's
//     retention) and is held across the synced commit, so the expected-index
//     check and the write are atomic per session;
//   - mu guards the acknowledged last index and the wake-up channel, and is
//     held only for a few instructions, so Wait and Read never queue behind
//     an fsync.
//
// last is the durability watermark of the session: the index of the last
// event whose Append has returned, that is, whose batch is synced. Pebble
// makes a committed batch visible to readers before its WAL sync completes
// (the commit pipeline publishes in sequence order, then waits for the
// sync), so reads are bounded by last rather than by what Pebble shows.
type sessionState struct {
	appendMu sync.Mutex
	snapMu   sync.Mutex // serializes SaveSnapshot for the session

	mu      sync.Mutex
	loaded  bool          // last has been read from the store
	last    uint64        // acknowledged last index; valid when loaded
	changed chan struct{} // closed and replaced each time last advances

	followers map[*follower]struct{} // tails following the session (Follow)

	// recent holds copies of the session's latest acknowledged events, in
	// index order up to last, while the store's recentTails keeps the
	// session among the latest to append (recentGen names the latest
	// entry): a follower that starts within them reads no log (Follow).
	recent      []protocol.Event
	recentBytes int
	// recentDropped is the payload the window dropped that its array
	// still holds (keepRecent).
	recentDropped int
	recentGen     uint64

	refs int // calls holding this state; guarded by registry.mu
}

// The recent events a session keeps (sessionState.recent): at most
// recentEvents of them and recentBytes of payload, for the recentSlots
// sessions that appended last. So they take at most recentSlots x
// recentBytes of memory (8 MiB), whatever the number of sessions.
const (
	recentEvents = 64
	recentBytes  = 8 << 10
	recentSlots  = 1024
)

// recentTails names the sessions that keep recent events: the latest
// recentSlots appends, each an entry of its session's state and the
// generation of its recent events then. An entry that falls out of the
// ring clears its session's recent events, unless the session appended
// since (a later entry holds them).
type recentTails struct {
	mu    sync.Mutex
	slots [recentSlots]recentEntry
	next  int
}

type recentEntry struct {
	st  *sessionState
	gen uint64
}

// add records that st's recent events are of generation gen, and clears
// those of the entry that falls out.
func (r *recentTails) add(st *sessionState, gen uint64) {
	r.mu.Lock()
	old := r.slots[r.next]
	r.slots[r.next] = recentEntry{st: st, gen: gen}
	r.next = (r.next + 1) % recentSlots
	r.mu.Unlock()
	if old.st != nil {
		old.st.mu.Lock()
		if old.st.recentGen == old.gen {
			old.st.recent, old.st.recentBytes, old.st.recentDropped = nil, 0, 0
		}
		old.st.mu.Unlock()
	}
}

// keepRecent adds out, the copies of an acknowledged batch, to the recent
// events, dropping the oldest beyond the bounds, and returns their new
// generation. The caller holds st.mu.
func (st *sessionState) keepRecent(out []protocol.Event, size int) uint64 {
	st.recentGen++
	if size > recentBytes || len(out) > recentEvents {
		st.recent, st.recentBytes, st.recentDropped = nil, 0, 0
		return st.recentGen
	}
	if n := len(st.recent); n == 0 || st.recent[n-1].Index+1 != out[0].Index {
		st.recent, st.recentBytes, st.recentDropped = nil, 0, 0
	}
	drop := 0
	for st.recentBytes+size > recentBytes || len(st.recent)-drop+len(out) > recentEvents {
		st.recentBytes -= len(st.recent[drop].Payload)
		st.recentDropped += len(st.recent[drop].Payload)
		drop++
	}
	// The window slides along its array and appends in place: no element
	// of it is ever written twice, so the views Follow hands out (capped at
	// their length) stay as they are. When the array is full, or the events
	// it dropped hold more than a window's bytes, the window moves to a
	// fresh array with room for as many events again: a session allocates
	// once every window's worth of events, not once a batch, and keeps at
	// most about twice a window's payload alive.
	st.recent = st.recent[drop:]
	if cap(st.recent)-len(st.recent) < len(out) || st.recentDropped > recentBytes {
		st.recent = append(make([]protocol.Event, 0, 2*(len(st.recent)+len(out))), st.recent...)
		st.recentDropped = 0
	}
	st.recent = append(st.recent, out...)
	st.recentBytes += size
	return st.recentGen
}

// advance records a newly acknowledged last index, offers the batch that
// reached it to the session's followers, keeps it among the session's
// recent events (recent) and wakes every waiter.
func (st *sessionState) advance(last uint64, batch []protocol.Event, tails *recentTails) {
	st.mu.Lock()
	if last > st.last {
		st.last = last
	}
	var gen uint64
	keep := tails != nil && len(batch) > 0 && batch[len(batch)-1].Index == st.last
	if len(st.followers) > 0 || keep {
		// Followers and the recent events get copies of the envelope
		// fields and the payloads (one allocation), nothing the appender's
		// events carry besides (see protocol.NewProgressEvent), and
		// nothing the appender could change.
		size := 0
		for i := range batch {
			size += len(batch[i].Payload)
		}
		buf := make([]byte, 0, size)
		out := make([]protocol.Event, len(batch))
		for i, e := range batch {
			n := len(buf)
			buf = append(buf, e.Payload...)
			out[i] = protocol.Event{ID: e.ID, Type: e.Type, Payload: buf[n:len(buf):len(buf)], Index: e.Index, Session: e.Session, Time: e.Time, Cause: e.Cause}
		}
		for f := range st.followers {
			f.offer(out)
		}
		if keep {
			gen = st.keepRecent(out, size)
		}
	}
	close(st.changed)
	st.changed = make(chan struct{})
	st.mu.Unlock()
	if gen != 0 {
		tails.add(st, gen)
	}
}

// registry maps session IDs to their in-memory state. A state stays cached
// after its last user releases it, so the hot path never re-reads the last
// index, until the registry holds more than max states; idle states beyond
// that are dropped on release. Dropping one is safe: it only caches what the
// store holds, and a new state reloads it under appendMu.
type registry struct {
	mu  sync.Mutex
	m   map[string]*sessionState
	max int
}

func newRegistry(max int) *registry {
	return &registry{m: make(map[string]*sessionState), max: max}
}

// acquire returns the state of session, pinned until release.
func (r *registry) acquire(session string) *sessionState {
	r.mu.Lock()
	st := r.m[session]
	if st == nil {
		st = &sessionState{changed: make(chan struct{})}
		r.m[session] = st
	}
	st.refs++
	r.mu.Unlock()
	return st
}

// release unpins a state returned by acquire.
func (r *registry) release(session string, st *sessionState) {
	r.mu.Lock()
	st.refs--
	if st.refs == 0 && len(r.m) > r.max {
		delete(r.m, session)
	}
	r.mu.Unlock()
}

// firstAppendPending reports whether session's first batch may be committed
// but not yet acknowledged. A visible meta key of such a session must not be
// listed. If no state is cached, no Append of the session is in progress (an
// Append pins its state), and if the state is not loaded no Append has
// reached its commit.
func (r *registry) firstAppendPending(session string) bool {
	r.mu.Lock()
	st := r.m[session]
	r.mu.Unlock()
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.loaded && st.last == 0
}

// idClaims makes the check "is this event ID stored?" and the write that
// stores it atomic across sessions. Each Append claims the IDs of its batch
// before looking them up and holds the claim until its commit returns, so two
// sessions can never both store the same new ID (R-LOG-01). A batch takes all
// its claims or none, and waits holding none, so claims cannot deadlock.
type idClaims struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func newIDClaims() *idClaims {
	return &idClaims{m: make(map[string]chan struct{})}
}

// claim blocks until no other batch holds any of ids, then claims them all.
// It returns ctx's error if ctx ends first, holding nothing.
func (c *idClaims) claim(ctx context.Context, ids []string) error {
	for {
		c.mu.Lock()
		var busy chan struct{}
		for _, id := range ids {
			if ch, ok := c.m[id]; ok {
				busy = ch
				break
			}
		}
		if busy == nil {
			done := make(chan struct{})
			for _, id := range ids {
				c.m[id] = done
			}
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// unclaim releases the claims taken by claim(ids) and wakes their waiters.
func (c *idClaims) unclaim(ids []string) {
	c.mu.Lock()
	done := c.m[ids[0]]
	for _, id := range ids {
		delete(c.m, id)
	}
	c.mu.Unlock()
	close(done)
}
