package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/a2-runtime/a2/harness/internal/provider"
)

// APIError is an error the provider reported: an HTTP error status, or an
// error event in the stream (StatusCode 0). Code and Type are both
// Anthropic's error.type (such as "overloaded_error"): its errors have a
// type only. RequestID is the request-id header or body field. 529
// (overloaded) is retryable like every 5xx.
type APIError = provider.APIError

// ErrStreamClosed is returned by Next after Close.
var ErrStreamClosed = errors.New("anthropic: stream closed")

// ErrUnsupportedContent is returned by Stream for a prompt part the
// messages API cannot carry (a file that is not an image, a PDF or text).
var ErrUnsupportedContent = errors.New("anthropic: unsupported prompt content")

// errorBody is the documented error shape: {"type": "error", "error":
// {"type", "message"}, "request_id"}.
type errorBody struct {
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	RequestID string `json:"request_id"`
}

func retryableType(t string) bool {
	switch t {
	case "overloaded_error", "api_error", "rate_limit_error", "timeout_error":
		return true
	}
	return false
}

// statusError builds the APIError of a non-2xx response.
func statusError(resp *http.Response, body []byte) *APIError {
	e := &APIError{Provider: "anthropic",
		StatusCode: resp.StatusCode,
		RequestID:  resp.Header.Get("request-id"),
		RetryAfter: provider.RetryAfter(resp.Header.Get("retry-after")),
		Retryable:  provider.RetryableStatus(resp.StatusCode),
	}
	var eb errorBody
	if json.Unmarshal(body, &eb) == nil && (eb.Error.Type != "" || eb.Error.Message != "") {
		e.Code, e.Type, e.Message = eb.Error.Type, eb.Error.Type, eb.Error.Message
		if e.RequestID == "" {
			e.RequestID = eb.RequestID
		}
		return e
	}
	e.Message = provider.Truncate(strings.TrimSpace(string(body)), 512)
	return e
}

// streamError builds the APIError of an error event.
func streamError(data []byte) *APIError {
	var eb errorBody
	if err := json.Unmarshal(data, &eb); err != nil || (eb.Error.Type == "" && eb.Error.Message == "") {
		return &APIError{Provider: "anthropic", Message: fmt.Sprintf("malformed error event: %s", provider.Truncate(string(data), 512))}
	}
	return &APIError{Provider: "anthropic", Code: eb.Error.Type, Type: eb.Error.Type, Message: eb.Error.Message, RequestID: eb.RequestID,
		Retryable: retryableType(eb.Error.Type)}
}
