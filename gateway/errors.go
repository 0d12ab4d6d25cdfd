package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/protocol"
)

// Error codes of the JSON error body {"error":{"code","message","field"}}.
// docs/http.md lists them with their statuses.
const (
	CodeInvalid          = "INVALID"
	CodeUnauthorized     = "UNAUTHORIZED"
	CodeForbidden        = "FORBIDDEN"
	CodeNotFound         = "NOT_FOUND"
	CodeMethodNotAllowed = "METHOD_NOT_ALLOWED"
	CodePartialDuplicate = "PARTIAL_DUPLICATE_BATCH"
	CodeTooLarge         = "TOO_LARGE"
	CodeUnsupportedMedia = "UNSUPPORTED_MEDIA_TYPE"
	CodeUnavailable      = "UNAVAILABLE"
	CodeSessionOwned     = "SESSION_OWNED"
	CodeInternal         = "INTERNAL"
	CodeConflict         = "CONFLICT"
	CodeQuota            = "QUOTA_EXCEEDED"
)

// Error is an error answered to an HTTP client: its status and the JSON
// body {"error":{"code","message","field"}}.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field is the JSON path of the offending field, when there is one
	// (for example "events[0].payload.message.role").
	Field string `json:"field,omitempty"`
	// RetryAfter, when set, is answered as the Retry-After header.
	RetryAfter time.Duration `json:"-"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("gateway: %d %s: %s: %s", e.Status, e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("gateway: %d %s: %s", e.Status, e.Code, e.Message)
}

func errorf(status int, code, field, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

func invalid(field, format string, args ...any) *Error {
	return errorf(http.StatusBadRequest, CodeInvalid, field, format, args...)
}

// errClientGone marks a request whose client went away: nothing is
// answered.
var errClientGone = errors.New("gateway: the client went away")

// classify maps an error of the Router (or of the gateway itself) to the
// error answered. Only errors no client input can cause are internal.
func classify(err error) *Error {
	var ge *Error
	var ve *protocol.ValidationError
	switch {
	case errors.As(err, &ge):
		return ge
	case errors.As(err, &ve):
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Field: ve.Field, Message: ve.Message}
	case errors.Is(err, actors.ErrUnknownAgent):
		return errorf(http.StatusNotFound, CodeNotFound, "agent", "%s", plain(err))
	case errors.Is(err, actors.ErrPartialDuplicateBatch):
		return errorf(http.StatusConflict, CodePartialDuplicate, "events",
			"an event ID is already stored with other content, type or session, or the batch mixes stored and new events; nothing was appended (a new event needs a fresh ID)")
	case errors.Is(err, actors.ErrQuota):
		return errorf(http.StatusRequestEntityTooLarge, CodeQuota, "events", "%s", plain(err))
	case errors.Is(err, actors.ErrSessionOwned):
		return errorf(http.StatusConflict, CodeSessionOwned, "session", "%s; a session ID names one session of the store, which the first agent to write it owns", plain(err))
	case errors.Is(err, actors.ErrUnavailable), errors.Is(err, actors.ErrClosed):
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "", "%s; retry the same request", plain(err))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "", "the request timed out; retry the same request")
	}
	return errorf(http.StatusInternalServerError, CodeInternal, "", "internal error")
}

// writeJSON answers v as JSON with a status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"INTERNAL","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeError answers an error as JSON.
func writeError(w http.ResponseWriter, e *Error) {
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="a2"`)
	}
	switch {
	case e.RetryAfter > 0:
		w.Header().Set("Retry-After", strconv.Itoa(int(max(1, e.RetryAfter/time.Second))))
	case e.Status == http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.Status, struct {
		Error *Error `json:"error"`
	}{e})
}

// plain is an error's message for a person: without the Go package names
// that prefix the messages of A2's packages ("actors: ", "persistence: ").
func plain(err error) string {
	msg := err.Error()
	for _, pkg := range []string{"actors: ", "persistence: ", "protocol: ", "cluster: ", "gateway: "} {
		msg = strings.ReplaceAll(msg, pkg, "")
	}
	return msg
}
