// Package provider holds what the HTTP model providers share: the error a
// provider reported, and the parsing of its transport details.
package provider

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// APIError is an error a provider reported: an HTTP error status, or an
// error sent in the stream (StatusCode 0). Each provider package exports it
// under its own name (openai.APIError, anthropic.APIError) and documents
// where Code and Type come from.
type APIError struct {
	// Provider names the provider in the message ("openai", "anthropic").
	Provider string
	// StatusCode is the HTTP status, or 0 for an error sent mid-stream.
	StatusCode int
	// Code is the provider's error code.
	Code string
	// Type is the provider's error type.
	Type string
	// Message is the provider's error message, or the start of the body
	// when it was not the documented JSON error object.
	Message string
	// RequestID is the provider's request ID (header or body), when sent.
	RequestID string
	// RetryAfter is the Retry-After response header, when sent.
	RetryAfter time.Duration
	// Retryable reports whether the same request may succeed later: 408,
	// 409, 429 and 5xx statuses, and stream errors of a transient kind.
	Retryable bool
}

// Error implements error.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString(e.Provider + ": ")
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

// RetryableStatus reports whether an HTTP status names a transient
// condition: 408, 409, 429 and 5xx.
func RetryableStatus(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
}

// RetryAfter parses a Retry-After header: delay seconds or an HTTP date.
func RetryAfter(v string) time.Duration {
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

// Truncate cuts s to at most n bytes (marking a cut with "…"), keeping it
// valid UTF-8.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
