package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// APIError is an error the provider reported: an HTTP error status, or an
// error event in the stream (StatusCode 0).
type APIError struct {
	// StatusCode is the HTTP status, or 0 for an error event mid-stream.
	StatusCode int
	// Code is the provider's error code: Anthropic's error.type, such as
	// "rate_limit_error" or "overloaded_error".
	Code string
	// Type is the same as Code: Anthropic errors have a type only. It is
	// kept so the error reads like the other providers'.
	Type string
	// Message is the provider's error message, or the start of the body
	// when it was not the documented JSON error object.
	Message string
	// RequestID is the request-id response header or body field.
	RequestID string
	// RetryAfter is the Retry-After response header, when sent.
	RetryAfter time.Duration
	// Retryable reports whether the same request may succeed later: 408,
	// 409, 429 and 5xx statuses (529 overloaded among them), and stream
	// errors of type overloaded_error, api_error or rate_limit_error.
	Retryable bool
}

// Error implements error.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("anthropic: ")
	if e.StatusCode != 0 {
		b.WriteString(strconv.Itoa(e.StatusCode))
		if t := http.StatusText(e.StatusCode); t != "" {
			b.WriteString(" " + t)
		}
	} else {
		b.WriteString("stream error")
	}
	if e.Code != "" {
		b.WriteString(": ")
		b.WriteString(e.Code)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

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

func retryableStatus(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
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
	e := &APIError{
		StatusCode: resp.StatusCode,
		RequestID:  resp.Header.Get("request-id"),
		RetryAfter: retryAfter(resp.Header.Get("retry-after")),
		Retryable:  retryableStatus(resp.StatusCode),
	}
	var eb errorBody
	if json.Unmarshal(body, &eb) == nil && (eb.Error.Type != "" || eb.Error.Message != "") {
		e.Code, e.Type, e.Message = eb.Error.Type, eb.Error.Type, eb.Error.Message
		if e.RequestID == "" {
			e.RequestID = eb.RequestID
		}
		return e
	}
	e.Message = truncate(strings.TrimSpace(string(body)), 512)
	return e
}

// streamError builds the APIError of an error event.
func streamError(data []byte) *APIError {
	var eb errorBody
	if err := json.Unmarshal(data, &eb); err != nil || (eb.Error.Type == "" && eb.Error.Message == "") {
		return &APIError{Message: fmt.Sprintf("malformed error event: %s", truncate(string(data), 512))}
	}
	return &APIError{Code: eb.Error.Type, Type: eb.Error.Type, Message: eb.Error.Message, RequestID: eb.RequestID,
		Retryable: retryableType(eb.Error.Type)}
}

// retryAfter parses a Retry-After header: delay seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
