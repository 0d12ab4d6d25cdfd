// Package client is the Go client of a node's HTTP API (docs/http.md):
// pushes with stable event IDs across transport retries, state and history
// reads, a live stream that reconnects by itself from the last event it saw,
// and Session, which keeps a session's confirmed state and the optimistic
// view of the commands still in flight, with the actions of a chat UI
// (useAgent's send, steer, stop, approve, deny, respond, retry, pause,
// resume and queue controls).
package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/a2-runtime/a2/protocol"
)

// Options configure a Client. The zero value works against a local node.
type Options struct {
	// HTTPClient sends the requests (default: a client without a timeout;
	// contexts bound requests, and a stream lasts as long as it is read).
	HTTPClient *http.Client
	// Token, when set, is sent as "Authorization: Bearer <Token>" (for an
	// application's Authorize policy, or the admin token with Trusted).
	Token string
	// Trusted pushes through the admin route (trusted server appends);
	// it needs the node's admin token in Token.
	Trusted bool
	// Contract folds the application state of an extended contract beside
	// the AI state (nil: the built-in AI contract).
	Contract *protocol.Contract
	// MaxAttempts bounds the attempts of a push or read that fails with a
	// network error or 503 (default 8). Streams retry until their context
	// ends.
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the wait between attempts and between
	// stream reconnections (defaults 50 ms and 2 s); it doubles from the
	// minimum, with jitter.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// StreamIdleTimeout reconnects a stream that received nothing, not even
	// a heartbeat, for this long (default 45 s: three heartbeats).
	StreamIdleTimeout time.Duration
	// NewID returns fresh caller IDs for events pushed without one and for
	// the messages of actions (default: 26 random base32 characters).
	NewID func() string
}

// Client talks to one agent of a node.
type Client struct {
	base  string
	agent string
	opts  Options
	http  *http.Client
}

// New returns a client of the agent served at baseURL (for example
// "http://127.0.0.1:8080").
func New(baseURL, agent string, opts Options) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: the base URL %q is not an http(s) URL", baseURL)
	}
	if agent == "" {
		return nil, errors.New("client: the agent name is required")
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{}
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 8
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 50 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(2*time.Second, opts.MinBackoff)
	}
	if opts.StreamIdleTimeout <= 0 {
		opts.StreamIdleTimeout = 45 * time.Second
	}
	if opts.NewID == nil {
		opts.NewID = crand.Text
	}
	return &Client{base: u.String(), agent: agent, opts: opts, http: opts.HTTPClient}, nil
}

// Agent is the client's agent.
func (c *Client) Agent() string { return c.agent }

// NewID returns a fresh caller ID.
func (c *Client) NewID() string { return c.opts.NewID() }

// Error is an error answered by the node: its status and the JSON error
// body. Compare with errors.Is against ErrPartialDuplicateBatch,
// ErrUnavailable, ErrForbidden, ErrNotFound and ErrInvalid.
type Error struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("a2: %d %s: %s: %s", e.Status, e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("a2: %d %s: %s", e.Status, e.Code, e.Message)
}

// Sentinel errors matched by *Error (errors.Is).
var (
	ErrInvalid               = errors.New("a2: invalid request")
	ErrForbidden             = errors.New("a2: forbidden")
	ErrNotFound              = errors.New("a2: not found")
	ErrPartialDuplicateBatch = errors.New("a2: PARTIAL_DUPLICATE_BATCH")
	ErrUnavailable           = errors.New("a2: unavailable")
)

// Is matches the sentinel of the error's status.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrInvalid:
		return e.Status == http.StatusBadRequest
	case ErrForbidden:
		return e.Status == http.StatusForbidden || e.Status == http.StatusUnauthorized
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrPartialDuplicateBatch:
		return e.Status == http.StatusConflict
	case ErrUnavailable:
		return e.Status == http.StatusServiceUnavailable
	}
	return false
}

func (c *Client) sessionURL(session, rest string) string {
	prefix := "/v1/agents/"
	if c.opts.Trusted && rest == "/events" {
		prefix = "/v1/admin/agents/"
	}
	return c.base + prefix + url.PathEscape(c.agent) + "/sessions/" + url.PathEscape(session) + rest
}

