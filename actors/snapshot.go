// A session's state from the store (replay: its latest snapshot, then the
// log after it) and the snapshots the session actor saves.

package actors

import (
	"context"
	"fmt"
	"strconv"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// replay folds session's log with c, from the latest snapshot under c's
// reducer name when it ends at or before upTo, through index upTo (0: to
// the end of the log). A snapshot that cannot be read or decoded is
// reported to warn and the log is folded from its start instead
// (R-CONTRACT-11).
func replay(ctx context.Context, store persistence.Store, c *protocol.Contract, session string, upTo uint64, warn func(msg string, err error), folded func(protocol.Event)) (*protocol.SessionState, uint64, error) {
	st, at := c.NewState(), uint64(0)
	snap, found, err := store.LoadSnapshot(ctx, session, c.ReducerName())
	switch {
	case err != nil:
		warn("snapshot unreadable; replaying the log", err)
	case found && (upTo == 0 || snap.Index <= upTo):
		if restored, err := c.UnmarshalState(snap.State); err == nil {
			st, at = restored, snap.Index
		} else {
			warn("snapshot does not decode; replaying the log", err)
		}
	}
	const page = 1024
	for upTo == 0 || at < upTo {
		limit := page
		if upTo != 0 {
			limit = int(min(upTo-at, page))
		}
		evs, err := store.Read(ctx, session, at, limit)
		if err != nil {
			return nil, 0, err
		}
		for _, ev := range evs {
			if err := c.Fold(st, ev); err != nil {
				return nil, 0, fmt.Errorf("fold %s at %d: %w", ev.Type, ev.Index, err)
			}
			if folded != nil {
				folded(ev)
			}
			at = ev.Index
		}
		if len(evs) < limit {
			if upTo != 0 && at < upTo {
				return nil, 0, fmt.Errorf("actors: the log of %q ends at %d, before index %d", session, at, upTo)
			}
			break
		}
	}
	return st, at, nil
}

// snapshotDue says whether a session saves a snapshot, after events
// events and bytes bytes of payloads since its last one, whose size was
// last (0: none yet).
func snapshotDue(o Options, events, bytes, last int) bool {
	return (events >= o.SnapshotEvery || bytes >= o.SnapshotBytes) && bytes >= last
}

// maybeSnapshot saves a snapshot every SnapshotEvery events or
// SnapshotBytes bytes, and, once the state is large, only when the
// payloads since the last snapshot add up to at least its size. A snapshot
// marshals the whole state, so a fixed interval would make a long
// session's every event dearer (the state grows with the conversation,
// the events do not); with the interval growing with the state, a
// snapshot costs about a fixed amount per byte of log written, and an
// activation replays at most about one snapshot's worth of log after it
// (docs/storage.md, 2.7).
func (s *sessionActor) maybeSnapshot(stored []protocol.Event) {
	if s.rt.opts.SnapshotEvery < 0 {
		return
	}
	s.sinceSnapshot += len(stored)
	for _, ev := range stored {
		s.sinceSnapshotBytes += len(ev.Payload)
	}
	if !snapshotDue(s.rt.opts, s.sinceSnapshot, s.sinceSnapshotBytes, s.lastSnapshotBytes) {
		return
	}
	b, err := s.state.MarshalJSON()
	if err != nil {
		return
	}
	s.sinceSnapshot, s.sinceSnapshotBytes, s.lastSnapshotBytes = 0, 0, len(b)
	snap := persistence.Snapshot{Session: s.id, Reducer: s.agent.contract.ReducerName(), Index: s.index, State: b}
	// The log's size goes first, and the state only once it is saved: a
	// state snapshot is never newer than the latest saved size, whose
	// count an activation then continues (logSize).
	var snaps []persistence.Snapshot
	if s.rt.opts.MaxSessionBytes > 0 {
		snaps = append(snaps, persistence.Snapshot{Session: s.id, Reducer: logSizeReducer, Index: s.index, State: strconv.AppendInt(nil, s.logBytes, 10)})
	}
	snaps = append(snaps, snap)
	store, logger := s.store, s.rt.opts.Logger
	go func() {
		for _, sn := range snaps {
			if err := store.SaveSnapshot(context.Background(), sn); err != nil {
				logger.Warn("snapshot not saved", "session", sn.Session, "reducer", sn.Reducer, "err", err)
				return
			}
		}
	}()
}

// The log's size (Options.MaxSessionBytes; nothing of it runs without a
// quota). The session actor counts the bytes of every event it writes, and
// saves the count as a snapshot of its own (logSizeReducer) beside each
// state snapshot; an activation starts from the latest count and adds the
// events after it, which it folds anyway. A session whose log was written
// while no quota was set counts from its latest state snapshot on (or from
// its start, without one).

// logSizeReducer names the snapshots of a log's size: not a reducer name a
// contract can take (those do not start with "a2.log").
const logSizeReducer = "a2.log-size"

// eventBytes is what an event adds to its log's size.
func eventBytes(ev protocol.Event) int64 { return int64(ev.Size()) }

// logSize is an activation's count of its log's size.
type logSize struct {
	at    uint64 // the index of the saved count (0: none)
	bytes int64  // the saved count, then with the events after at added
	first uint64 // the first index replay folded (0: none yet)
}

// loadLogSize reads the latest saved count.
func loadLogSize(ctx context.Context, store persistence.Store, session string) (*logSize, error) {
	snap, found, err := store.LoadSnapshot(ctx, session, logSizeReducer)
	if err != nil {
		return nil, err
	}
	l := &logSize{}
	if found {
		n, err := strconv.ParseInt(string(snap.State), 10, 64)
		if err == nil && n >= 0 {
			l.at, l.bytes = snap.Index, n
		}
	}
	return l, nil
}

// count adds an event replay folded, if it is past the saved count.
func (l *logSize) count(ev protocol.Event) {
	if l.first == 0 {
		l.first = ev.Index
	}
	if ev.Index > l.at {
		l.bytes += eventBytes(ev)
	}
}

// total is the log's size once replay is done: the events between the
// saved count and the first one replay folded (a state snapshot later than
// the count) are read and added.
func (l *logSize) total(ctx context.Context, store persistence.Store, session string) (int64, error) {
	if l.at == 0 || l.first == 0 || l.first <= l.at+1 {
		return l.bytes, nil
	}
	for at := l.at; at+1 < l.first; {
		evs, err := store.Read(ctx, session, at, int(min(l.first-1-at, 1024)))
		if err != nil {
			return 0, err
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			l.bytes += eventBytes(ev)
			at = ev.Index
		}
	}
	return l.bytes, nil
}
