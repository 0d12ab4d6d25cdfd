package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a2-runtime/a2/protocol"
)

// stream serves GET .../stream?after=N as server-sent events: one SSE event
// per log event (id: its index, event: its type, data: the full envelope as
// JSON), starting after the Last-Event-ID header when present (it wins over
// after, so a reconnecting EventSource resumes with no gap and no
// duplicate), a ": ping" comment when idle for the heartbeat interval, and
// a flush per batch: every event already available is written before one
// flush.
//
// The stream ends when the client goes away, the gateway closes, or the
// subscription fails; in the last case a comment ": error ..." says why and
// the client reconnects from the last ID it saw. With until=idle it also
// ends, with the comment ": idle", once the session is idle (no turn, no
// request, nothing queued unless the inbox is paused, no command awaiting
// its decision): a bounded stream for scripts and curl.
func (g *Gateway) stream(w http.ResponseWriter, r *http.Request) {
	done, ok := g.limitStream(w, r)
	if !ok {
		return
	}
	defer done()
	agent, session := r.PathValue("agent"), r.PathValue("session")
	after, err := uintParam(r, "after", 0)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	untilIdle := false
	switch u := r.URL.Query().Get("until"); u {
	case "":
	case "idle":
		untilIdle = true
	default:
		g.fail(w, r, invalid("until", "must be idle (end the stream once the session is idle) or absent, not %q", u))
		return
	}
	if last := strings.TrimSpace(r.Header.Get("Last-Event-ID")); last != "" {
		n, err := strconv.ParseUint(last, 10, 64)
		if err != nil {
			g.fail(w, r, invalid("Last-Event-ID", "must be the index of the last event seen (a non-negative integer), not %q", last))
			return
		}
		after = n
	}
	if err := g.authorize(r, Operation{Type: OpRead, Agent: agent, Session: session}); err != nil {
		g.fail(w, r, err)
		return
	}
	g.serveStream(w, r, agent, session, after, untilIdle, false, nil)
}

// opened is a stream a router opened with the push (PushStreamer): it
// ends itself once the session is idle.
type opened struct {
	events <-chan protocol.Event
	errc   <-chan error
}

