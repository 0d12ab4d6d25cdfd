// The store's snapshots: saving a reducer's state at an index, and loading the latest.

package pebble

import (
	"context"
	"fmt"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/a2-runtime/a2/persistence"
)

// SaveSnapshot implements persistence.Store. The snapshot and the deletion
// of those beyond the retention count commit in one synced batch.
func (s *Store) SaveSnapshot(ctx context.Context, snap persistence.Snapshot) error {
	if err := persistence.CheckSnapshot(ctx, snap.Session, snap.Reducer); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	st := s.sessions.acquire(snap.Session)
	defer s.sessions.release(snap.Session, st)
	st.snapMu.Lock()
	defer st.snapMu.Unlock()

	prefix := snapshotPrefix(snap.Session, snap.Reducer)
	iter, err := s.db.NewIter(&pebbledb.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("persistence/pebble: save snapshot: %w", err)
	}
	// Walk the existing snapshots from the newest; the new one takes its
	// place in that order, and whatever falls past the retention count is
	// deleted.
	b := s.db.NewBatch()
	kept, placed, keepNew := 0, false, false
	place := func() {
		placed = true
		if kept < s.retention {
			keepNew = true
			kept++
		}
	}
	for valid := iter.Last(); valid; valid = iter.Prev() {
		index, err := keyIndex(iter.Key(), len(prefix))
		if err != nil {
			err = corrupt(iter.Key(), err)
			_ = iter.Close()
			_ = b.Close()
			return err
		}
		if !placed && snap.Index >= index {
			place()
			if snap.Index == index && keepNew {
				continue // overwritten by the Set below
			}
		}
		if kept < s.retention {
			kept++
			continue
		}
		if err := b.Delete(iter.Key(), nil); err != nil {
			_ = iter.Close()
			_ = b.Close()
			return fmt.Errorf("persistence/pebble: save snapshot: %w", err)
		}
	}
	if !placed {
		place()
	}
	err = iter.Error()
	if cerr := iter.Close(); err == nil {
		err = cerr
	}
	if err == nil && keepNew {
		err = b.Set(snapshotKey(snap.Session, snap.Reducer, snap.Index), encodeSnapshot(nil, &snap), nil)
	}
	if err != nil {
		_ = b.Close()
		return fmt.Errorf("persistence/pebble: save snapshot: %w", err)
	}
	if b.Empty() {
		return b.Close()
	}
	if err := s.commit(b); err != nil {
		return fmt.Errorf("save snapshot of session %q reducer %q at index %d: %w", snap.Session, snap.Reducer, snap.Index, err)
	}
	return nil
}

// LoadSnapshot implements persistence.Store: the last key of the
// (session, reducer) prefix is the snapshot with the highest index.
func (s *Store) LoadSnapshot(ctx context.Context, session, reducer string) (persistence.Snapshot, bool, error) {
	if err := persistence.CheckSnapshot(ctx, session, reducer); err != nil {
		return persistence.Snapshot{}, false, err
	}
	if err := s.enter(); err != nil {
		return persistence.Snapshot{}, false, err
	}
	defer s.leave()
	prefix := snapshotPrefix(session, reducer)
	iter, err := s.db.NewIter(&pebbledb.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return persistence.Snapshot{}, false, fmt.Errorf("persistence/pebble: load snapshot: %w", err)
	}
	defer iter.Close()
	if !iter.Last() {
		if err := iter.Error(); err != nil {
			return persistence.Snapshot{}, false, fmt.Errorf("persistence/pebble: load snapshot: %w", err)
		}
		return persistence.Snapshot{}, false, nil
	}
	key := iter.Key()
	index, err := keyIndex(key, len(prefix))
	if err != nil {
		return persistence.Snapshot{}, false, corrupt(key, err)
	}
	v, err := iter.ValueAndErr()
	if err != nil {
		return persistence.Snapshot{}, false, fmt.Errorf("persistence/pebble: read %s: %w", describeKey(key), err)
	}
	snap, err := decodeSnapshot(v)
	if err != nil {
		return persistence.Snapshot{}, false, corrupt(key, err)
	}
	if snap.Session != session || snap.Reducer != reducer || snap.Index != index {
		return persistence.Snapshot{}, false, corrupt(key, fmt.Errorf("record names session %q reducer %q index %d", snap.Session, snap.Reducer, snap.Index))
	}
	return snap, true, nil
}
