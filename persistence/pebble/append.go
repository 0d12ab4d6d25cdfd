// The store's appends: the checks of a batch, its encoding and its commit
// (store.go has the package's overview).

package pebble

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// Append implements persistence.Store. The steps, all under the session's
// append lock: claim the batch's IDs; look them up (duplicates before the
// index check, OQ-36); compare expected with the cached last index; write the
// events, their ID-index entries, the session meta and the work mark in
// one batch with a WAL sync (a Preceded append's batch applied to it, so
// that one commit writes both); advance the acknowledged last index and
// wake waiters.
//
// Async: the steps up to the commit run on the caller's goroutine, and done
// is called on the caller's goroutine when the append ends before the
// commit (an invalid batch, a resubmission, a conflict), else on the
// store's committer goroutine once the batch is durable or has failed. It
// spares the caller a goroutine that waits for the commit and is woken
// after it: the session actor hands the batch over and is told by the
// committer (docs/storage.md §2.3).
func (s *Store) Append(ctx context.Context, session string, expected uint64, events []protocol.Event, opts ...persistence.AppendOption) ([]protocol.Event, error) {
	o := persistence.OptionsOf(opts)
	switch {
	case o.Done != nil:
		s.appendAsync(ctx, session, expected, events, o, o.Done)
		return nil, nil
	case o.Preceding != nil:
		return persistence.Await(func(done func([]protocol.Event, error)) { s.appendAsync(ctx, session, expected, events, o, done) })
	}
	p, result, err := s.prepareAppend(ctx, session, expected, events, o)
	if p == nil {
		return result, err
	}
	return p.finish(s.commit(p.b))
}

// appendAsync is Append with o, answering done.
func (s *Store) appendAsync(ctx context.Context, session string, expected uint64, events []protocol.Event, o persistence.AppendOptions, done func([]protocol.Event, error)) {
	if o.Preceding != nil {
		s.appendPreceded(ctx, *o.Preceding, session, expected, events, o, done)
		return
	}
	p, result, err := s.prepareAppend(ctx, session, expected, events, o)
	if p == nil {
		done(result, err)
		return
	}
	s.commitAsync(p.b, func(err error) { done(p.finish(err)) })
}

// pendingAppend is an append ready to commit: its Pebble batch, and what
// Append holds until the commit ends (the store's activity count, the
// session's state and append lock, the IDs' claims).
type pendingAppend struct {
	s       *Store
	st      *sessionState
	session string
	ids     []string
	batch   []protocol.Event
	last    uint64
	newLast uint64
	b       *pebbledb.Batch
}

// prepareAppend runs Append's steps up to the commit. With a nil
// pendingAppend, the append has ended with result and err and holds
// nothing; else the caller commits p.b and calls p.finish with the result.
// opts.Work sets or clears the session's work mark in the same batch.
func (s *Store) prepareAppend(ctx context.Context, session string, expected uint64, events []protocol.Event, opts persistence.AppendOptions) (p *pendingAppend, result []protocol.Event, err error) {
	batch, err := persistence.PrepareBatch(session, events)
	if err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if err := s.enter(); err != nil {
		return nil, nil, err
	}
	st := s.sessions.acquire(session)
	st.appendMu.Lock()
	p = &pendingAppend{s: s, st: st, session: session, batch: batch}
	// Until the batch is handed to the committer, every return releases
	// what is held.
	release := func() {
		st.appendMu.Unlock()
		s.sessions.release(session, st)
		s.leave()
	}

	p.ids = make([]string, len(batch))
	for i := range batch {
		p.ids[i] = batch[i].ID
	}
	if err := s.claims.claim(ctx, p.ids); err != nil {
		release()
		return nil, nil, err
	}
	unclaimed := func(result []protocol.Event, err error) (*pendingAppend, []protocol.Event, error) {
		s.claims.unclaim(p.ids)
		release()
		return nil, result, err
	}
	// A failure may have happened while this call waited for its locks.
	if err := s.failed(); err != nil {
		return unclaimed(nil, err)
	}

	// Duplicates first: an identical resubmission replays whatever expected
	// is; a conflicting reuse fails whole.
	stored, err := s.storedByID(batch)
	if err != nil {
		return unclaimed(nil, err)
	}
	if stored != nil {
		return unclaimed(persistence.Resubmission(batch, stored))
	}

	if opts.Epoch != 0 {
		if err := s.checkEpoch(session, opts.Epoch); err != nil {
			return unclaimed(nil, err)
		}
	}
	p.last, err = s.loadLast(st, session)
	if err != nil {
		return unclaimed(nil, err)
	}
	if p.last != expected {
		return unclaimed(nil, fmt.Errorf("%w: session %q is at index %d, append expected %d", persistence.ErrIndexConflict, session, p.last, expected))
	}

	p.b = s.db.NewBatch()
	p.newLast, err = s.fillBatch(p.b, session, p.last, s.now().UnixMilli(), batch)
	if err == nil && opts.Work != nil {
		err = setWork(p.b, session, *opts.Work)
	}
	if err != nil {
		_ = p.b.Close()
		return unclaimed(nil, err)
	}
	// Into the filter before the commit, while the IDs are claimed: the next
	// batch with one of these IDs checks after the claim is released.
	if s.ids != nil {
		for _, id := range p.ids {
			s.ids.add(id)
		}
	}
	return p, nil, nil
}

