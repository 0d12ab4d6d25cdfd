// The store's reads: events by index and by ID, a session's last index,
// pages of its log, waits, and the list of sessions.

package pebble

import (
	"context"
	"errors"
	"fmt"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// getEvent reads the event at index of session.
func (s *Store) getEvent(session string, index uint64) (protocol.Event, bool, error) {
	key := logKey(session, index)
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebbledb.ErrNotFound) {
		return protocol.Event{}, false, nil
	}
	if err != nil {
		return protocol.Event{}, false, fmt.Errorf("persistence/pebble: read %s: %w", describeKey(key), err)
	}
	defer closer.Close()
	e, err := decodeEventAt(key, v, session, index)
	return e, err == nil, err
}

// decodeEventAt decodes the record stored under key and checks that it is
// the event the key names.
func decodeEventAt(key, v []byte, session string, index uint64) (protocol.Event, error) {
	e, err := decodeEvent(v)
	if err != nil {
		return protocol.Event{}, corrupt(key, err)
	}
	if e.Session != session || e.Index != index {
		return protocol.Event{}, corrupt(key, fmt.Errorf("record names session %q index %d", e.Session, e.Index))
	}
	return e, nil
}

func corrupt(key []byte, err error) error {
	return fmt.Errorf("%w: %s: %w", persistence.ErrCorrupt, describeKey(key), err)
}

// loadLast returns the acknowledged last index of session, reading it from
// the meta key the first time. The caller holds st.appendMu, so no write of
// the session is in flight and what Pebble holds is durable.
func (s *Store) loadLast(st *sessionState, session string) (uint64, error) {
	st.mu.Lock()
	loaded, last := st.loaded, st.last
	st.mu.Unlock()
	if loaded {
		return last, nil
	}
	key := metaKey(session)
	v, closer, err := s.db.Get(key)
	switch {
	case errors.Is(err, pebbledb.ErrNotFound):
		last = 0
	case err != nil:
		return 0, fmt.Errorf("persistence/pebble: read %s: %w", describeKey(key), err)
	default:
		last, err = decodeMeta(v)
		closer.Close()
		if err != nil {
			return 0, corrupt(key, err)
		}
	}
	st.mu.Lock()
	st.loaded, st.last = true, last
	st.mu.Unlock()
	return last, nil
}

// watermark returns the acknowledged last index of session: every event up
// to it is durable, and none after it is acknowledged.
func (s *Store) watermark(st *sessionState, session string) (uint64, error) {
	st.mu.Lock()
	loaded, last := st.loaded, st.last
	st.mu.Unlock()
	if loaded {
		return last, nil
	}
	st.appendMu.Lock()
	defer st.appendMu.Unlock()
	return s.loadLast(st, session)
}

// durableLast is watermark for a session the caller has not acquired.
func (s *Store) durableLast(session string) (uint64, error) {
	st := s.sessions.acquire(session)
	defer s.sessions.release(session, st)
	return s.watermark(st, session)
}

// Lookup implements persistence.Store.
func (s *Store) Lookup(ctx context.Context, ids []string) ([]protocol.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	var out []protocol.Event
	for i, id := range ids {
		if i%256 == 255 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if id == "" {
			continue
		}
		e, found, err := s.getByID(id)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		last, err := s.durableLast(e.Session)
		if err != nil {
			return nil, err
		}
		if e.Index <= last {
			out = append(out, e)
		}
	}
	return out, nil
}

