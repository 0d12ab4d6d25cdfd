// Package httptool makes a tool of an HTTP endpoint: the model's input
// becomes the request, the response the tool's output. It serves the
// simple case (a URL, a method, headers, an input schema); an agents file
// declares such tools without Go code (docs/agents.md).
package httptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/a2-runtime/a2/tools"
)

// Options describe an HTTP tool.
type Options struct {
	// Name, Description and InputSchema are the tool's (tools.Tool).
	Name        string
	Description string
	InputSchema json.RawMessage
	// URL is the endpoint, http or https.
	URL string
	// Method is the request's method (default POST). GET, HEAD and DELETE
	// send the input's fields as query parameters (a string as it is,
	// any other value as JSON); the others send the input as a JSON body.
	Method string
	// Headers are sent with every request.
	Headers map[string]string
	// Timeout bounds one call (default 30 s); MaxResponseBytes the
	// response's body (default 1 MiB): a larger one fails the call.
	Timeout          time.Duration
	MaxResponseBytes int64
	// Client sends the requests (default: a client of its own).
	Client *http.Client
}

// Defaults of Options.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultMaxResponseBytes = 1 << 20
)

// New makes the tool. Its output is the response's body when it is JSON,
// else the body as a JSON string; a status of 400 or more fails the call
// with the status and the start of the body, which the model sees as the
// tool's error.
func New(o Options) (tools.Tool, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return tools.Tool{}, fmt.Errorf("httptool: the URL %q is not an http or https URL", o.URL)
	}
	method := strings.ToUpper(o.Method)
	if method == "" {
		method = http.MethodPost
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return tools.Tool{}, fmt.Errorf("httptool: the method %q is not one of GET, HEAD, DELETE, POST, PUT, PATCH", o.Method)
	}
	timeout, limit := o.Timeout, o.MaxResponseBytes
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if limit <= 0 {
		limit = DefaultMaxResponseBytes
	}
	client := o.Client
	if client == nil {
		client = &http.Client{}
	}
	headers := make(http.Header, len(o.Headers))
	for k, v := range o.Headers {
		headers.Set(k, v)
	}
	query := method == http.MethodGet || method == http.MethodHead || method == http.MethodDelete
	call := func(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		target := *u
		var body io.Reader
		if query {
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(input, &fields); err != nil {
				return nil, fmt.Errorf("the input is not an object, so it cannot be a query: %w", err)
			}
			q := target.Query()
			for k, v := range fields {
				var s string
				if json.Unmarshal(v, &s) != nil {
					s = string(v)
				}
				q.Set(k, s)
			}
			target.RawQuery = q.Encode()
		} else {
			body = bytes.NewReader(input)
		}
		req, err := http.NewRequestWithContext(ctx, method, target.String(), body)
		if err != nil {
			return nil, err
		}
		req.Header = headers.Clone()
		if !query {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Accept", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // the URL is said once, without its password
			}
			return nil, fmt.Errorf("%s %s: %w", method, u.Redacted(), err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
		if err != nil {
			return nil, fmt.Errorf("%s %s: reading the response: %w", method, u.Redacted(), err)
		}
		if int64(len(b)) > limit {
			return nil, fmt.Errorf("%s %s: the response is larger than %d bytes", method, u.Redacted(), limit)
		}
		if resp.StatusCode >= 400 {
			return nil, fmt.Errorf("%s %s: %s: %s", method, u.Redacted(), resp.Status, snippet(b))
		}
		if len(bytes.TrimSpace(b)) > 0 && json.Valid(b) {
			return json.RawMessage(b), nil
		}
		return json.Marshal(string(b))
	}
	return tools.Tool{Name: o.Name, Description: o.Description, InputSchema: o.InputSchema, Execute: call}, nil
}

// snippet is the start of a body, on one line.
func snippet(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
