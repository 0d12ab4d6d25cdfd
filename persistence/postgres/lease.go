package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/a2-runtime/a2/persistence"
)

// Session leases (persistence.Leaser) in the table leases (migration 3).
// Expiry is the server's clock (now()), so that members' clocks need not
// agree; each operation is one statement.

var _ persistence.Leaser = (*Store)(nil)

// AcquireLease implements persistence.Leaser.
func (s *Store) AcquireLease(ctx context.Context, session, owner string, ttl time.Duration) (persistence.Lease, error) {
	if err := persistence.CheckLeaseArgs(session, owner, ttl); err != nil {
		return persistence.Lease{}, err
	}
	if err := s.enter(); err != nil {
		return persistence.Lease{}, err
	}
	defer s.leave()
	l := persistence.Lease{Owner: owner}
	var epoch int64
	err := s.pool.QueryRow(ctx, `INSERT INTO leases (session, owner, epoch, expires_at)
		VALUES ($1, $2, 1, now() + $3 * interval '1 microsecond')
		ON CONFLICT (session) DO UPDATE SET owner = EXCLUDED.owner, epoch = leases.epoch + 1, expires_at = EXCLUDED.expires_at
		WHERE leases.owner = EXCLUDED.owner OR leases.expires_at <= now()
		RETURNING epoch, expires_at`, []byte(session), owner, ttl.Microseconds()).Scan(&epoch, &l.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		cur, _, err := s.readLease(ctx, session)
		if err != nil {
			return persistence.Lease{}, err
		}
		return persistence.Lease{}, &persistence.LeaseHeldError{Session: session, Lease: cur}
	}
	if err != nil {
		return persistence.Lease{}, fmt.Errorf("persistence/postgres: acquire the lease of session %q: %w", session, err)
	}
	l.Epoch = uint64(epoch)
	return l, nil
}

// RenewLease implements persistence.Leaser.
func (s *Store) RenewLease(ctx context.Context, session, owner string, epoch uint64, ttl time.Duration) (persistence.Lease, error) {
	if err := persistence.CheckLeaseArgs(session, owner, ttl); err != nil {
		return persistence.Lease{}, err
	}
	if err := s.enter(); err != nil {
		return persistence.Lease{}, err
	}
	defer s.leave()
	l := persistence.Lease{Owner: owner, Epoch: epoch}
	err := s.pool.QueryRow(ctx, `UPDATE leases SET expires_at = now() + $4 * interval '1 microsecond'
		WHERE session = $1 AND owner = $2 AND epoch = $3 RETURNING expires_at`,
		[]byte(session), owner, int64(epoch), ttl.Microseconds()).Scan(&l.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		cur, _, _ := s.readLease(ctx, session)
		return persistence.Lease{}, fmt.Errorf("%w: session %q is at lease epoch %d (owner %q), the renewal's is %d (owner %q)", persistence.ErrLeaseLost, session, cur.Epoch, cur.Owner, epoch, owner)
	}
	if err != nil {
		return persistence.Lease{}, fmt.Errorf("persistence/postgres: renew the lease of session %q: %w", session, err)
	}
	return l, nil
}

// ReleaseLease implements persistence.Leaser.
func (s *Store) ReleaseLease(ctx context.Context, session, owner string, epoch uint64) error {
	if err := persistence.CheckLeaseArgs(session, owner, time.Nanosecond); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if _, err := s.pool.Exec(ctx, "UPDATE leases SET expires_at = now() WHERE session = $1 AND owner = $2 AND epoch = $3",
		[]byte(session), owner, int64(epoch)); err != nil {
		return fmt.Errorf("persistence/postgres: release the lease of session %q: %w", session, err)
	}
	return nil
}

// ReadLease implements persistence.Leaser.
func (s *Store) ReadLease(ctx context.Context, session string) (persistence.Lease, bool, error) {
	if err := persistence.CheckSession(session); err != nil {
		return persistence.Lease{}, false, err
	}
	if err := s.enter(); err != nil {
		return persistence.Lease{}, false, err
	}
	defer s.leave()
	return s.readLease(ctx, session)
}

func (s *Store) readLease(ctx context.Context, session string) (persistence.Lease, bool, error) {
	var l persistence.Lease
	var epoch int64
	err := s.pool.QueryRow(ctx, "SELECT owner, epoch, expires_at FROM leases WHERE session = $1", []byte(session)).Scan(&l.Owner, &epoch, &l.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return persistence.Lease{}, false, nil
	}
	if err != nil {
		return persistence.Lease{}, false, fmt.Errorf("persistence/postgres: read the lease of session %q: %w", session, err)
	}
	l.Epoch = uint64(epoch)
	return l, true, nil
}