// Read implements persistence.Store. It scans the session's log keys from
// after+1 up to the acknowledged last index, and reports a gap or a record
// that contradicts its key as ErrCorrupt.
func (s *Store) Read(ctx context.Context, session string, after uint64, limit int) ([]protocol.Event, error) {
	if err := persistence.CheckRead(ctx, session, limit); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	last, err := s.durableLast(session)
	if err != nil {
		return nil, err
	}
	if limit == 0 || after >= last {
		return nil, nil
	}
	hi := last
	if uint64(limit) < last-after {
		hi = after + uint64(limit)
	}
	iter, err := s.db.NewIter(&pebbledb.IterOptions{
		LowerBound: logKey(session, after+1),
		UpperBound: logKey(session, hi+1),
	})
	if err != nil {
		return nil, fmt.Errorf("persistence/pebble: read session %q: %w", session, err)
	}
	out, err := readLog(ctx, iter, session, after+1, hi)
	if cerr := iter.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("persistence/pebble: read session %q: %w", session, cerr)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readLog collects the events lo..hi of session from iter, which is bounded
// to exactly those keys.
func readLog(ctx context.Context, iter *pebbledb.Iterator, session string, lo, hi uint64) ([]protocol.Event, error) {
	out := make([]protocol.Event, 0, min(hi-lo+1, 1024))
	prefixLen := len(logPrefix(session))
	next := lo
	for valid := iter.First(); valid; valid = iter.Next() {
		if (next-lo)%256 == 255 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		key := iter.Key()
		index, err := keyIndex(key, prefixLen)
		if err != nil {
			return nil, corrupt(key, err)
		}
		if index != next {
			return nil, corrupt(key, fmt.Errorf("log of session %q skips from index %d to %d", session, next-1, index))
		}
		v, err := iter.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("persistence/pebble: read %s: %w", describeKey(key), err)
		}
		e, err := decodeEventAt(key, v, session, index)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
		next++
	}
	if err := iter.Error(); err != nil {
		return nil, fmt.Errorf("persistence/pebble: read session %q: %w", session, err)
	}
	if next != hi+1 {
		return nil, fmt.Errorf("%w: %s: log of session %q ends at index %d, its last index is %d",
			persistence.ErrCorrupt, describeKey(logKey(session, next)), session, next-1, hi)
	}
	return out, nil
}

// LastIndex implements persistence.Store.
func (s *Store) LastIndex(ctx context.Context, session string) (uint64, error) {
	if err := persistence.CheckSession(session); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.leave()
	return s.durableLast(session)
}

// Wait implements persistence.Store. The acknowledged last index and the
// channel closed at its next advance are read together under the session's
// lock, so an append between the check and the wait still wakes the waiter.
func (s *Store) Wait(ctx context.Context, session string, after uint64) (uint64, error) {
	if err := persistence.CheckSession(session); err != nil {
		return 0, err
	}
	if err := s.enter(); err != nil {
		return 0, err
	}
	st := s.sessions.acquire(session)
	defer s.sessions.release(session, st)
	_, err := s.watermark(st, session)
	s.leave() // the blocking part below touches no Pebble state
	if err != nil {
		return 0, err
	}
	for {
		st.mu.Lock()
		last, changed := st.last, st.changed
		st.mu.Unlock()
		if last > after {
			return last, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-s.stopped:
			return 0, s.stopErr()
		}
	}
}

// Sessions implements persistence.Store by scanning the meta keys, which
// hold bare session IDs in ascending order.
func (s *Store) Sessions(ctx context.Context, after string, limit int) ([]string, error) {
	return s.listSessions(ctx, tagMeta, after, limit, "sessions", s.sessions.firstAppendPending)
}

// listSessions lists the bare session IDs of the keys tagged tag (meta or
// work keys, which hold them in ascending order) strictly after after, at
// most limit, skipping those skip names.
func (s *Store) listSessions(ctx context.Context, tag byte, after string, limit int, what string, skip func(string) bool) ([]string, error) {
	if err := persistence.CheckLimit(limit); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit == 0 {
		return nil, nil
	}
	lower := append(append([]byte{tag}, after...), 0) // the smallest key after after's
	iter, err := s.db.NewIter(&pebbledb.IterOptions{LowerBound: lower, UpperBound: []byte{tag + 1}})
	if err != nil {
		return nil, fmt.Errorf("persistence/pebble: list %s: %w", what, err)
	}
	var out []string
	for valid := iter.First(); valid && len(out) < limit; valid = iter.Next() {
		session := string(iter.Key()[1:])
		if skip != nil && skip(session) {
			continue
		}
		out = append(out, session)
	}
	err = iter.Error()
	if cerr := iter.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("persistence/pebble: list %s: %w", what, err)
	}
	return out, nil
}
