package postgres

import (
	"crypto/rand"
	"encoding/hex"
	"strings"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// Live tails (persistence.Follower). A batch this store appended is handed
// to the session's tails in this process as soon as its group commits
// (published), so a live subscriber never reads back what it was woken
// for; a notification of another process's append marks the session's
// tails lagged, and they read the log from where they are.

var _ persistence.Follower = (*Store)(nil)

// Follow implements persistence.Follower.
func (s *Store) Follow(session string, after uint64) (persistence.Tail, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	return s.follow.Follow(session, after)
}

// published tells this process's waiters and tails of an append it made
// durable.
func (s *Store) published(session string, batch []protocol.Event) {
	s.wake(session, false)
	s.follow.Offer(session, batch)
}

// notified parses a notification's payload, "<last index> <hex session>
// <tag>", and returns the session when another store wrote it (this
// store's own appends were published already).
func (s *Store) notified(payload string) (string, bool) {
	_, rest, ok := strings.Cut(payload, " ")
	if !ok {
		return "", false
	}
	hexSession, tag, _ := strings.Cut(rest, " ")
	if tag == s.tag {
		return "", false
	}
	session, err := hex.DecodeString(hexSession)
	if err != nil {
		return "", false
	}
	return string(session), true
}

// newTag names a store in its notifications.
func newTag() string {
	var b [9]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
