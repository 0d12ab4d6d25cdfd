// The store's reads: events by ID and by index, a session's last index,
// waiting for a session's next append (LISTEN/NOTIFY or polling), and the
// list of sessions (store.go has the package's overview).

package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
	"github.com/jackc/pgx/v5"
)

// scanEvents reads rows of (session, idx, id, type, cause, time_ms,
// payload) and closes them.
func scanEvents(rows pgx.Rows) ([]protocol.Event, error) {
	defer rows.Close()
	var out []protocol.Event
	for rows.Next() {
		var (
			e                       protocol.Event
			idx                     int64
			session, id, typ, cause []byte
			payload                 []byte
		)
		if err := rows.Scan(&session, &idx, &id, &typ, &cause, &e.Time, &payload); err != nil {
			return nil, err
		}
		e.Session, e.ID, e.Type, e.Cause = string(session), string(id), string(typ), string(cause)
		if idx < 1 {
			return nil, fmt.Errorf("%w: events row of session %q, id %q has index %d", persistence.ErrCorrupt, e.Session, e.ID, idx)
		}
		e.Index, e.Payload = uint64(idx), payload
		out = append(out, e)
	}
	return out, rows.Err()
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
	return s.lookup(ctx, ids)
}

// lookup is Lookup without its checks (an append's resubmission calls it
// while it holds the store).
func (s *Store) lookup(ctx context.Context, ids []string) ([]protocol.Event, error) {
	want := make([][]byte, 0, len(ids))
	for _, id := range ids {
		if id != "" {
			want = append(want, []byte(id))
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	found, err := s.lookups.do(ctx, s, want)
	if err != nil {
		return nil, fmt.Errorf("persistence/postgres: look up %d event IDs: %w", len(want), err)
	}
	byID := make(map[string]protocol.Event, len(found))
	for _, e := range found {
		byID[e.ID] = e
	}
	var out []protocol.Event
	for _, id := range ids {
		if e, ok := byID[id]; ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// Read implements persistence.Store. A gap in the returned indexes is
// reported as ErrCorrupt.
func (s *Store) Read(ctx context.Context, session string, after uint64, limit int) ([]protocol.Event, error) {
	if err := persistence.CheckRead(ctx, session, limit); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit == 0 || after >= math.MaxInt64 {
		return nil, nil
	}
	var out []protocol.Event
	rows, err := s.pool.Query(ctx, "SELECT session, idx, id, type, cause, time_ms, payload FROM a2_read($1, $2, $3)", []byte(session), int64(after), int64(limit))
	if err == nil {
		out, err = scanEvents(rows)
	}
	if err != nil {
		return nil, fmt.Errorf("persistence/postgres: read session %q after index %d: %w", session, after, err)
	}
	for i, e := range out {
		if want := after + 1 + uint64(i); e.Index != want {
			return nil, fmt.Errorf("%w: events of session %q: index %d follows %d", persistence.ErrCorrupt, session, e.Index, want-1)
		}
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
	return s.lastIndex(ctx, session)
}

func (s *Store) lastIndex(ctx context.Context, session string) (uint64, error) {
	var last int64
	err := s.pool.QueryRow(ctx, "SELECT last_idx FROM sessions WHERE session = $1", []byte(session)).Scan(&last)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("persistence/postgres: last index of session %q: %w", session, err)
	case last < 0:
		return 0, fmt.Errorf("%w: sessions row %q has last index %d", persistence.ErrCorrupt, session, last)
	}
	return uint64(last), nil
}

// Wait implements persistence.Store. The waiter registers for the session's
// notifications before it reads the last index, so an append committed
// after the read wakes it; it also re-reads every PollInterval. A read that
// fails (the database is restarting) is retried at the next poll rather than
// returned, until ctx ends or the store closes.
func (s *Store) Wait(ctx context.Context, session string, after uint64) (uint64, error) {
	if err := persistence.CheckSession(session); err != nil {
		return 0, err
	}
	if err := s.enter(); err != nil {
		return 0, err
	}
	s.leave()
	timer := time.NewTimer(s.poll)
	defer timer.Stop()
	for {
		woken := s.waitChan(session)
		if err := s.enter(); err != nil {
			return 0, err
		}
		last, err := s.lastIndex(ctx, session)
		s.leave()
		if err == nil && last > after {
			return last, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if errors.Is(err, persistence.ErrCorrupt) {
			return 0, err
		}
		timer.Reset(s.poll)
		select {
		case <-woken:
		case <-timer.C:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-s.stopped:
			return 0, fmt.Errorf("%w: Wait on session %q", persistence.ErrClosed, session)
		}
	}
}

// waitChan returns the channel closed at the session's next notification.
func (s *Store) waitChan(session string) chan struct{} {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	c, ok := s.waiters[session]
	if !ok {
		c = make(chan struct{})
		s.waiters[session] = c
	}
	return c
}

// wake closes the waiting channel of session, or of every session when all
// is set (after the listener reconnects, notifications may have been lost).
func (s *Store) wake(session string, all bool) {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	if all {
		for k, c := range s.waiters {
			close(c)
			delete(s.waiters, k)
		}
		return
	}
	if c, ok := s.waiters[session]; ok {
		close(c)
		delete(s.waiters, session)
	}
}

// listen holds a connection that LISTENs on the notification channel and
// wakes waiters, reconnecting (with a growing pause) until Close.
func (s *Store) listen(cfg *pgx.ConnConfig) {
	defer close(s.listener)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stopped
		cancel()
	}()
	pause := 50 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			if _, err = conn.Exec(ctx, "LISTEN "+notifyChannel); err == nil {
				pause = 50 * time.Millisecond
				// Notifications may have been missed while disconnected.
				s.wake("", true)
				s.follow.LaggedAll()
				for {
					n, err := conn.WaitForNotification(ctx)
					if err != nil {
						break
					}
					if session, ok := s.notified(n.Payload); ok {
						s.wake(session, false)
						s.follow.Lagged(session)
					}
				}
			}
			_ = conn.Close(context.Background())
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(pause*2, 2*time.Second)
	}
}

// Sessions implements persistence.Store.
func (s *Store) Sessions(ctx context.Context, after string, limit int) ([]string, error) {
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
	rows, err := s.pool.Query(ctx, `SELECT session FROM sessions WHERE session > $1 AND last_idx > 0 ORDER BY session LIMIT $2`, []byte(after), limit)
	if err != nil {
		return nil, fmt.Errorf("persistence/postgres: list sessions after %q: %w", after, err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var b []byte
		err := r.Scan(&b)
		return string(b), err
	})
	if err != nil {
		return nil, fmt.Errorf("persistence/postgres: list sessions after %q: %w", after, err)
	}
	return list, nil
}
