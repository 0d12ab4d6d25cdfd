package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/a2-runtime/a2/persistence"
)

// Member leases and session ownership (persistence.Leaser), migration 4:
// a member's lease is its row in members; a session's owner and epoch are
// columns of its sessions row, which every append locks, so that an
// acquisition of the next epoch waits for an append of the one before and
// the other way round. Lease times are the server's clock (now()), so
// that members' clocks need not agree; each operation is one statement.

var _ persistence.Leaser = (*Store)(nil)

// RenewMember implements persistence.Leaser.
func (s *Store) RenewMember(ctx context.Context, member string, ttl time.Duration) error {
	if err := persistence.CheckMember(member); err != nil {
		return err
	}
	if err := persistence.CheckTTL(ttl); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if _, err := s.pool.Exec(ctx, `INSERT INTO members (member, expires_at) VALUES ($1, now() + $2 * interval '1 microsecond')
		ON CONFLICT (member) DO UPDATE SET expires_at = EXCLUDED.expires_at`, member, ttl.Microseconds()); err != nil {
		return fmt.Errorf("persistence/postgres: renew the lease of member %q: %w", member, err)
	}
	return nil
}

// ReleaseMember implements persistence.Leaser. It also forgets members
// whose leases ended a day ago or more (each process start is a member of
// its own).
func (s *Store) ReleaseMember(ctx context.Context, member string) error {
	if err := persistence.CheckMember(member); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if _, err := s.pool.Exec(ctx, `UPDATE members SET expires_at = now() WHERE member = $1 AND expires_at > now()`, member); err != nil {
		return fmt.Errorf("persistence/postgres: release the lease of member %q: %w", member, err)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM members WHERE expires_at < now() - interval '1 day'`); err != nil {
		return fmt.Errorf("persistence/postgres: forget old members: %w", err)
	}
	return nil
}

// AcquireLease implements persistence.Leaser: one upsert of the session's
// row that raises its epoch only when it may.
func (s *Store) AcquireLease(ctx context.Context, session, owner string) (persistence.Lease, error) {
	if err := persistence.CheckLeaseArgs(session, owner); err != nil {
		return persistence.Lease{}, err
	}
	if err := s.enter(); err != nil {
		return persistence.Lease{}, err
	}
	defer s.leave()
	var epoch int64
	var expires *time.Time
	err := s.pool.QueryRow(ctx, `INSERT INTO sessions AS s (session, last_idx, owner, epoch) VALUES ($1, 0, $2, 1)
		ON CONFLICT (session) DO UPDATE SET owner = EXCLUDED.owner, epoch = s.epoch + 1
		WHERE s.owner = '' OR s.owner = EXCLUDED.owner
			OR NOT EXISTS (SELECT 1 FROM members m WHERE m.member = s.owner AND m.expires_at > now())
		RETURNING epoch, (SELECT m.expires_at FROM members m WHERE m.member = $2)`, []byte(session), owner).Scan(&epoch, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		cur, _, err := s.readLease(ctx, session)
		if err != nil {
			return persistence.Lease{}, err
		}
		return persistence.Lease{}, &persistence.LeaseHeldError{Session: session, Lease: cur}
	}
	if err != nil {
		return persistence.Lease{}, fmt.Errorf("persistence/postgres: acquire session %q for %q: %w", session, owner, err)
	}
	// The session may have been written by another member since this
	// process last did: what its tails remember of it is stale.
	s.follow.Lagged(session)
	l := persistence.Lease{Owner: owner, Epoch: uint64(epoch)}
	if expires != nil {
		l.Expires = *expires
	}
	return l, nil
}

// ReleaseLease implements persistence.Leaser.
func (s *Store) ReleaseLease(ctx context.Context, session, owner string, epoch uint64) error {
	if err := persistence.CheckLeaseArgs(session, owner); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if _, err := s.pool.Exec(ctx, "UPDATE sessions SET owner = '' WHERE session = $1 AND owner = $2 AND epoch = $3",
		[]byte(session), owner, int64(epoch)); err != nil {
		return fmt.Errorf("persistence/postgres: release session %q: %w", session, err)
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
	var expires *time.Time
	err := s.pool.QueryRow(ctx, `SELECT s.owner, s.epoch, m.expires_at FROM sessions s
		LEFT JOIN members m ON s.owner <> '' AND m.member = s.owner WHERE s.session = $1`, []byte(session)).Scan(&l.Owner, &epoch, &expires)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && epoch == 0) {
		return persistence.Lease{}, false, nil
	}
	if err != nil {
		return persistence.Lease{}, false, fmt.Errorf("persistence/postgres: read the owner of session %q: %w", session, err)
	}
	l.Epoch = uint64(epoch)
	if expires != nil {
		l.Expires = *expires
	}
	return l, true, nil
}