// serveStream answers with the session's stream of events after index
// after (the stream endpoint's body, and a push's with stream=1: pushed),
// ending once the session is idle when untilIdle is set. A stream the
// router opened with the push (open, not nil) is served as it is.
func (g *Gateway) serveStream(w http.ResponseWriter, r *http.Request, agent, session string, after uint64, untilIdle, pushed bool, open *opened) {
	// A router that can tell whether a session is idle without its state
	// (IdleReader) is asked that; another's state is read and folded.
	idler, cheap := g.router.(IdleReader)
	var st *protocol.SessionState
	index := after
	idle := false
	var err error
	// After a push, a router that answers Idle needs no question first:
	// after is below the events just pushed, and whether the session is
	// idle is asked after the first of them (below).
	if open == nil && (after > 0 || untilIdle) && !(pushed && cheap) {
		// A resume point past the log's end would wait for ever for events
		// it has already "seen": refuse it, with the index to resume from.
		if cheap {
			index, idle, err = idler.Idle(r.Context(), agent, session)
		} else if st, index, err = g.router.State(r.Context(), agent, session); err == nil {
			idle = st.AI.Idle()
		}
		if err != nil {
			g.fail(w, r, err)
			return
		}
		if after > index {
			field := "after"
			if strings.TrimSpace(r.Header.Get("Last-Event-ID")) != "" {
				field = "Last-Event-ID"
			}
			g.fail(w, r, invalid(field, "is %d, past the end of the log (its last event is %d): resume from %d or less", after, index, index))
			return
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// A router whose streams end themselves once the session is idle
	// (IdleSubscriber: the cluster, where each question would cross a hop)
	// is asked for such a stream, unless the session was seen idle above.
	var events <-chan protocol.Event
	var errc <-chan error
	routerEnds := false
	if open != nil {
		events, errc, routerEnds = open.events, open.errc, true
	} else if sub, ok := g.router.(IdleSubscriber); ok && untilIdle && !idle {
		events, errc, err = sub.SubscribeUntilIdle(ctx, agent, session, after)
		routerEnds = err == nil
	}
	if open == nil && !routerEnds && (err == nil || errors.Is(err, errors.ErrUnsupported)) {
		events, errc, err = g.router.Subscribe(ctx, agent, session, after)
	}
	if err != nil {
		g.fail(w, r, err)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	bw, flush := g.startSSE(w)
	defer endSSE(bw)
	// The retry hint and a first comment make the headers reach the client
	// at once, before any event exists. After a push its first events
	// exist already: they go with the headers, one write fewer.
	_, _ = bw.WriteString("retry: 1000\n: connected\n\n")
	if !pushed && flush() != nil {
		return
	}
	if untilIdle && after >= index && idle {
		_, _ = bw.WriteString(": idle\n\n")
		_ = flush()
		return
	}
	// until=idle: the stream ends at the index where the session was seen
	// idle (idleAt, 0 while it has not been), once that event is written:
	// at the index read above (a replay of what it had already done), or
	// at a later one, learnt by folding each later event into the state
	// read, or by asking the router again after each event that can end
	// activity (any but progress) past the index it last answered.
	var idleAt uint64
	if idle {
		idleAt = index
	}
	asked := index
	var buf []byte // writeSSE's scratch
	if g.pump(ctx, events, errc, bw, flush, func(ev protocol.Event) bool {
		buf = writeSSE(bw, ev, buf)
		if !untilIdle {
			return false
		}
		if idleAt > 0 {
			return ev.Index >= idleAt
		}
		if ev.Index <= index || routerEnds {
			return false
		}
		if !cheap {
			if err := protocol.Fold(st.AI, ev); err != nil {
				g.opts.Logger.WarnContext(ctx, "gateway: a stream cannot fold an event", "session", session, "index", ev.Index, "err", err)
				return false
			}
			return st.AI.Idle()
		}
		if ev.Type == protocol.TypeGenerationProgress || ev.Index <= asked {
			return false
		}
		at, ok, err := idler.Idle(ctx, agent, session)
		if err != nil {
			g.opts.Logger.WarnContext(ctx, "gateway: a stream cannot tell whether its session is idle", "session", session, "err", err)
			return false
		}
		asked = at
		if ok {
			idleAt = at
			return ev.Index >= idleAt
		}
		return false
	}, func(err error) {
		g.opts.Logger.WarnContext(ctx, "gateway: a stream's subscription failed", "err", err)
		_, _ = bw.WriteString(": error " + oneLine(classify(err).Message) + "\n\n")
	}) {
		// The handler's return writes this with the response's end, in
		// one write.
		_, _ = bw.WriteString(": idle\n\n")
		_ = bw.Flush()
	}
}

// sseWriters are the buffered writers of SSE streams, reused: a 32 KiB
// buffer made for each stream was a quarter of the bytes a gateway
// allocated under load (one stream per turn).
var sseWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 32<<10) }}

// startSSE answers 200 with the headers of a server-sent event stream and
// returns its buffered writer and the flush that writes it out (within the
// write timeout). The caller gives the writer back with endSSE when the
// stream ends, and uses it no more.
func (g *Gateway) startSSE(w http.ResponseWriter) (*bufio.Writer, func() error) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	bw := sseWriters.Get().(*bufio.Writer)
	bw.Reset(w)
	return bw, func() error {
		_ = rc.SetWriteDeadline(time.Now().Add(g.opts.WriteTimeout))
		if err := bw.Flush(); err != nil {
			return err
		}
		return rc.Flush()
	}
}

// endSSE gives a stream's writer back (what it still holds is dropped: the
// stream has ended).
func endSSE(bw *bufio.Writer) {
	bw.Reset(nil)
	sseWriters.Put(bw)
}

