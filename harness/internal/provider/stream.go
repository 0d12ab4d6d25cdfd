package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/a2-runtime/a2/harness/internal/sse"
	"github.com/a2-runtime/a2/protocol"
)

// Decoder is what a provider adds to Stream: how its server-sent events
// become chunks.
type Decoder struct {
	// Handle decodes one event, emitting chunks with Stream.Emit; an error
	// fails the stream after the chunks already emitted.
	Handle func(ev sse.Event) error
	// Complete reports whether the response's end was seen (a finish
	// reason, message_stop), so that a clean end of the body completes it
	// (some servers omit their last event).
	Complete func() bool
	// Finish closes what is still open and calls Stream.End, after a clean
	// end of the body.
	Finish func()
}

// Stream is the part of a provider's chunk stream that the HTTP providers
// share: the chunk queue, Next and Ready over the server-sent events of
// the response body, cancellation and Close, the end and the failure of
// the stream, and chunk IDs. A provider keeps one as a field, forwards
// Next, Ready and Close to it, and supplies a Decoder.
//
// Next returns the chunks decoded so far, then decodes the next event; the
// context's cancellation and Close win over chunks decoded but not yet
// returned. Next and Ready are for one goroutine; Close may be called from
// any, also while Next blocks.
type Stream struct {
	ctx    context.Context
	body   io.ReadCloser
	sse    *sse.Reader
	name   string // the provider, prefixing error messages
	end    string // what a complete response ends with, for the early-end error
	closed error  // the error Next returns after Close
	dec    Decoder

	closeOnce sync.Once
	closedMu  sync.Mutex
	isClosed  bool

	queue   []protocol.UIMessageChunk
	started bool
	ended   bool
	err     error

	idPrefix string
	nextID   int
}

// Init prepares s to read body for one response of provider name (as in
// "openai"): chunk IDs start with generationID (when not empty), a body
// that ends before the response is complete fails with a message naming
// end ("message_stop"), and Next returns closed after Close.
func (s *Stream) Init(ctx context.Context, body io.ReadCloser, generationID, name, end string, closed error, dec Decoder) {
	s.ctx, s.body, s.sse, s.name, s.end, s.closed, s.dec = ctx, body, sse.NewReader(body), name, end, closed, dec
	if generationID != "" {
		s.idPrefix = generationID + "-"
	}
}

// Close releases the connection. It is safe to call more than once and
// while Next blocks; Next then returns the closed error given to Init.
func (s *Stream) Close() error {
	s.closedMu.Lock()
	s.isClosed = true
	s.closedMu.Unlock()
	s.closeOnce.Do(func() { _ = s.body.Close() })
	return nil
}

func (s *Stream) wasClosed() bool {
	s.closedMu.Lock()
	defer s.closedMu.Unlock()
	return s.isClosed
}

// Ready implements harness.ReadyStream. It decodes the server-sent events
// already buffered until one yields a chunk (an event may yield none: a
// ping, a usage-only chunk), so that it is true only when Next returns at
// once.
func (s *Stream) Ready() bool {
	for len(s.queue) == 0 && s.err == nil && !s.ended {
		if !s.started {
			return true // Next emits the start chunks without reading
		}
		if !s.sse.Buffered() {
			return false
		}
		s.decodeNext() // a whole event is buffered: no read
	}
	return true
}

// Next returns the next chunk; io.EOF after finish; the context's error
// when ctx was cancelled; the provider's error for an error the server
// streamed; an error wrapping io.ErrUnexpectedEOF when the connection
// ended before the response did.
func (s *Stream) Next() (protocol.UIMessageChunk, error) {
	for {
		if s.err == nil && !s.ended {
			if err := s.ctx.Err(); err != nil {
				s.Fail(err)
				s.queue = nil
			} else if s.wasClosed() {
				s.Fail(s.closed)
				s.queue = nil
			}
		}
		if len(s.queue) > 0 {
			c := s.queue[0]
			s.queue = s.queue[1:]
			return c, nil
		}
		if s.err != nil {
			return protocol.UIMessageChunk{}, s.err
		}
		if s.ended {
			return protocol.UIMessageChunk{}, io.EOF
		}
		if !s.started {
			s.started = true
			s.Emit(protocol.UIMessageChunk{Type: protocol.ChunkStart}, protocol.UIMessageChunk{Type: protocol.ChunkStartStep})
			continue
		}
		s.decodeNext()
	}
}

// decodeNext reads and decodes one event, or ends the stream at the end
// of the body.
func (s *Stream) decodeNext() {
	ev, err := s.sse.Next()
	if err != nil {
		s.readFailed(err)
		return
	}
	if err := s.dec.Handle(ev); err != nil {
		s.Fail(err)
	}
}

// readFailed ends the stream after a read error: a clean end of the body
// after the response's end completes it; any other end is an error.
func (s *Stream) readFailed(err error) {
	switch {
	case s.ctx.Err() != nil:
		s.Fail(s.ctx.Err())
	case s.wasClosed():
		s.Fail(s.closed)
	case errors.Is(err, io.EOF) && s.dec.Complete():
		s.dec.Finish()
	case errors.Is(err, io.EOF):
		s.Fail(fmt.Errorf("%s: the stream ended before %s: %w", s.name, s.end, io.ErrUnexpectedEOF))
	default:
		s.Fail(fmt.Errorf("%s: reading the stream: %w", s.name, err))
	}
}

// Fail makes err the stream's error; chunks already emitted are still
// returned first. The first error wins.
func (s *Stream) Fail(err error) {
	if s.err == nil {
		s.err = err
		s.closeOnce.Do(func() { _ = s.body.Close() })
	}
}

// Emit queues chunks for Next.
func (s *Stream) Emit(c ...protocol.UIMessageChunk) { s.queue = append(s.queue, c...) }

// Ended reports whether End was called.
func (s *Stream) Ended() bool { return s.ended }

// End ends the response: it emits finish-step and finish with the AI SDK
// finish reason and, when the provider reported usage, messageMetadata
// {"usage": {...}}; Next returns io.EOF after them. The connection is
// released.
func (s *Stream) End(finishReason string, usage *protocol.Usage) {
	s.ended = true
	fin := protocol.UIMessageChunk{Type: protocol.ChunkFinish, FinishReason: finishReason}
	if usage != nil {
		if meta, err := json.Marshal(map[string]protocol.Usage{"usage": *usage}); err == nil {
			fin.MessageMeta = meta
		}
	}
	s.Emit(protocol.UIMessageChunk{Type: protocol.ChunkFinishStep}, fin)
	s.closeOnce.Do(func() { _ = s.body.Close() })
}

// NewID returns a new chunk ID: the generation's prefix, kind and a
// counter.
func (s *Stream) NewID(kind string) string {
	s.nextID++
	return s.idPrefix + kind + strconv.Itoa(s.nextID)
}
