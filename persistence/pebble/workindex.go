package pebble

import (
	"context"
	"errors"
	"fmt"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// The index of sessions with work (persistence.WorkIndexer): a key
// 'w' session per session that may have work, set or deleted in the batch
// of the append that changes it, and 'x' once the index covers the whole
// store (docs/storage.md §1.3).

var _ persistence.WorkIndexer = (*Store)(nil)

// setWork sets or deletes session's work mark in b.
func setWork(b *pebbledb.Batch, session string, work bool) error {
	var err error
	if work {
		err = b.Set(workKey(session), nil, nil)
	} else {
		err = b.Delete(workKey(session), nil)
	}
	if err != nil {
		return fmt.Errorf("persistence/pebble: batch: %w", err)
	}
	return nil
}

// appendPreceded is the append of a batch Preceded by pre: pre and
// the batch are prepared one after the other (each under its own log's
// append lock, pre's first), and pre's Pebble batch is applied to the
// batch's, so that one commit, in one group, writes both. When the batch
// ends before its commit (a resubmission, a conflict), pre is committed
// alone, as an append before it would have been.
func (s *Store) appendPreceded(ctx context.Context, pre persistence.Preceding, session string, expected uint64, events []protocol.Event, opts persistence.AppendOptions, done func([]protocol.Event, error)) {
	opts.Preceding, opts.Done = nil, nil
	if pre.Session == session {
		done(nil, fmt.Errorf("%w: a preceding append to the batch's own session %q", persistence.ErrInvalid, session))
		return
	}
	pp, stored, err := s.prepareAppend(ctx, pre.Session, pre.Expected, pre.Events, persistence.AppendOptions{})
	if pp == nil {
		if err := pre.Check(stored, err); err != nil {
			done(nil, err)
			return
		}
		s.appendAsync(ctx, session, expected, events, opts, done)
		return
	}
	p, result, err := s.prepareAppend(ctx, session, expected, events, opts)
	if p == nil {
		s.commitAsync(pp.b, func(perr error) {
			if _, perr = pp.finish(perr); perr != nil {
				done(nil, perr)
				return
			}
			done(result, err)
		})
		return
	}
	if aerr := p.b.Apply(pp.b, nil); aerr != nil {
		_ = pp.b.Close()
		_ = p.b.Close()
		aerr = fmt.Errorf("persistence/pebble: batch: %w", aerr)
		_, _ = pp.finish(aerr)
		done(p.finish(aerr))
		return
	}
	_ = pp.b.Close()
	s.commitAsync(p.b, func(err error) {
		_, _ = pp.finish(err)
		done(p.finish(err))
	})
}

// MarkWork implements persistence.WorkIndexer: under the session's append
// lock, so that no append of the session runs between the check of its
// last index and the mark.
func (s *Store) MarkWork(ctx context.Context, session string, at uint64, work bool) error {
	if err := persistence.CheckSession(session); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	st := s.sessions.acquire(session)
	st.appendMu.Lock()
	defer func() {
		st.appendMu.Unlock()
		s.sessions.release(session, st)
	}()
	last, err := s.loadLast(st, session)
	if err != nil {
		return err
	}
	if last != at {
		return fmt.Errorf("%w: session %q is at index %d, its work mark expected %d", persistence.ErrIndexConflict, session, last, at)
	}
	b := s.db.NewBatch()
	if err := setWork(b, session, work); err != nil {
		_ = b.Close()
		return err
	}
	return s.commit(b)
}

// HasWork implements persistence.WorkIndexer.
func (s *Store) HasWork(ctx context.Context, session string) (bool, error) {
	if err := persistence.CheckSession(session); err != nil {
		return false, err
	}
	return s.has(ctx, workKey(session))
}

// has reports whether key is stored.
func (s *Store) has(ctx context.Context, key []byte) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := s.enter(); err != nil {
		return false, err
	}
	defer s.leave()
	_, closer, err := s.db.Get(key)
	if errors.Is(err, pebbledb.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("persistence/pebble: read %s: %w", describeKey(key), err)
	}
	closer.Close()
	return true, nil
}

// SessionsWithWork implements persistence.WorkIndexer.
func (s *Store) SessionsWithWork(ctx context.Context, after string, limit int) ([]string, error) {
	return s.listSessions(ctx, tagWork, after, limit, "sessions with work", nil)
}

// WorkIndexComplete implements persistence.WorkIndexer.
func (s *Store) WorkIndexComplete(ctx context.Context) (bool, error) {
	return s.has(ctx, workCompleteKey)
}

// MarkWorkIndexComplete implements persistence.WorkIndexer.
func (s *Store) MarkWorkIndexComplete(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	b := s.db.NewBatch()
	if err := b.Set(workCompleteKey, nil, nil); err != nil {
		_ = b.Close()
		return fmt.Errorf("persistence/pebble: mark the work index complete: %w", err)
	}
	return s.commit(b)
}
