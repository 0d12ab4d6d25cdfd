package persistence

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/a2-runtime/a2/protocol"
)

// PrepareBatch checks the arguments of Append and returns a copy of events
// with Session set to session and Index and Time cleared, ready for the
// store to assign them. It fails with ErrInvalid on an empty session, an
// empty batch, an empty event ID, an event whose Session names another
// session, an ID used twice in the batch, or a session, ID, type or cause
// that is not valid UTF-8 (the envelope's strings are protobuf strings on
// disk and JSON strings on the wire). It does no I/O.
func PrepareBatch(session string, events []protocol.Event) ([]protocol.Event, error) {
	if err := CheckSession(session); err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, fmt.Errorf("%w: empty batch for session %q", ErrInvalid, session)
	}
	out := make([]protocol.Event, len(events))
	seen := make(map[string]struct{}, len(events))
	for i, e := range events {
		switch {
		case e.ID == "":
			return nil, fmt.Errorf("%w: event %d of the batch has an empty ID", ErrInvalid, i)
		case e.Session != "" && e.Session != session:
			return nil, fmt.Errorf("%w: event %q names session %q, appended to %q", ErrInvalid, e.ID, e.Session, session)
		case !utf8.ValidString(e.ID), !utf8.ValidString(e.Type), !utf8.ValidString(e.Cause):
			return nil, fmt.Errorf("%w: event %q: ID, type and cause must be valid UTF-8", ErrInvalid, e.ID)
		}
		if _, dup := seen[e.ID]; dup {
			return nil, fmt.Errorf("%w: event ID %q appears twice in one batch", ErrInvalid, e.ID)
		}
		seen[e.ID] = struct{}{}
		e.Session, e.Index, e.Time = session, 0, 0
		out[i] = e
	}
	return out, nil
}

// CheckSession fails with ErrInvalid when session is empty or not valid
// UTF-8.
func CheckSession(session string) error {
	if session == "" {
		return fmt.Errorf("%w: empty session ID", ErrInvalid)
	}
	if !utf8.ValidString(session) {
		return fmt.Errorf("%w: session ID %q is not valid UTF-8", ErrInvalid, session)
	}
	return nil
}

// CheckLimit fails with ErrInvalid when limit is negative.
func CheckLimit(limit int) error {
	if limit < 0 {
		return fmt.Errorf("%w: negative limit %d", ErrInvalid, limit)
	}
	return nil
}

// CheckSnapshot checks the session and reducer names of SaveSnapshot and
// LoadSnapshot, then ctx: ErrInvalid for a bad session ID, or an empty
// reducer name or one that is not valid UTF-8; ctx's error once it is done.
func CheckSnapshot(ctx context.Context, session, reducer string) error {
	if err := CheckSession(session); err != nil {
		return err
	}
	if reducer == "" {
		return fmt.Errorf("%w: empty reducer name", ErrInvalid)
	}
	if err := CheckSession(reducer); err != nil {
		return fmt.Errorf("%w: reducer name %q is not valid UTF-8", ErrInvalid, reducer)
	}
	return ctx.Err()
}

// CheckRead checks a Read's arguments, then ctx: ErrInvalid for a bad
// session ID or a negative limit, ctx's error once it is done.
func CheckRead(ctx context.Context, session string, limit int) error {
	if err := CheckSession(session); err != nil {
		return err
	}
	if err := CheckLimit(limit); err != nil {
		return err
	}
	return ctx.Err()
}

// Resubmission decides what Append does with a prepared batch (see
// PrepareBatch) given what the store already holds under its IDs: stored[i]
// is the stored event whose ID is batch[i].ID, or nil when that ID is new.
// A store calls it before checking the expected index (OQ-36):
//   - no ID stored: (nil, nil), append the batch;
//   - every ID stored and every event identical to its stored one
//     (protocol.SameContent: same ID, type, session and canonical payload):
//     (the stored events, nil), write nothing and return them (R-LOG-09);
//   - anything else: an error wrapping ErrPartialDuplicateBatch that names
//     the first offending event (R-LOG-10).
func Resubmission(batch []protocol.Event, stored []*protocol.Event) ([]protocol.Event, error) {
	if len(stored) != len(batch) {
		return nil, fmt.Errorf("persistence: Resubmission: %d stored entries for a batch of %d", len(stored), len(batch))
	}
	var found, fresh int
	firstNew := -1
	for i, s := range stored {
		if s == nil {
			fresh++
			if firstNew < 0 {
				firstNew = i
			}
			continue
		}
		found++
		e := batch[i]
		switch {
		case s.Session != e.Session:
			return nil, fmt.Errorf("%w: event %q is stored in session %q, resubmitted to session %q",
				ErrPartialDuplicateBatch, e.ID, s.Session, e.Session)
		case s.Type != e.Type:
			return nil, fmt.Errorf("%w: event %q is stored with type %q, resubmitted with type %q",
				ErrPartialDuplicateBatch, e.ID, s.Type, e.Type)
		case !protocol.SameContent(*s, e):
			return nil, fmt.Errorf("%w: event %q is stored (session %q, index %d) with a different payload",
				ErrPartialDuplicateBatch, e.ID, s.Session, s.Index)
		}
	}
	switch {
	case found == 0:
		return nil, nil
	case fresh > 0:
		return nil, fmt.Errorf("%w: batch mixes %d stored events with %d new ones (first new: %q)",
			ErrPartialDuplicateBatch, found, fresh, batch[firstNew].ID)
	}
	out := make([]protocol.Event, len(stored))
	for i, s := range stored {
		out[i] = *s
	}
	return out, nil
}
