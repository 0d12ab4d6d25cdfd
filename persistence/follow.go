package persistence

import (
	"context"

	"github.com/a2-runtime/a2/protocol"
)

// Tail follows one session's log from a given index: each Next returns the
// next durable events, in index order, with no gap and no duplicate,
// waiting for them when there are none yet. A Tail is for one goroutine.
type Tail interface {
	// Next returns at least one event after the last one returned (or
	// after the index the Tail started from). It returns ctx's error when
	// ctx ends first, and ErrClosed or ErrFailed when the store closes or
	// fails. After an error, Next may be called again to go on.
	Next(ctx context.Context) ([]protocol.Event, error)
	// Close releases the Tail. Closing twice is harmless.
	Close()
}

// Follower is implemented by stores that hand newly durable events to the
// tails following a session, rather than have every follower read the log
// again after each Wait. The events a Tail returns must not be modified:
// their payloads may be shared with other followers.
type Follower interface {
	Follow(session string, after uint64) (Tail, error)
}

// FollowPage is the most events one Next returns when it reads them from
// the log.
const FollowPage = 512

// Follow returns a Tail of session's events after the index after: the
// store's own when it is a Follower, else one that reads the log and waits
// (Read, then Wait when caught up).
func Follow(s Store, session string, after uint64) (Tail, error) {
	if f, ok := s.(Follower); ok {
		return f.Follow(session, after)
	}
	if err := CheckSession(session); err != nil {
		return nil, err
	}
	return &readTail{s: s, session: session, after: after}, nil
}

type readTail struct {
	s       Store
	session string
	after   uint64
}

func (t *readTail) Next(ctx context.Context) ([]protocol.Event, error) {
	for {
		evs, err := t.s.Read(ctx, t.session, t.after, FollowPage)
		if err != nil {
			return nil, err
		}
		if len(evs) > 0 {
			t.after = evs[len(evs)-1].Index
			return evs, nil
		}
		if _, err := t.s.Wait(ctx, t.session, t.after); err != nil {
			return nil, err
		}
	}
}

func (t *readTail) Close() {}