// retryable reports whether an attempt may be repeated as it is: a
// network error, or the node answered 503.
func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status == http.StatusServiceUnavailable
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// backoff is the wait before attempt n (from 1): doubling from MinBackoff
// up to MaxBackoff, with up to 50% jitter.
func (c *Client) backoff(n int) time.Duration {
	d := c.opts.MinBackoff << min(n-1, 16)
	if d > c.opts.MaxBackoff || d <= 0 {
		d = c.opts.MaxBackoff
	}
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// do sends a request, retrying network errors and 503 with backoff; the
// same body is sent each time. out, when not nil, receives the JSON answer.
func (c *Client) do(ctx context.Context, method, url string, body []byte, out any) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = c.once(ctx, method, url, body, out)
		if err == nil || !retryable(err) || attempt >= c.opts.MaxAttempts || ctx.Err() != nil {
			if ctx.Err() != nil && err != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
			}
			return err
		}
		if sleep(ctx, c.backoff(attempt)) != nil {
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		}
	}
}

func (c *Client) once(ctx context.Context, method, url string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.Token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return decodeError(resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("client: the answer to %s %s does not decode: %w", method, url, err)
	}
	return nil
}

// decodeError reads an error answer; a body that is not the JSON error
// shape (a proxy's page) becomes the message.
func decodeError(status int, body []byte) error {
	var wrapper struct {
		Error *Error `json:"error"`
	}
	if json.Unmarshal(body, &wrapper) == nil && wrapper.Error != nil {
		wrapper.Error.Status = status
		return wrapper.Error
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return &Error{Status: status, Code: http.StatusText(status), Message: msg}
}

// Push pushes events to a session and returns them as persisted (with
// Index, Session and Time) once durable. Events without an ID get a fresh
// one first; the IDs then stay the same across transport retries (network
// errors and 503 are retried with backoff), so a retried push is an
// identical resubmission that replays instead of appending twice (R-LOG-04,
// R-LOG-09). A push that fails appended nothing.
func (c *Client) Push(ctx context.Context, session string, events ...protocol.Event) ([]protocol.Event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	events = c.assignIDs(events)
	b, err := c.pushBody(events)
	if err != nil {
		return nil, err
	}
	var out struct {
		Events []struct {
			ID    string `json:"id"`
			Type  string `json:"type"`
			Index uint64 `json:"index"`
		} `json:"events"`
	}
	if err := c.do(ctx, http.MethodPost, c.sessionURL(session, "/events"), b, &out); err != nil {
		return nil, err
	}
	index := make(map[string]uint64, len(out.Events))
	for _, ev := range out.Events {
		index[ev.ID] = ev.Index
	}
	persisted := make([]protocol.Event, len(events))
	for i, ev := range events {
		ev.Session = session
		ev.Index = index[ev.ID]
		persisted[i] = ev
	}
	return persisted, nil
}

// pushBody is the JSON body of a push of events.
func (c *Client) pushBody(events []protocol.Event) ([]byte, error) {
	type wireEvent struct {
		ID      string          `json:"id"`
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload"`
	}
	body := struct {
		Events []wireEvent `json:"events"`
	}{make([]wireEvent, len(events))}
	for i, ev := range events {
		body.Events[i] = wireEvent{ID: ev.ID, Type: ev.Type, Payload: ev.Payload}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("client: an event does not encode: %w", err)
	}
	return b, nil
}

// assignIDs gives every event without an ID a fresh one, on a copy.
func (c *Client) assignIDs(events []protocol.Event) []protocol.Event {
	out := make([]protocol.Event, len(events))
	for i, ev := range events {
		if ev.ID == "" {
			ev.ID = c.opts.NewID()
		}
		out[i] = ev
	}
	return out
}

// State returns the session's confirmed state and the log index it is at.
func (c *Client) State(ctx context.Context, session string) (*protocol.SessionState, uint64, error) {
	var out struct {
		Index uint64          `json:"index"`
		State json.RawMessage `json:"state"`
	}
	if err := c.do(ctx, http.MethodGet, c.sessionURL(session, "/state"), nil, &out); err != nil {
		return nil, 0, err
	}
	st, err := c.opts.Contract.UnmarshalState(out.State)
	if err != nil {
		return nil, 0, fmt.Errorf("client: the state does not decode: %w", err)
	}
	return st, out.Index, nil
}

// History returns up to limit events of the session after index after
// (limit 0: the node's default of 100; at most 1000), and the index to
// continue after.
func (c *Client) History(ctx context.Context, session string, after uint64, limit int) ([]protocol.Event, uint64, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Events []protocol.Event `json:"events"`
		Next   uint64           `json:"next"`
	}
	u := c.base + "/v1/agents/" + url.PathEscape(c.agent) + "/sessions/" + url.PathEscape(session) + "/events?" + q.Encode()
	if err := c.do(ctx, http.MethodGet, u, nil, &out); err != nil {
		return nil, 0, err
	}
	return out.Events, out.Next, nil
}
