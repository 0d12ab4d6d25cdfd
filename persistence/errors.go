package persistence

import "errors"

// Sentinel errors. Implementations wrap them with %w and add the details
// (session, index, event ID, storage key); callers test with errors.Is.
var (
	// ErrIndexConflict: the expected index given to Append is not the
	// session's last index. Another writer got there first, or the caller is a
	// stale owner being fenced off. Nothing was written.
	ErrIndexConflict = errors.New("persistence: index conflict")

	// ErrPartialDuplicateBatch: the batch reuses a stored event ID with a
	// different type, payload or session, or mixes stored IDs with new ones
	// (R-LOG-10, OQ-36). Nothing was written. Its text carries the protocol
	// error code PARTIAL_DUPLICATE_BATCH.
	ErrPartialDuplicateBatch = errors.New("persistence: PARTIAL_DUPLICATE_BATCH")

	// ErrClosed: the store was closed.
	ErrClosed = errors.New("persistence: store closed")

	// ErrCorrupt: a stored record cannot be decoded or contradicts its key.
	// The wrapping error names the key.
	ErrCorrupt = errors.New("persistence: corrupt record")

	// ErrInvalid: a bad argument (empty session, empty event ID, an event
	// Session naming another session, an ID used twice in one batch, an empty
	// batch, a negative limit). Nothing was written.
	ErrInvalid = errors.New("persistence: invalid argument")

	// ErrFailed: the underlying storage failed during a write, so the outcome
	// of that write is unknown (it may or may not be durable). The store
	// refuses every later call with ErrFailed until it is closed and opened
	// again, so that nothing that might not be durable is ever served.
	ErrFailed = errors.New("persistence: store failed")
)
