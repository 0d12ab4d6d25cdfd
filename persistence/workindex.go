package persistence

import (
	"context"

	"github.com/a2-runtime/a2/protocol"
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
	// The store's appends take AppendOptions.Work: AppendWith sets (Work
	// true) or clears (Work false) the session's index entry in the same
	// atomic write as the batch. An identical resubmission replays as
	// Append does and changes nothing.
	OptionsAppender
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

// AppendOptions are what an append may carry beyond Append's arguments.
type AppendOptions struct {
	// Work, when set, marks whether the session has work once the batch is
	// folded, in the store's work index (WorkIndexer), in the same atomic
	// write as the batch.
	Work *bool
	// Epoch, when not 0, fences the append by the session's lease
	// (Leaser): it is refused with ErrLeaseLost, and nothing is written,
	// unless the session's lease is at this epoch. An identical
	// resubmission still replays.
	Epoch uint64
}

// OptionsAppender is implemented by a store whose appends take
// AppendOptions.
type OptionsAppender interface {
	// AppendWith is Append with opts.
	AppendWith(ctx context.Context, session string, expected uint64, events []protocol.Event, opts AppendOptions) ([]protocol.Event, error)
	// AppendWithAsync is AppendWith as AsyncAppender.AppendAsync is Append.
	AppendWithAsync(ctx context.Context, session string, expected uint64, events []protocol.Event, opts AppendOptions, done func([]protocol.Event, error))
}

// AppendWithAsync appends with store's AppendWithAsync when it takes
// AppendOptions; else with AppendAsync, without the options (a store
// without a work index has no mark to write, and one without leases is
// given no epoch: the caller fences by the expected index only).
func AppendWithAsync(ctx context.Context, store Store, session string, expected uint64, events []protocol.Event, opts AppendOptions, done func([]protocol.Event, error)) {
	if w, ok := store.(OptionsAppender); ok {
		w.AppendWithAsync(ctx, session, expected, events, opts, done)
		return
	}
	AppendAsync(ctx, store, session, expected, events, done)
}

// AppendWith appends with store's AppendWith when it takes AppendOptions;
// else with Append, without the options.
func AppendWith(ctx context.Context, store Store, session string, expected uint64, events []protocol.Event, opts AppendOptions) ([]protocol.Event, error) {
	if w, ok := store.(OptionsAppender); ok {
		return w.AppendWith(ctx, session, expected, events, opts)
	}
	return store.Append(ctx, session, expected, events)
}

// Preceding is an append to another log that must be durable no later than
// the batch it precedes: a session's ownership claim before the session's
// first batch (actors, owner.go).
type Preceding struct {
	Session  string
	Expected uint64
	Events   []protocol.Event
	// Check turns the preceding append's result, when it ends without
	// writing (an identical resubmission, a conflict), into the batch's
	// fate: nil lets the batch be written, an error is the batch's error
	// and nothing of the batch is written. It runs on the caller's
	// goroutine and may read the store.
	Check func(stored []protocol.Event, err error) error
}

// PrecedingAppender is implemented by a store that writes a batch and the
// append that must precede it in one atomic, synced write.
type PrecedingAppender interface {
	// AppendPrecededAsync is AppendWithAsync of the batch after pre: both in
	// one write when both are new; pre alone when the batch ends before its
	// commit (done then gets the batch's result); the batch alone when pre
	// ends without writing and pre.Check lets it.
	AppendPrecededAsync(ctx context.Context, pre Preceding, session string, expected uint64, events []protocol.Event, opts AppendOptions, done func([]protocol.Event, error))
}

// AppendPrecededAsync appends pre, then the batch, with store's
// AppendPrecededAsync when it has one (one synced write for both); else
// one after the other on a goroutine of its own: pre's Append, pre.Check,
// then AppendWith.
func AppendPrecededAsync(ctx context.Context, store Store, pre Preceding, session string, expected uint64, events []protocol.Event, opts AppendOptions, done func([]protocol.Event, error)) {
	if a, ok := store.(PrecedingAppender); ok {
		a.AppendPrecededAsync(ctx, pre, session, expected, events, opts, done)
		return
	}
	go func() {
		if err := pre.Check(store.Append(ctx, pre.Session, pre.Expected, pre.Events)); err != nil {
			done(nil, err)
			return
		}
		done(AppendWith(ctx, store, session, expected, events, opts))
	}()
}
