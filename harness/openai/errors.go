package openai

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/a2-runtime/a2/harness/internal/provider"
)

// APIError is an error the provider reported: an HTTP error status, or an
// error object in the stream (StatusCode 0). Code is error.code, else
// error.type (such as "rate_limit_exceeded"); Type is error.type (such as
// "invalid_request_error"); RequestID is the x-request-id header.
type APIError = provider.APIError

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

// statusError builds the APIError of a non-2xx response from its body
// ({"error": {...}}, or a bare error object, or anything else).
func statusError(resp *http.Response, body []byte) *APIError {
	e := &APIError{Provider: "openai",
		StatusCode: resp.StatusCode,
		RequestID:  resp.Header.Get("x-request-id"),
		RetryAfter: provider.RetryAfter(resp.Header.Get("retry-after")),
		Retryable:  provider.RetryableStatus(resp.StatusCode),
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
		obj = errorObject{Message: provider.Truncate(strings.TrimSpace(string(body)), 512)}
	}
	e.Code, e.Type, e.Message = obj.code(), obj.Type, obj.Message
	return e
}

// streamError builds the APIError of an error object sent in the stream.
func streamError(raw json.RawMessage) *APIError {
	var obj errorObject
	if json.Unmarshal(raw, &obj) != nil {
		if json.Unmarshal(raw, &obj.Message) != nil {
			obj.Message = provider.Truncate(string(raw), 512)
		}
	}
	e := &APIError{Provider: "openai", Code: obj.code(), Type: obj.Type, Message: obj.Message}
	e.Retryable = retryableCode(e.Code) || retryableCode(e.Type)
	return e
}
