// Package wire holds what crosses a cluster hop between A2's packages:
// events and errors as protobuf (actors/sessionpb), the error codes they
// carry, and the runtime's error sentinels the codes stand for. Package
// actors re-exports the sentinels (actors.ErrMoved is wire.ErrMoved); the
// conversions are the runtime's and the cluster's, not a user's.
package wire

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/a2-runtime/a2/actors/sessionpb"
	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// Errors of the runtime's API (package actors documents each).
var (
	ErrUnknownAgent = errors.New("actors: unknown agent")
	ErrClosed       = errors.New("actors: runtime closed")
	ErrUnavailable  = errors.New("actors: session unavailable")
	ErrMoved        = fmt.Errorf("%w: the session is placed on another member", ErrUnavailable)
	ErrLeaseHeld    = fmt.Errorf("%w: the session is leased to another member", ErrUnavailable)
	ErrNotServing   = fmt.Errorf("%w: this member is not serving sessions", ErrUnavailable)
	ErrSessionOwned = errors.New("actors: the session belongs to another agent")
	ErrQuota        = errors.New("actors: the session is at its size quota")
)

// EventToPB is the wire form of an event.
func EventToPB(ev protocol.Event) *sessionpb.Event {
	return &sessionpb.Event{Id: ev.ID, Type: ev.Type, Payload: ev.Payload, Index: ev.Index, Session: ev.Session, Time: ev.Time, Cause: ev.Cause}
}

// EventFromPB is the event of its wire form.
func EventFromPB(e *sessionpb.Event) protocol.Event {
	return protocol.Event{ID: e.Id, Type: e.Type, Payload: e.Payload, Index: e.Index, Session: e.Session, Time: e.Time, Cause: e.Cause}
}

// EventsFromPB are the events of their wire form.
func EventsFromPB(es []*sessionpb.Event) []protocol.Event {
	out := make([]protocol.Event, len(es))
	for i, e := range es {
		out[i] = EventFromPB(e)
	}
	return out
}

// Error codes carried by sessionpb.Error.
const (
	CodeInvalid          = "INVALID"
	CodePartialDuplicate = "PARTIAL_DUPLICATE_BATCH"
	CodeUnavailable      = "UNAVAILABLE"
	CodeSessionOwned     = "SESSION_OWNED"
	CodeMoved            = "MOVED"
	CodeLeaseHeld        = "LEASE_HELD"
	CodeUnknownAgent     = "UNKNOWN_AGENT"
	CodeClosed           = "CLOSED"
	CodeTimeout          = "TIMEOUT"
	CodeInternal         = "INTERNAL"
	CodeQuota            = "QUOTA_EXCEEDED"
)

// ToPBError is the wire form of an error of the runtime's API (the codes
// above), for a node that answers another.
func ToPBError(err error) *sessionpb.Error {
	if err == nil {
		return nil
	}
	var ve *protocol.ValidationError
	switch {
	case errors.As(err, &ve):
		return &sessionpb.Error{Code: CodeInvalid, Message: ve.Message, Field: ve.Field}
	case errors.Is(err, persistence.ErrPartialDuplicateBatch):
		return &sessionpb.Error{Code: CodePartialDuplicate, Message: err.Error()}
	case errors.Is(err, ErrMoved):
		return &sessionpb.Error{Code: CodeMoved, Message: err.Error()}
	case errors.Is(err, ErrNotServing):
		// A member that stepped down or whose lease lapsed places no
		// session: across a hop, its sessions are elsewhere (retried).
		return &sessionpb.Error{Code: CodeMoved, Message: err.Error()}
	case errors.Is(err, ErrLeaseHeld):
		return &sessionpb.Error{Code: CodeLeaseHeld, Message: err.Error()}
	case errors.Is(err, ErrUnknownAgent):
		return &sessionpb.Error{Code: CodeUnknownAgent, Message: err.Error()}
	case errors.Is(err, ErrClosed):
		return &sessionpb.Error{Code: CodeClosed, Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &sessionpb.Error{Code: CodeTimeout, Message: err.Error()}
	case errors.Is(err, ErrUnavailable):
		return &sessionpb.Error{Code: CodeUnavailable, Message: err.Error()}
	case errors.Is(err, ErrSessionOwned):
		return &sessionpb.Error{Code: CodeSessionOwned, Message: err.Error()}
	case errors.Is(err, ErrQuota):
		return &sessionpb.Error{Code: CodeQuota, Message: err.Error()}
	}
	return &sessionpb.Error{Code: CodeInternal, Message: err.Error()}
}

// FromPBError is the error of the runtime's API that a wire error stands
// for: errors.Is and errors.As see the same sentinels and
// *protocol.ValidationError as on the node that sent it.
func FromPBError(e *sessionpb.Error) error {
	switch e.Code {
	case CodeMoved:
		return ErrMoved
	case CodeLeaseHeld:
		return fmt.Errorf("%w: %s", ErrLeaseHeld, strings.TrimPrefix(e.Message, ErrLeaseHeld.Error()+": "))
	case CodeUnknownAgent:
		return fmt.Errorf("%w%s", ErrUnknownAgent, strings.TrimPrefix(e.Message, ErrUnknownAgent.Error()))
	case CodeClosed:
		return ErrClosed
	case CodeTimeout:
		return fmt.Errorf("%w: %s", context.DeadlineExceeded, e.Message)
	case CodeInvalid:
		return &protocol.ValidationError{Field: e.Field, Message: e.Message}
	case CodePartialDuplicate:
		return fmt.Errorf("%w: %s", persistence.ErrPartialDuplicateBatch, e.Message)
	case CodeUnavailable:
		return fmt.Errorf("%w: %s", ErrUnavailable, strings.TrimPrefix(e.Message, ErrUnavailable.Error()+": "))
	case CodeSessionOwned:
		return fmt.Errorf("%w: %s", ErrSessionOwned, strings.TrimPrefix(e.Message, ErrSessionOwned.Error()+": "))
	case CodeQuota:
		return fmt.Errorf("%w: %s", ErrQuota, strings.TrimPrefix(e.Message, ErrQuota.Error()+": "))
	}
	return errors.New(e.Message)
}

// CodeOf is the wire code of an error of the runtime's API ("" for nil):
// what telemetry records as error.type.
func CodeOf(err error) string {
	if err == nil {
		return ""
	}
	return ToPBError(err).Code
}
