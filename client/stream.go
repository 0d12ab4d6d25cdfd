package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/a2-runtime/a2/protocol"
)

// Stream returns the session's durable events with an index greater than
// after, in order, each exactly once: the history first, then the live
// tail. It reconnects by itself when the connection drops or goes quiet
// (no event or heartbeat for StreamIdleTimeout), resuming from the last
// index it delivered (Last-Event-ID), with backoff between attempts. The
// event channel closes when ctx ends, or after a permanent error (the node
// refused the stream: 4xx) which is sent on the error channel first.
func (c *Client) Stream(ctx context.Context, session string, after uint64) (<-chan protocol.Event, <-chan error) {
	return c.follow(ctx, after, func(last *uint64, out chan<- protocol.Event) (bool, error) {
		return c.streamOnce(ctx, session, last, out, http.MethodGet, c.sessionURL(session, "/stream")+"?after="+strconv.FormatUint(*last, 10), nil)
	})
}

// follow runs connections of a stream (once) one after the other until one
// ends it (done), ctx ends or the node refuses it (4xx, sent on the error
// channel), with backoff between connections that delivered nothing.
func (c *Client) follow(ctx context.Context, after uint64, once func(last *uint64, out chan<- protocol.Event) (done bool, err error)) (<-chan protocol.Event, <-chan error) {
	out := make(chan protocol.Event, 64)
	errc := make(chan error, 1)
	go func() {
		defer close(out)
		last := after
		failures := 0
		for {
			before := last
			done, err := once(&last, out)
			if done || ctx.Err() != nil {
				return
			}
			var e *Error
			if errors.As(err, &e) && e.Status >= 400 && e.Status < 500 && e.Status != http.StatusRequestTimeout && e.Status != http.StatusTooManyRequests {
				errc <- err
				return
			}
			if last > before {
				failures = 0
			}
			failures++
			if sleep(ctx, c.backoff(failures)) != nil {
				return
			}
		}
	}()
	return out, errc
}

// Turn pushes events with one request that also streams the session's
// events from the first pushed one until the session is idle (POST
// …/events?stream=1, docs/http.md): the turn a send starts, in order, each
// exactly once, then the channel closes. Events without an ID get a fresh
// one, kept across retries: a push whose answer was lost is sent again and
// replays, streaming from its stored events. A stream that drops after its
// first event resumes with GET …/stream?after=N&until=idle. A refused push
// (4xx) is sent on the error channel, and nothing was appended.
func (c *Client) Turn(ctx context.Context, session string, events ...protocol.Event) (<-chan protocol.Event, <-chan error) {
	body, err := c.pushBody(c.assignIDs(events))
	if err != nil || len(events) == 0 {
		if err == nil {
			err = errors.New("client: a turn needs at least one event")
		}
		out, errc := make(chan protocol.Event), make(chan error, 1)
		errc <- err
		close(out)
		return out, errc
	}
	return c.follow(ctx, 0, func(last *uint64, out chan<- protocol.Event) (bool, error) {
		if *last == 0 {
			return c.streamOnce(ctx, session, last, out, http.MethodPost, c.sessionURL(session, "/events")+"?stream=1", body)
		}
		return c.streamOnce(ctx, session, last, out, http.MethodGet,
			c.sessionURL(session, "/stream")+"?until=idle&after="+strconv.FormatUint(*last, 10), nil)
	})
}

// errGap marks a stream that skipped an index; the client reconnects from
// the last index it delivered.
var errGap = errors.New("client: the stream skipped an index")

// streamOnce reads one connection of a stream until it ends, delivering
// events after *last and advancing it; done is set when the node ended
// it (": idle", a bounded stream's end). A POST with a body is a push
// with stream=1: its first event sets where the stream starts.
func (c *Client) streamOnce(ctx context.Context, session string, last *uint64, out chan<- protocol.Event, method, u string, body []byte) (done bool, err error) {
	connCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := time.AfterFunc(c.opts.StreamIdleTimeout, cancel)
	defer idle.Stop()
	var rb io.Reader
	if body != nil {
		rb = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(connCtx, method, u, rb)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if *last > 0 && method == http.MethodGet {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(*last, 10))
	}
	pushed := method == http.MethodPost
	if c.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.Token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return false, decodeError(resp.StatusCode, b)
	}
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	var data strings.Builder
	hasData := false
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			if err == io.EOF {
				return false, io.ErrUnexpectedEOF
			}
			return false, err
		}
		idle.Reset(c.opts.StreamIdleTimeout)
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if !hasData {
				continue
			}
			raw := data.String()
			data.Reset()
			hasData = false
			var ev protocol.Event
			if err := json.Unmarshal([]byte(raw), &ev); err != nil {
				return false, fmt.Errorf("client: a stream event does not decode: %w", err)
			}
			if pushed && *last == 0 && ev.Index > 0 {
				*last = ev.Index - 1 // the pushed events' stream starts at the first
			}
			if ev.Index <= *last {
				continue // already delivered
			}
			if ev.Index != *last+1 {
				return false, errGap
			}
			select {
			case out <- ev:
				*last = ev.Index
			case <-ctx.Done():
				return false, ctx.Err()
			}
		case line == ": idle":
			return true, nil // a bounded stream's end
		case strings.HasPrefix(line, ":"):
			// a comment: the heartbeat
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			if field == "data" {
				if hasData {
					data.WriteByte('\n')
				}
				data.WriteString(value)
				hasData = true
			}
			// id and event repeat what the envelope says; retry is ignored
			// (the client's own backoff decides).
		}
	}
}
