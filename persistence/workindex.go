package persistence

import (
	"context"
)

// WorkIndexer is implemented by a store that keeps a durable index of the
// sessions that may have work: a session whose folded state has pending
// work that must resume without a client asking (protocol.Pending: a model
// step, a tool call, an application handler owed an event; a model-metadata
// lookup alone waits for the session's next activation) is in it, one
// whose state has none is not. The runtime marks each append with whether the session
// has work once the batch is folded, and the store writes the mark in the
// same atomic, synced write as the batch (the same Pebble batch, the same
// PostgreSQL transaction), so that after a crash the index says exactly
// what the durable log says. The start-up scan, and a cluster member that
// takes sessions over, read this index instead of every session of the
// store: their cost follows the sessions with work.
//
// An entry for a session with no work is harmless (its activation finds
// nothing to do and clears it); a session with work missing from the index
// would not resume until it is next addressed, which is the case the index
// must never have.
type WorkIndexer interface {
	// The store's appends take WithWork: an append sets (true) or clears
	// (false) the session's index entry in the same atomic write as the
	// batch. An identical resubmission replays and changes nothing.
	// MarkWork sets or clears the session's entry without appending, only
	// if the session's last index is at (ErrIndexConflict otherwise): it is
	// fenced like an append, so a stale writer cannot clear the entry of a
	// session another writer has moved on.
	MarkWork(ctx context.Context, session string, at uint64, work bool) error
	// HasWork reports whether the session is in the index.
	HasWork(ctx context.Context, session string) (bool, error)
	// SessionsWithWork lists the sessions in the index in ascending byte
	// order, strictly after after ("" for the start), at most limit.
	SessionsWithWork(ctx context.Context, after string, limit int) ([]string, error)
	// WorkIndexComplete reports whether the index covers every session of
	// the store: false for a store written before the index existed, until
	// MarkWorkIndexComplete records that a full scan has built it.
	WorkIndexComplete(ctx context.Context) (bool, error)
	// MarkWorkIndexComplete records that every session of the store has
	// its entry (a full scan visited them all).
	MarkWorkIndexComplete(ctx context.Context) error
}
