package client

import (
	"bufio"
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
	out := make(chan protocol.Event, 64)
	errc := make(chan error, 1)
	go func() {
		defer close(out)
		last := after
		failures := 0
		for {
			before := last
			err := c.streamOnce(ctx, session, &last, out)
			if ctx.Err() != nil {
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

// errGap marks a stream that skipped an index; the client reconnects from
// the last index it delivered.
var errGap = errors.New("client: the stream skipped an index")

// streamOnce reads one connection of a stream until it ends, delivering
// events after *last and advancing it.
func (c *Client) streamOnce(ctx context.Context, session string, last *uint64, out chan<- protocol.Event) error {
	connCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := time.AfterFunc(c.opts.StreamIdleTimeout, cancel)
	defer idle.Stop()
	u := c.sessionURL(session, "/stream") + "?after=" + strconv.FormatUint(*last, 10)
	req, err := http.NewRequestWithContext(connCtx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(*last, 10))
	}
	if c.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.Token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return decodeError(resp.StatusCode, b)
	}
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	var data strings.Builder
	hasData := false
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
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
				return fmt.Errorf("client: a stream event does not decode: %w", err)
			}
			if ev.Index <= *last {
				continue // already delivered
			}
			if ev.Index != *last+1 {
				return errGap
			}
			select {
			case out <- ev:
				*last = ev.Index
			case <-ctx.Done():
				return ctx.Err()
			}
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