// finish ends an append whose commit returned err: on success it advances
// the session's acknowledged last index (waking waiters and followers);
// then it releases what prepareAppend holds, in the reverse order.
func (p *pendingAppend) finish(err error) ([]protocol.Event, error) {
	s := p.s
	if err == nil {
		p.st.advance(p.newLast, p.batch, s.recent)
	}
	s.claims.unclaim(p.ids)
	p.st.appendMu.Unlock()
	s.sessions.release(p.session, p.st)
	s.leave()
	if err != nil {
		return nil, fmt.Errorf("append to session %q at indexes %d..%d: %w", p.session, p.last+1, p.newLast, err)
	}
	return p.batch, nil
}

// fillBatch assigns indexes after last and the time now to the events of
// batch and writes them into b: for each event its log record and its
// event-ID index entry, then the session meta. It returns the new last index.
func (s *Store) fillBatch(b *pebbledb.Batch, session string, last uint64, now int64, batch []protocol.Event) (uint64, error) {
	var scratch []byte
	key := logPrefix(session)
	prefix := len(key)
	for i := range batch {
		e := &batch[i]
		e.Index, e.Time = last+1+uint64(i), now
		// Encoded in place: no copy of the payload besides the batch's.
		key = binary.BigEndian.AppendUint64(key[:prefix], e.Index)
		op := b.SetDeferred(len(key), eventSize(e))
		copy(op.Key, key)
		if n := len(encodeEvent(op.Value[:0], e)); n != len(op.Value) {
			return 0, fmt.Errorf("persistence/pebble: event %q encoded to %d bytes, sized %d", e.ID, n, len(op.Value))
		}
		if err := op.Finish(); err != nil {
			return 0, fmt.Errorf("persistence/pebble: batch: %w", err)
		}
		scratch = encodeRef(scratch[:0], session, e.Index)
		if err := b.Set(idKey(e.ID), scratch, nil); err != nil {
			return 0, fmt.Errorf("persistence/pebble: batch: %w", err)
		}
	}
	newLast := last + uint64(len(batch))
	if err := b.Set(metaKey(session), encodeMeta(scratch[:0], newLast), nil); err != nil {
		return 0, fmt.Errorf("persistence/pebble: batch: %w", err)
	}
	return newLast, nil
}

// storedByID returns, for each event of batch, the stored event with its ID
// or nil; it returns a nil slice when no ID of the batch is stored.
func (s *Store) storedByID(batch []protocol.Event) ([]*protocol.Event, error) {
	var stored []*protocol.Event
	for i := range batch {
		if s.ids != nil && s.ids.ready.Load() && !s.ids.mayContain(batch[i].ID) {
			continue // certainly new
		}
		e, found, err := s.getByID(batch[i].ID)
		if err != nil {
			return nil, err
		}
		if found {
			if stored == nil {
				stored = make([]*protocol.Event, len(batch))
			}
			stored[i] = &e
		}
	}
	return stored, nil
}

// getByID reads the event with id through the global event-ID index.
func (s *Store) getByID(id string) (protocol.Event, bool, error) {
	key := idKey(id)
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebbledb.ErrNotFound) {
		return protocol.Event{}, false, nil
	}
	if err != nil {
		return protocol.Event{}, false, fmt.Errorf("persistence/pebble: read %s: %w", describeKey(key), err)
	}
	ref, err := decodeRef(v)
	closer.Close()
	if err != nil {
		return protocol.Event{}, false, corrupt(key, err)
	}
	e, found, err := s.getEvent(ref.session, ref.index)
	if err != nil {
		return protocol.Event{}, false, err
	}
	if !found {
		return protocol.Event{}, false, corrupt(key, fmt.Errorf("points to session %q index %d, which is not stored", ref.session, ref.index))
	}
	if e.ID != id {
		return protocol.Event{}, false, corrupt(key, fmt.Errorf("points to session %q index %d, which holds event %q", ref.session, ref.index, e.ID))
	}
	return e, true, nil
}
