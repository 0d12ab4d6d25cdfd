package pebble

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/a2-runtime/a2/persistence"
)

// Session leases (persistence.Leaser): one key 'l' session per session
// that ever had a lease, holding uvarint(epoch) varint(expiry in Unix ms)
// and the owner's bytes. Every lease operation, and the epoch check of a
// fenced append, runs under the session's append lock, so an append of an
// epoch is never interleaved with the acquisition of the next.

var _ persistence.Leaser = (*Store)(nil)

func encodeLease(l persistence.Lease) []byte {
	b := binary.AppendUvarint(nil, l.Epoch)
	b = binary.AppendVarint(b, l.Expires.UnixMilli())
	return append(b, l.Owner...)
}

func decodeLease(key, v []byte) (persistence.Lease, error) {
	epoch, n := binary.Uvarint(v)
	if n <= 0 {
		return persistence.Lease{}, corrupt(key, errors.New("lease epoch"))
	}
	ms, m := binary.Varint(v[n:])
	if m <= 0 {
		return persistence.Lease{}, corrupt(key, errors.New("lease expiry"))
	}
	return persistence.Lease{Epoch: epoch, Expires: time.UnixMilli(ms), Owner: string(v[n+m:])}, nil
}

// readLease returns session's lease; false when it never had one.
func (s *Store) readLease(session string) (persistence.Lease, bool, error) {
	key := leaseKey(session)
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebbledb.ErrNotFound) {
		return persistence.Lease{}, false, nil
	}
	if err != nil {
		return persistence.Lease{}, false, fmt.Errorf("persistence/pebble: read %s: %w", describeKey(key), err)
	}
	defer closer.Close()
	l, err := decodeLease(key, v)
	return l, err == nil, err
}

// checkEpoch refuses a fenced append of session unless its lease is at
// epoch; the caller holds the session's append lock.
func (s *Store) checkEpoch(session string, epoch uint64) error {
	l, found, err := s.readLease(session)
	if err != nil {
		return err
	}
	if !found || l.Epoch != epoch {
		return fmt.Errorf("%w: session %q is at lease epoch %d (owner %q), the append's is %d", persistence.ErrLeaseLost, session, l.Epoch, l.Owner, epoch)
	}
	return nil
}

// withLease runs f under session's append lock, with its lease, and
// writes the lease f returns (synced) unless f returns nil.
func (s *Store) withLease(ctx context.Context, session string, f func(cur persistence.Lease, found bool, now time.Time) (*persistence.Lease, error)) (persistence.Lease, error) {
	if err := ctx.Err(); err != nil {
		return persistence.Lease{}, err
	}
	if err := s.enter(); err != nil {
		return persistence.Lease{}, err
	}
	defer s.leave()
	st := s.sessions.acquire(session)
	st.appendMu.Lock()
	defer func() {
		st.appendMu.Unlock()
		s.sessions.release(session, st)
	}()
	cur, found, err := s.readLease(session)
	if err != nil {
		return persistence.Lease{}, err
	}
	next, err := f(cur, found, s.now())
	if err != nil || next == nil {
		return cur, err
	}
	b := s.db.NewBatch()
	if err := b.Set(leaseKey(session), encodeLease(*next), nil); err != nil {
		_ = b.Close()
		return persistence.Lease{}, fmt.Errorf("persistence/pebble: batch: %w", err)
	}
	if err := s.commit(b); err != nil {
		return persistence.Lease{}, err
	}
	return *next, nil
}

// AcquireLease implements persistence.Leaser.
func (s *Store) AcquireLease(ctx context.Context, session, owner string, ttl time.Duration) (persistence.Lease, error) {
	if err := persistence.CheckLeaseArgs(session, owner, ttl); err != nil {
		return persistence.Lease{}, err
	}
	return s.withLease(ctx, session, func(cur persistence.Lease, found bool, now time.Time) (*persistence.Lease, error) {
		if found && cur.Owner != owner && now.Before(cur.Expires) {
			return nil, &persistence.LeaseHeldError{Session: session, Lease: cur}
		}
		return &persistence.Lease{Owner: owner, Epoch: cur.Epoch + 1, Expires: now.Add(ttl)}, nil
	})
}

// RenewLease implements persistence.Leaser.
func (s *Store) RenewLease(ctx context.Context, session, owner string, epoch uint64, ttl time.Duration) (persistence.Lease, error) {
	if err := persistence.CheckLeaseArgs(session, owner, ttl); err != nil {
		return persistence.Lease{}, err
	}
	return s.withLease(ctx, session, func(cur persistence.Lease, found bool, now time.Time) (*persistence.Lease, error) {
		if !found || cur.Epoch != epoch || cur.Owner != owner {
			return nil, fmt.Errorf("%w: session %q is at lease epoch %d (owner %q), the renewal's is %d (owner %q)", persistence.ErrLeaseLost, session, cur.Epoch, cur.Owner, epoch, owner)
		}
		return &persistence.Lease{Owner: owner, Epoch: epoch, Expires: now.Add(ttl)}, nil
	})
}

// ReleaseLease implements persistence.Leaser.
func (s *Store) ReleaseLease(ctx context.Context, session, owner string, epoch uint64) error {
	if err := persistence.CheckLeaseArgs(session, owner, time.Nanosecond); err != nil {
		return err
	}
	_, err := s.withLease(ctx, session, func(cur persistence.Lease, found bool, now time.Time) (*persistence.Lease, error) {
		if !found || cur.Epoch != epoch || cur.Owner != owner {
			return nil, nil
		}
		return &persistence.Lease{Owner: owner, Epoch: epoch, Expires: now}, nil
	})
	return err
}

// ReadLease implements persistence.Leaser.
func (s *Store) ReadLease(ctx context.Context, session string) (persistence.Lease, bool, error) {
	if err := persistence.CheckSession(session); err != nil {
		return persistence.Lease{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return persistence.Lease{}, false, err
	}
	if err := s.enter(); err != nil {
		return persistence.Lease{}, false, err
	}
	defer s.leave()
	return s.readLease(session)
}