// pump feeds a subscription's events to each, a batch at a time: every
// event already there, then one flush; a ": ping" comment keeps an idle
// stream alive. It returns true once each reports it is done or the
// subscription ends with io.EOF (IdleSubscriber), false when
// the client, the gateway or the subscription ends the stream first; a
// subscription that failed is reported to failed (not a cancellation).
func (g *Gateway) pump(ctx context.Context, events <-chan protocol.Event, errc <-chan error, bw *bufio.Writer, flush func() error,
	each func(protocol.Event) bool, failed func(error)) bool {
	heartbeat := time.NewTicker(g.opts.HeartbeatInterval)
	defer heartbeat.Stop()
	for {
		select {
		case ev, ok := <-events:
			for more := true; more; {
				if !ok {
					select {
					case err := <-errc:
						if err == io.EOF {
							return true // the router ended the stream: the session is idle
						}
						if err != nil && !errors.Is(err, context.Canceled) {
							failed(err)
						}
					default:
					}
					_ = flush()
					return false
				}
				if each(ev) {
					return true
				}
				select {
				case ev, ok = <-events:
				default:
					more = false
				}
			}
			if flush() != nil {
				return false
			}
			heartbeat.Reset(g.opts.HeartbeatInterval)
		case <-heartbeat.C:
			_, _ = bw.WriteString(": ping\n\n")
			if flush() != nil {
				return false
			}
		case <-g.done:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// writeSSE writes one log event as an SSE event. buf is scratch space for
// the envelope, returned for the next call.
func writeSSE(bw *bufio.Writer, ev protocol.Event, buf []byte) []byte {
	buf = appendEnvelope(buf[:0], ev)
	bw.WriteString("id: ")
	bw.WriteString(strconv.FormatUint(ev.Index, 10))
	bw.WriteString("\nevent: ")
	bw.WriteString(oneLine(ev.Type))
	// The envelope holds no raw line break (appendEnvelope), so it is one
	// data line.
	bw.WriteString("\ndata: ")
	bw.Write(buf)
	bw.WriteString("\n\n")
	return buf
}

// appendEnvelope appends ev as JSON, as json.Marshal encodes it (the same
// fields, equal as JSON), on one line, without json.Marshal's cost: that
// validated and re-compacted every payload for every subscriber, the
// largest part of the stream's CPU with hundreds of streams
// (docs/benchmarks.md, "Streams over HTTP"). A payload is valid JSON (the gateway
// compacts what clients send, Contract.Fold rejects invalid JSON, and the
// runtime marshals its own), so it is copied as it is unless it has a line
// break, which only a payload pushed through the Go API with indentation
// can: that one is compacted.
func appendEnvelope(dst []byte, ev protocol.Event) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, ev.ID)
	dst = append(dst, `,"type":`...)
	dst = appendString(dst, ev.Type)
	dst = append(dst, `,"payload":`...)
	switch {
	case len(ev.Payload) == 0:
		dst = append(dst, "null"...)
	case bytes.IndexByte(ev.Payload, '\n') < 0 && bytes.IndexByte(ev.Payload, '\r') < 0:
		dst = append(dst, ev.Payload...)
	default:
		b := bytes.NewBuffer(dst)
		if err := json.Compact(b, ev.Payload); err != nil {
			b.WriteString("null") // not reached: a stored payload is valid JSON
		}
		dst = b.Bytes()
	}
	if ev.Index != 0 {
		dst = append(dst, `,"index":`...)
		dst = strconv.AppendUint(dst, ev.Index, 10)
	}
	if ev.Session != "" {
		dst = append(dst, `,"session":`...)
		dst = appendString(dst, ev.Session)
	}
	if ev.Time != 0 {
		dst = append(dst, `,"time":`...)
		dst = strconv.AppendInt(dst, ev.Time, 10)
	}
	if ev.Cause != "" {
		dst = append(dst, `,"cause":`...)
		dst = appendString(dst, ev.Cause)
	}
	return append(dst, '}')
}

// appendString appends s as a JSON string, as json.Marshal writes it.
func appendString(dst []byte, s string) []byte {
	if b, ok := protocol.AppendJSONString(dst, s); ok {
		return b
	}
	b, _ := json.Marshal(s) // a string always encodes
	return append(dst, b...)
}

// oneLine keeps a string on one SSE line.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}
