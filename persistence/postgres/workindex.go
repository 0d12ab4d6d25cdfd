package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/a2-runtime/a2/persistence"
)

// The index of sessions with work (persistence.WorkIndexer): the column
// sessions.has_work, written in the append's transaction, its partial
// index, and the flag 'work-index-complete' in store_flags (migration 2).

var _ persistence.WorkIndexer = (*Store)(nil)

const workIndexComplete = "work-index-complete"

// MarkWork implements persistence.WorkIndexer: one statement that updates
// the session's row only at the expected last index.
func (s *Store) MarkWork(ctx context.Context, session string, at uint64, work bool) error {
	if err := persistence.CheckSession(session); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	tag, err := s.pool.Exec(ctx, "UPDATE sessions SET has_work = $3 WHERE session = $1 AND last_idx = $2", []byte(session), int64(at), work)
	if err != nil {
		return fmt.Errorf("persistence/postgres: mark the work of session %q: %w", session, err)
	}
	if tag.RowsAffected() == 0 {
		last, err := s.lastIndex(ctx, session)
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: session %q is at index %d, its work mark expected %d", persistence.ErrIndexConflict, session, last, at)
	}
	return nil
}

// HasWork implements persistence.WorkIndexer.
func (s *Store) HasWork(ctx context.Context, session string) (bool, error) {
	if err := persistence.CheckSession(session); err != nil {
		return false, err
	}
	if err := s.enter(); err != nil {
		return false, err
	}
	defer s.leave()
	var has bool
	err := s.pool.QueryRow(ctx, "SELECT has_work FROM sessions WHERE session = $1", []byte(session)).Scan(&has)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("persistence/postgres: read the work mark of session %q: %w", session, err)
	}
	return has, nil
}

// SessionsWithWork implements persistence.WorkIndexer.
func (s *Store) SessionsWithWork(ctx context.Context, after string, limit int) ([]string, error) {
	if err := persistence.CheckLimit(limit); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, "SELECT session FROM sessions WHERE has_work AND session > $1 ORDER BY session LIMIT $2", []byte(after), limit)
	if err != nil {
		return nil, fmt.Errorf("persistence/postgres: list sessions with work: %w", err)
	}
	ids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var b []byte
		err := r.Scan(&b)
		return string(b), err
	})
	if err != nil {
		return nil, fmt.Errorf("persistence/postgres: list sessions with work: %w", err)
	}
	return ids, nil
}

// WorkIndexComplete implements persistence.WorkIndexer.
func (s *Store) WorkIndexComplete(ctx context.Context) (bool, error) {
	if err := s.enter(); err != nil {
		return false, err
	}
	defer s.leave()
	var n int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM store_flags WHERE name = $1", workIndexComplete).Scan(&n); err != nil {
		return false, fmt.Errorf("persistence/postgres: read the work index's flag: %w", err)
	}
	return n > 0, nil
}

// MarkWorkIndexComplete implements persistence.WorkIndexer.
func (s *Store) MarkWorkIndexComplete(ctx context.Context) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if _, err := s.pool.Exec(ctx, "INSERT INTO store_flags (name) VALUES ($1) ON CONFLICT (name) DO NOTHING", workIndexComplete); err != nil {
		return fmt.Errorf("persistence/postgres: mark the work index complete: %w", err)
	}
	return nil
}
