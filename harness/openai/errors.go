package openai

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// APIError is an error the provider reported: an HTTP error status, or an
// error object in the stream (StatusCode 0).
type APIError struct {
	// StatusCode is the HTTP status, or 0 for an error sent mid-stream.
	StatusCode int
	// Code is the provider's error code (error.code, else error.type),
	// such as "rate_limit_exceeded".
	Code string
	// Type is the provider's error type (error.type), such as
	// "invalid_request_error".
	Type string
	// Message is the provider's error message, or the start of the body
	// when it was not the documented JSON error object.
	Message string
	// RequestID is the x-request-id response header, when sent.
	RequestID string
	// RetryAfter is the Retry-After response header, when sent.
	RetryAfter time.Duration
	// Retryable reports whether the same request may succeed later: 408,
	// 409, 429 and 5xx statuses, and stream errors of a server or rate
	// limit kind.
	Retryable bool
}

// Error implements error.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("openai: ")
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
var ErrStreamClosed = errors.New("openai: stream closed")

// ErrUnsupportedContent is returned by Stream for a prompt part the chat
// completions API cannot carry (a file that is not an image or a PDF).
var ErrUnsupportedContent = errors.New("openai: unsupported prompt content")

// errorObject is the documented error object: {"message", "type", "param",
// "code"}. code is a string for OpenAI and a number for some compatible
// servers.
type errorObject struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

func (o *errorObject) code() string {
	if len(o.Code) == 0 || string(o.Code) == "null" {
		return o.Type
	}
	var s string
	if json.Unmarshal(o.Code, &s) == nil {
		if s == "" {
			return o.Type
		}
		return s
	}
	return string(o.Code)
}

// retryableCode reports whether a stream error code names a transient
// condition.
func retryableCode(code string) bool {
	switch code {
	case "server_error", "rate_limit_exceeded", "rate_limit_error", "overloaded", "overloaded_error",
		"service_unavailable", "timeout", "internal_error", "api_error":
		return true
	}
	return false
}

func retryableStatus(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
}

// statusError builds the APIError of a non-2xx response from its body
// ({"error": {...}}, or a bare error object, or anything else).
func statusError(resp *http.Response, body []byte) *APIError {
	e := &APIError{
		StatusCode: resp.StatusCode,
		RequestID:  resp.Header.Get("x-request-id"),
		RetryAfter: retryAfter(resp.Header.Get("retry-after")),
		Retryable:  retryableStatus(resp.StatusCode),
	}
	var wrapped struct {
		Error json.RawMessage `json:"error"`
	}
	var obj errorObject
	switch {
	case json.Unmarshal(body, &wrapped) == nil && len(wrapped.Error) > 0 && json.Unmarshal(wrapped.Error, &obj) == nil:
	case json.Unmarshal(body, &wrapped) == nil && len(wrapped.Error) > 0 && json.Unmarshal(wrapped.Error, &obj.Message) == nil:
	case json.Unmarshal(body, &obj) == nil && obj.Message != "":
	default:
		obj = errorObject{Message: truncate(strings.TrimSpace(string(body)), 512)}
	}
	e.Code, e.Type, e.Message = obj.code(), obj.Type, obj.Message
	return e
}

// streamError builds the APIError of an error object sent in the stream.
func streamError(raw json.RawMessage) *APIError {
	var obj errorObject
	if json.Unmarshal(raw, &obj) != nil {
		if json.Unmarshal(raw, &obj.Message) != nil {
			obj.Message = truncate(string(raw), 512)
		}
	}
	e := &APIError{Code: obj.code(), Type: obj.Type, Message: obj.Message}
	e.Retryable = retryableCode(e.Code) || retryableCode(e.Type)
	return e
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
