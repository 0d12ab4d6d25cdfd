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

// Session ownership and member leases (persistence.Leaser), in two kinds
// of keys:
//
//   - 'l' session: the session's ownership, uvarint(epoch) followed by the
//     owner's bytes (none once released), for every session ever acquired;
//   - 'n' member: the member's lease, varint(end in Unix ms by the store's
//     clock), for every member that renewed one and did not release it.
//
// Every ownership operation, and the epoch check of a fenced append, runs
// under the session's append lock, so an append at an epoch is never
// interleaved with the acquisition of the next (the acquisition waits for
// the append's commit). A member's lease is one key whatever the number of
// its sessions; an acquisition reads the lease of the session's owner.

var _ persistence.Leaser = (*Store)(nil)

// ownership is what the 'l' key of a session holds.
type ownership struct {
	epoch uint64
	owner string // empty once released
}

func encodeOwnership(o ownership) []byte {
	return append(binary.AppendUvarint(nil, o.epoch), o.owner...)
}

func decodeOwnership(key, v []byte) (ownership, error) {
	epoch, n := binary.Uvarint(v)
	if n <= 0 {
		return ownership{}, corrupt(key, errors.New("ownership epoch"))
	}
	return ownership{epoch: epoch, owner: string(v[n:])}, nil
}

// leaseEndMillis is the Unix ms of now+ttl, rounded up, so that the store
// never ends a lease before the time its member was given.
func leaseEndMillis(now time.Time, ttl time.Duration) int64 {
	end := now.Add(ttl)
	ms := end.UnixMilli()
	if time.UnixMilli(ms).Before(end) {
		ms++
	}
	return ms
}

func decodeMemberLease(key, v []byte) (time.Time, error) {
	ms, n := binary.Varint(v)
	if n <= 0 || n != len(v) {
		return time.Time{}, corrupt(key, errors.New("member lease end"))
	}
	return time.UnixMilli(ms), nil
}

// get reads key; false when it is not stored. The value is a copy.
func (s *Store) get(key []byte) ([]byte, bool, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebbledb.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("persistence/pebble: read %s: %w", describeKey(key), err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), true, nil
}

// readOwnership returns session's ownership; false when it was never
// acquired.
func (s *Store) readOwnership(session string) (ownership, bool, error) {
	key := leaseKey(session)
	v, found, err := s.get(key)
	if err != nil || !found {
		return ownership{}, false, err
	}
	o, err := decodeOwnership(key, v)
	return o, err == nil, err
}

// readMemberLease returns when member's lease ends; false when it holds
// none (never renewed, or released).
func (s *Store) readMemberLease(member string) (time.Time, bool, error) {
	key := memberKey(member)
	v, found, err := s.get(key)
	if err != nil || !found {
		return time.Time{}, false, err
	}
	end, err := decodeMemberLease(key, v)
	return end, err == nil, err
}

// lease is the persistence.Lease of o: its owner's lease end, zero when
// it was released or its owner holds no lease.
func (s *Store) lease(o ownership) (persistence.Lease, error) {
	l := persistence.Lease{Owner: o.owner, Epoch: o.epoch}
	if o.owner == "" {
		return l, nil
	}
	end, found, err := s.readMemberLease(o.owner)
	if err != nil {
		return persistence.Lease{}, err
	}
	if found {
		l.Expires = end
	}
	return l, nil
}

// checkEpoch refuses a fenced append of session unless it is at epoch;
// the caller holds the session's append lock.
func (s *Store) checkEpoch(session string, epoch uint64) error {
	o, found, err := s.readOwnership(session)
	if err != nil {
		return err
	}
	if !found || o.epoch != epoch {
		return fmt.Errorf("%w: session %q is at ownership epoch %d (owner %q), the append's is %d", persistence.ErrLeaseLost, session, o.epoch, o.owner, epoch)
	}
	return nil
}

// write commits b (synced, through the group commit), or closes it on
// the error of building it.
func (s *Store) write(b *pebbledb.Batch, err error) error {
	if err != nil {
		_ = b.Close()
		return fmt.Errorf("persistence/pebble: batch: %w", err)
	}
	return s.commit(b)
}

// withOwnership runs f under session's append lock, with its ownership,
// and writes the ownership f returns (synced) unless it returns nil.
func (s *Store) withOwnership(ctx context.Context, session string, f func(cur ownership, found bool) (*ownership, error)) error {
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
	cur, found, err := s.readOwnership(session)
	if err != nil {
		return err
	}
	next, err := f(cur, found)
	if err != nil || next == nil {
		return err
	}
	b := s.db.NewBatch()
	return s.write(b, b.Set(leaseKey(session), encodeOwnership(*next), nil))
}

// RenewMember implements persistence.Leaser: one synced write of the
// member's key.
func (s *Store) RenewMember(ctx context.Context, member string, ttl time.Duration) error {
	if err := persistence.CheckMember(member); err != nil {
		return err
	}
	if err := persistence.CheckTTL(ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	b := s.db.NewBatch()
	return s.write(b, b.Set(memberKey(member), binary.AppendVarint(nil, leaseEndMillis(s.now(), ttl)), nil))
}

// ReleaseMember implements persistence.Leaser: the member's key is
// deleted, so its sessions' owner holds no lease.
func (s *Store) ReleaseMember(ctx context.Context, member string) error {
	if err := persistence.CheckMember(member); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	b := s.db.NewBatch()
	return s.write(b, b.Delete(memberKey(member), nil))
}

// AcquireLease implements persistence.Leaser.
func (s *Store) AcquireLease(ctx context.Context, session, owner string) (persistence.Lease, error) {
	if err := persistence.CheckLeaseArgs(session, owner); err != nil {
		return persistence.Lease{}, err
	}
	var acquired persistence.Lease
	err := s.withOwnership(ctx, session, func(cur ownership, found bool) (*ownership, error) {
		if found && cur.owner != "" && cur.owner != owner {
			held, err := s.lease(cur)
			if err != nil {
				return nil, err
			}
			if s.now().Before(held.Expires) {
				return nil, &persistence.LeaseHeldError{Session: session, Lease: held}
			}
		}
		next := ownership{epoch: cur.epoch + 1, owner: owner}
		l, err := s.lease(next)
		if err != nil {
			return nil, err
		}
		acquired = l
		return &next, nil
	})
	if err != nil {
		return persistence.Lease{}, err
	}
	return acquired, nil
}

// ReleaseLease implements persistence.Leaser: the owner is cleared and the
// epoch kept.
func (s *Store) ReleaseLease(ctx context.Context, session, owner string, epoch uint64) error {
	if err := persistence.CheckLeaseArgs(session, owner); err != nil {
		return err
	}
	return s.withOwnership(ctx, session, func(cur ownership, found bool) (*ownership, error) {
		if !found || cur.epoch != epoch || cur.owner != owner {
			return nil, nil
		}
		return &ownership{epoch: epoch}, nil
	})
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
	o, found, err := s.readOwnership(session)
	if err != nil || !found {
		return persistence.Lease{}, false, err
	}
	l, err := s.lease(o)
	return l, err == nil, err
}
