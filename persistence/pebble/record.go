package pebble

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// Records are protobuf wire format, written and read by hand with protowire
// (no generated code). The equivalent .proto messages are in
// docs/storage.md; the field numbers below must match them. Decoders follow
// protobuf rules (unknown fields are skipped, a repeated scalar keeps its
// last value, absent fields are zero) and reject what protobuf rejects
// (truncation, a known field with the wrong wire type, invalid UTF-8 in a
// string), plus records missing a field the store always writes.

// Fields of message Event.
const (
	eventID      protowire.Number = 1
	eventType    protowire.Number = 2
	eventPayload protowire.Number = 3
	eventIndex   protowire.Number = 4
	eventSession protowire.Number = 5
	eventTime    protowire.Number = 6
	eventCause   protowire.Number = 7
)

// Fields of message EventRef.
const (
	refSession protowire.Number = 1
	refIndex   protowire.Number = 2
)

// Fields of message SessionMeta.
const metaLastIndex protowire.Number = 1

// Fields of message Snapshot.
const (
	snapSession protowire.Number = 1
	snapReducer protowire.Number = 2
	snapIndex   protowire.Number = 3
	snapState   protowire.Number = 4
)

func sizeString(n protowire.Number, s string) int { return sizeLen(n, len(s)) }

// sizeLen is the size of a length-delimited field of n bytes (none when
// empty).
func sizeLen(num protowire.Number, n int) int {
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func sizeVarint(n protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(n) + protowire.SizeVarint(v)
}

func appendString(b []byte, n protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, n protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendVarint(b []byte, n protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// encodeEvent appends the record of e to dst.
func encodeEvent(dst []byte, e *protocol.Event) []byte {
	if size := eventSize(e); cap(dst)-len(dst) < size {
		dst = append(make([]byte, 0, len(dst)+size), dst...)
	}
	dst = appendString(dst, eventID, e.ID)
	dst = appendString(dst, eventType, e.Type)
	dst = appendBytes(dst, eventPayload, e.Payload)
	dst = appendVarint(dst, eventIndex, e.Index)
	dst = appendString(dst, eventSession, e.Session)
	dst = appendVarint(dst, eventTime, uint64(e.Time))
	dst = appendString(dst, eventCause, e.Cause)
	return dst
}

// eventSize is the length of e's record.
func eventSize(e *protocol.Event) int {
	return sizeString(eventID, e.ID) + sizeString(eventType, e.Type) +
		sizeLen(eventPayload, len(e.Payload)) + sizeVarint(eventIndex, e.Index) +
		sizeString(eventSession, e.Session) + sizeVarint(eventTime, uint64(e.Time)) +
		sizeString(eventCause, e.Cause)
}

// decodeEvent decodes an Event record. The payload is copied, so b may be
// reused afterwards. It never panics, whatever b holds.
func decodeEvent(b []byte) (protocol.Event, error) {
	var e protocol.Event
	r := fieldReader{b: b}
	for !r.done() {
		num, typ, err := r.tag()
		if err != nil {
			return protocol.Event{}, err
		}
		switch num {
		case eventID:
			e.ID, err = r.str(num, typ)
		case eventType:
			e.Type, err = r.str(num, typ)
		case eventPayload:
			var v []byte
			v, err = r.bytes(num, typ)
			e.Payload = append([]byte(nil), v...)
		case eventIndex:
			e.Index, err = r.varint(num, typ)
		case eventSession:
			e.Session, err = r.str(num, typ)
		case eventTime:
			var v uint64
			v, err = r.varint(num, typ)
			e.Time = int64(v)
		case eventCause:
			e.Cause, err = r.str(num, typ)
		default:
			err = r.skip(num, typ)
		}
		if err != nil {
			return protocol.Event{}, err
		}
	}
	switch {
	case e.ID == "":
		return protocol.Event{}, errors.New("event record has no id")
	case e.Session == "":
		return protocol.Event{}, errors.New("event record has no session")
	case e.Index == 0:
		return protocol.Event{}, errors.New("event record has no index")
	}
	if len(e.Payload) == 0 {
		e.Payload = nil
	}
	return e, nil
}

// eventRef is the value of a global event-ID index entry: where the event
// with that ID lives.
type eventRef struct {
	session string
	index   uint64
}

func encodeRef(dst []byte, session string, index uint64) []byte {
	dst = appendString(dst, refSession, session)
	return appendVarint(dst, refIndex, index)
}

func decodeRef(b []byte) (eventRef, error) {
	var ref eventRef
	r := fieldReader{b: b}
	for !r.done() {
		num, typ, err := r.tag()
		if err != nil {
			return eventRef{}, err
		}
		switch num {
		case refSession:
			ref.session, err = r.str(num, typ)
		case refIndex:
			ref.index, err = r.varint(num, typ)
		default:
			err = r.skip(num, typ)
		}
		if err != nil {
			return eventRef{}, err
		}
	}
	if ref.session == "" || ref.index == 0 {
		return eventRef{}, errors.New("event reference lacks session or index")
	}
	return ref, nil
}

func encodeMeta(dst []byte, last uint64) []byte {
	return appendVarint(dst, metaLastIndex, last)
}

func decodeMeta(b []byte) (last uint64, err error) {
	r := fieldReader{b: b}
	for !r.done() {
		num, typ, err := r.tag()
		if err != nil {
			return 0, err
		}
		if num == metaLastIndex {
			last, err = r.varint(num, typ)
		} else {
			err = r.skip(num, typ)
		}
		if err != nil {
			return 0, err
		}
	}
	return last, nil
}

func encodeSnapshot(dst []byte, s *persistence.Snapshot) []byte {
	dst = appendString(dst, snapSession, s.Session)
	dst = appendString(dst, snapReducer, s.Reducer)
	dst = appendVarint(dst, snapIndex, s.Index)
	return appendBytes(dst, snapState, s.State)
}

func decodeSnapshot(b []byte) (persistence.Snapshot, error) {
	var s persistence.Snapshot
	r := fieldReader{b: b}
	for !r.done() {
		num, typ, err := r.tag()
		if err != nil {
			return persistence.Snapshot{}, err
		}
		switch num {
		case snapSession:
			s.Session, err = r.str(num, typ)
		case snapReducer:
			s.Reducer, err = r.str(num, typ)
		case snapIndex:
			s.Index, err = r.varint(num, typ)
		case snapState:
			var v []byte
			v, err = r.bytes(num, typ)
			s.State = append([]byte(nil), v...)
		default:
			err = r.skip(num, typ)
		}
		if err != nil {
			return persistence.Snapshot{}, err
		}
	}
	if s.Session == "" || s.Reducer == "" {
		return persistence.Snapshot{}, errors.New("snapshot record lacks session or reducer")
	}
	if len(s.State) == 0 {
		s.State = nil
	}
	return s, nil
}

// fieldReader walks the fields of one protobuf message.
type fieldReader struct{ b []byte }

func (r *fieldReader) done() bool { return len(r.b) == 0 }

func (r *fieldReader) tag() (protowire.Number, protowire.Type, error) {
	num, typ, n := protowire.ConsumeTag(r.b)
	if n < 0 {
		return 0, 0, fmt.Errorf("field tag: %w", protowire.ParseError(n))
	}
	r.b = r.b[n:]
	return num, typ, nil
}

func (r *fieldReader) bytes(num protowire.Number, typ protowire.Type) ([]byte, error) {
	if typ != protowire.BytesType {
		return nil, fmt.Errorf("field %d: wire type %d, want length-delimited", num, typ)
	}
	v, n := protowire.ConsumeBytes(r.b)
	if n < 0 {
		return nil, fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
	}
	r.b = r.b[n:]
	return v, nil
}

func (r *fieldReader) str(num protowire.Number, typ protowire.Type) (string, error) {
	v, err := r.bytes(num, typ)
	if err != nil {
		return "", err
	}
	if !utf8.Valid(v) {
		return "", fmt.Errorf("field %d: string is not valid UTF-8", num)
	}
	return string(v), nil
}

func (r *fieldReader) varint(num protowire.Number, typ protowire.Type) (uint64, error) {
	if typ != protowire.VarintType {
		return 0, fmt.Errorf("field %d: wire type %d, want varint", num, typ)
	}
	v, n := protowire.ConsumeVarint(r.b)
	if n < 0 {
		return 0, fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
	}
	r.b = r.b[n:]
	return v, nil
}

func (r *fieldReader) skip(num protowire.Number, typ protowire.Type) error {
	n := protowire.ConsumeFieldValue(num, typ, r.b)
	if n < 0 {
		return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
	}
	r.b = r.b[n:]
	return nil
}
