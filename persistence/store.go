// Package persistence defines Store, the durable home of session logs, and
// the rules every implementation keeps.
//
// A session's log is the only truth of the system: everything a session is
// follows from folding its events, so a store must never lose an
// acknowledged event, never show half a batch, and say exactly what it could
// not do. The contract is written on the Store interface below; the
// conformance suite in package storetest checks it, and every implementation
// (persistence/pebble, persistence/postgres) runs that suite.
//
// This package holds the contract and the parts of it that do no I/O
// (argument checks and duplicate classification, see PrepareBatch and
// Resubmission), so that every implementation applies the same rules.
package persistence

import (
	"context"

	"github.com/a2-runtime/a2/protocol"
)

// Store is a durable, append-only set of session logs plus reducer
// snapshots. All methods are safe for concurrent use.
//
// Ordering and visibility: an event is visible to Read, Lookup, LastIndex,
// Wait and Sessions only once the Append that wrote it has made it durable;
// a reader never sees an event that a crash could take back, and never sees
// part of a batch. Within a session, indexes start at 1 and are contiguous.
//
// Errors: every failure is reported, never logged and swallowed. Callers
// tell the kinds apart with errors.Is against the sentinels in errors.go
// (ErrInvalid, ErrIndexConflict, ErrPartialDuplicateBatch, ErrClosed,
// ErrCorrupt, ErrFailed) or against the context's error.
type Store interface {
	// Append writes events at consecutive indexes after expected, the index
	// of the session's last event (0 for an empty log), and returns them with
	// Session, Index and Time assigned. The caller's slice is not modified;
	// Index and Time given by the caller are ignored. Cause is kept.
	//
	// Either the whole batch is durable (synced to stable storage) before
	// Append returns it, or nothing is written and the error says why:
	//   - ErrInvalid: empty session, empty batch, an empty event ID, an event
	//     whose Session names another session, an ID used twice in the batch,
	//     or a string field that is not valid UTF-8.
	//   - ErrPartialDuplicateBatch (R-LOG-10): an event ID already stored
	//     (in any session, R-LOG-01) with a different type, payload or
	//     session, or a batch mixing stored IDs with new ones. Nothing is
	//     written.
	//   - ErrIndexConflict: expected is not the session's last index; another
	//     writer got there first. This is the fence against a stale owner.
	//   - ErrClosed, ErrFailed, or the context's error.
	//
	// Duplicate detection runs before the index check (R-LOG-09, OQ-36): a
	// batch whose events are all identical resubmissions (protocol.SameContent
	// with Session set to session) returns the stored events, with their
	// original indexes and times, and writes nothing, whatever expected is.
	//
	// ErrFailed means the storage failed during the write: the batch may or
	// may not be durable. Reopen the store and resubmit the same batch; an
	// identical resubmission replays if it landed and appends if it did not.
	//
	// opts carry what an append may need beyond its batch (append.go): the
	// session's work mark (WithWork), its lease's fence (WithEpoch), an
	// append to another log that must be durable no later than the batch
	// (Preceded), and an answer without waiting (Async).
	Append(ctx context.Context, session string, expected uint64, events []protocol.Event, opts ...AppendOption) ([]protocol.Event, error)

	// Lookup returns the stored events among ids, from any session, in the
	// order of ids, skipping IDs that are not stored (an ID listed twice is
	// returned twice).
	Lookup(ctx context.Context, ids []string) ([]protocol.Event, error)

	// Read returns up to limit events of session with index > after, in
	// index order, with no gap. A limit of 0 returns none; a negative limit
	// is ErrInvalid. An unknown session or an after at or past the end gives
	// an empty result, not an error.
	Read(ctx context.Context, session string, after uint64, limit int) ([]protocol.Event, error)

	// LastIndex returns the index of the session's last durable event, 0 when
	// the session has none.
	LastIndex(ctx context.Context, session string) (uint64, error)

	// Wait blocks until the session's last index is greater than after and
	// returns it, or until ctx ends (returns ctx.Err()) or the store is closed
	// (ErrClosed). An index appended between a caller's Read and its Wait is
	// never missed: Wait compares against after, not against the moment it
	// was called, so Wait-then-Read loops see every event exactly once.
	Wait(ctx context.Context, session string, after uint64) (uint64, error)

	// Sessions lists the IDs of sessions that have at least one event, in
	// ascending byte order, starting strictly after after ("" for the start),
	// at most limit of them. A limit of 0 returns none; negative is
	// ErrInvalid.
	Sessions(ctx context.Context, after string, limit int) ([]string, error)

	// SaveSnapshot durably stores s under (s.Session, s.Reducer, s.Index),
	// replacing a snapshot saved at the same key. The store keeps the latest
	// few snapshots per session and reducer (an implementation option) and
	// may delete older ones. Empty Session or Reducer is ErrInvalid. The store
	// does not interpret State and does not check Index against the log.
	SaveSnapshot(ctx context.Context, s Snapshot) error

	// LoadSnapshot returns the snapshot of session with the highest index
	// saved under reducer; found is false when there is none. A snapshot
	// saved under another reducer name is ignored, never an error
	// (R-CONTRACT-10: the reducer name is the snapshot identity). An
	// unreadable snapshot is ErrCorrupt; callers rebuild from the log.
	LoadSnapshot(ctx context.Context, session, reducer string) (s Snapshot, found bool, err error)

	// Close waits for calls in progress, releases the store and makes every
	// later call return ErrClosed (a blocked Wait returns ErrClosed at once).
	// Closing a closed store returns nil.
	Close() error
}

// Snapshot is a reducer's state folded up to and including Index of a
// session's log. State is opaque to the store and kept byte for byte.
type Snapshot struct {
	Session string
	// Reducer names the fold that produced State, for example
	// "a2.ai.state.v27"; it is the snapshot's identity (R-CONTRACT-10).
	Reducer string
	Index   uint64
	State   []byte
}
