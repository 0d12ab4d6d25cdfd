package postgres

import (
	"context"
	"sync"

	"github.com/a2-runtime/a2/protocol"
)

// Lookups in groups. Every push a session actor admits first looks its
// event IDs up (a resubmission replays, a reused ID is refused before it
// reaches a batch), one Lookup per push: the lookups of many sessions that
// arrive while one is in flight share the next query, as appends share a
// commit (group.go).

// maxLookupIDs bounds the IDs of one shared query.
const maxLookupIDs = 4096

type lookupRequest struct {
	ids  [][]byte
	done chan lookupResult // buffered: the runner never blocks on it
}

type lookupResult struct {
	events []protocol.Event
	err    error
}

// lookupBatcher queues Lookups; at most one query is in flight.
type lookupBatcher struct {
	mu      sync.Mutex
	queue   []*lookupRequest
	running bool
}

// do returns the stored events among ids (in no particular order).
func (b *lookupBatcher) do(ctx context.Context, s *Store, ids [][]byte) ([]protocol.Event, error) {
	r := &lookupRequest{ids: ids, done: make(chan lookupResult, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, r)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.run(s)
	}
	select {
	case res := <-r.done:
		return res.events, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run answers queued lookups, a shared query at a time, until none is
// queued.
func (b *lookupBatcher) run(s *Store) {
	for {
		b.mu.Lock()
		n, ids := 0, 0
		for n < len(b.queue) && (n == 0 || ids+len(b.queue[n].ids) <= maxLookupIDs) {
			ids += len(b.queue[n].ids)
			n++
		}
		if n == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		group := append([]*lookupRequest(nil), b.queue[:n]...)
		clear(b.queue[:n])
		b.queue = b.queue[n:]
		b.mu.Unlock()

		all := make([][]byte, 0, ids)
		for _, r := range group {
			all = append(all, r.ids...)
		}
		// Bounded by the store's statement timeout, if any; a caller that
		// stops waiting does not cancel its neighbours' query.
		rows, err := s.pool.Query(context.Background(), "SELECT session, idx, id, type, cause, time_ms, payload FROM a2_lookup($1)", all)
		var found []protocol.Event
		if err == nil {
			found, err = scanEvents(rows)
		}
		for _, r := range group {
			r.done <- lookupResult{events: found, err: err}
		}
	}
}
