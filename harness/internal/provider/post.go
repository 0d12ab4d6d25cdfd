package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/a2-runtime/a2/harness"
)

// Request is one streaming request to a provider's HTTP API.
type Request struct {
	// Name is the provider, prefixing error messages ("openai").
	Name     string
	Endpoint string
	// Body is encoded as JSON.
	Body any
	// Auth are the provider's authentication headers (Authorization,
	// x-api-key, ...), set before Headers.
	Auth map[string]string
	// Headers are the request's other headers, set last.
	Headers map[string]string
	// StatusError reads the provider's error from a response that is not
	// an event stream: an error status, or JSON in a 200.
	StatusError func(resp *http.Response, body []byte) *APIError
}

// Post sends r with client and returns the body of the event stream the
// provider answered, or the error: ctx's when it ended; a transport error;
// the provider's *APIError for an error status or for JSON instead of an
// event stream (a server that ignored stream: true, or put an error in a
// 200).
func Post(ctx context.Context, client *http.Client, r Request) (io.ReadCloser, error) {
	data, err := json.Marshal(r.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: encoding the request: %w", r.Name, err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, r.Endpoint, bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: building the request: %w", r.Name, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	for k, v := range r.Auth {
		hreq.Header.Set(k, v)
	}
	for k, v := range r.Headers {
		hreq.Header.Set(k, v)
	}
	resp, err := client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%s: sending the request: %w", r.Name, err)
	}
	isJSON := strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json")
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 && !isJSON {
		return resp.Body, nil
	}
	defer resp.Body.Close()
	raw, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if rerr != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	e := r.StatusError(resp, raw)
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 && e.Code == "" && e.Type == "" {
		e.Message = "the server answered with JSON, not an event stream: " + e.Message
	}
	return nil, e
}

// Headers are a provider's configured headers, then the request's, with
// the generation settings' headers applied last (a nil value removes one);
// names are lower-cased.
func Headers(provider, request map[string]string, settings harness.GenerationSettings) map[string]string {
	merged := map[string]string{}
	for k, v := range provider {
		merged[strings.ToLower(k)] = v
	}
	for k, v := range request {
		merged[strings.ToLower(k)] = v
	}
	return harness.RequestHeaders(merged, settings)
}
