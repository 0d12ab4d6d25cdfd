// A session's state from the store (replay: its latest snapshot, then the
// log after it) and the snapshots the session actor saves.

package actors

import (
	"context"
	"fmt"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// replay folds session's log with c, from the latest snapshot under c's
// reducer name when it ends at or before upTo, through index upTo (0: to
// the end of the log). A snapshot that cannot be read or decoded is
// reported to warn and the log is folded from its start instead
// (R-CONTRACT-11).
func replay(ctx context.Context, store persistence.Store, c *protocol.Contract, session string, upTo uint64, warn func(msg string, err error)) (*protocol.SessionState, uint64, error) {
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
	store, logger := s.store, s.rt.opts.Logger
	go func() {
		if err := store.SaveSnapshot(context.Background(), snap); err != nil {
			logger.Warn("snapshot not saved", "session", snap.Session, "err", err)
		}
	}()
}
