package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// maxEventBytes bounds one server-sent event (all its lines together), so
// that a misbehaving server cannot make a stream buffer without limit.
const maxEventBytes = 32 << 20

// errEventTooLarge is returned for an event larger than maxEventBytes.
var errEventTooLarge = errors.New("server-sent event too large")

// Event is one server-sent event: its event name ("" when the server
// sent none) and its data lines joined by newlines.
type Event struct {
	Name string
	Data []byte
}

// Reader reads server-sent events (the text/event-stream format of the
// WHATWG HTML standard): "event:" and "data:" fields, comment lines
// starting with ':' ignored, an empty line ending each event.
type Reader struct {
	r *bufio.Reader
}

func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next event. At a clean end of input it returns a last
// event that was not followed by an empty line, then io.EOF; any other
// read error is returned as it is (io.ErrUnexpectedEOF for a cut chunked
// body).
func (s *Reader) Next() (Event, error) {
	var ev Event
	hasData := false
	size := 0
	for {
		line, err := s.readLine(maxEventBytes - size)
		if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
			if errors.Is(err, io.EOF) && (hasData || ev.Name != "") {
				return ev, nil
			}
			return Event{}, err
		}
		size += len(line)
		if len(line) == 0 {
			if hasData || ev.Name != "" {
				return ev, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := bytes.Cut(line, []byte(":"))
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(field) {
		case "event":
			ev.Name = string(value)
		case "data":
			if hasData {
				ev.Data = append(ev.Data, '\n')
			}
			ev.Data = append(ev.Data, value...)
			hasData = true
		}
	}
}

// Buffered reports whether a whole event is already received and buffered,
// so that Next returns it without reading from the connection. It reads
// the buffered lines as Next would: comments and empty events do not
// count. It does not block.
func (s *Reader) Buffered() bool {
	b, _ := s.r.Peek(s.r.Buffered()) // what is buffered: Peek does not read
	pending := false                 // a data or event field since the last boundary
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return false
		}
		line := bytes.TrimSuffix(b[:i], []byte("\r"))
		b = b[i+1:]
		switch {
		case len(line) == 0:
			if pending {
				return true
			}
		case line[0] == ':':
		default:
			field, value, found := bytes.Cut(line, []byte(":"))
			if found && len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
			switch string(field) {
			case "data":
				pending = true
			case "event":
				pending = pending || len(value) > 0
			}
		}
	}
}

// readLine returns one line without its line ending ("\n" or "\r\n"). A
// last line without a line ending is returned with io.EOF.
func (s *Reader) readLine(limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		if len(line)+len(chunk) > limit {
			return nil, fmt.Errorf("%w (over %d bytes)", errEventTooLarge, maxEventBytes)
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		return line, err
	}
}
