package protocol

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// decodedProgress is the payload of a progress event as Fold needs it: each
// chunk's JSON (kept in the projection) and its decoding.
type decodedProgress struct {
	generationID string
	fromIndex    int
	raws         []json.RawMessage
	chunks       []UIMessageChunk
}

// NewProgressEvent builds the ai.generation.progress event with the given
// ID and cause for p, which it takes over: the caller must not change
// p.Chunks while the event, or a copy of it, may still be folded (Plain
// returns a copy that no longer refers to them). Its payload is p's JSON, and the event carries p
// decoded as well: Fold applies it without decoding the payload again,
// which is most of the cost of folding a progress batch the runtime has
// just built. The result is the same as folding the payload: a chunk whose
// JSON does not decode back to itself (raw JSON fields, which encoding
// compacts; strings that are not valid UTF-8) is kept as its decoding.
func NewProgressEvent(id, cause string, p GenerationProgress) (Event, error) {
	gen, err := json.Marshal(p.GenerationID)
	if err != nil {
		return Event{}, err
	}
	// The same bytes as json.Marshal(p) (fields in declaration order),
	// written into one buffer; each chunk's JSON, kept by the projection, is
	// a slice of it.
	size := 64 + len(gen)
	for i := range p.Chunks {
		c := &p.Chunks[i]
		size += 48 + len(c.Type) + len(c.ID) + len(c.Delta) + len(c.ToolCallID) + len(c.InputTextDelta) + len(c.Input) + len(c.Output) + len(c.Data)
	}
	var buf bytes.Buffer
	buf.Grow(size)
	buf.WriteString(`{"generationId":`)
	buf.Write(gen)
	buf.WriteString(`,"fromIndex":`)
	buf.Write(strconv.AppendInt(nil, int64(p.FromIndex), 10))
	buf.WriteString(`,"chunks":`)
	ends := make([]int, 2*len(p.Chunks)) // start and end of each chunk
	if p.Chunks == nil {
		buf.WriteString("null")
	} else {
		buf.WriteByte('[')
		enc := json.NewEncoder(&buf) // json.Marshal's bytes, and a newline
		for i := range p.Chunks {
			if i > 0 {
				buf.WriteByte(',')
			}
			ends[2*i] = buf.Len()
			if b, ok := appendDeltaChunk(buf.AvailableBuffer(), &p.Chunks[i]); ok {
				buf.Write(b)
			} else {
				if err := enc.Encode(&p.Chunks[i]); err != nil {
					return Event{}, err
				}
				buf.Truncate(buf.Len() - 1)
			}
			ends[2*i+1] = buf.Len()
		}
		buf.WriteByte(']')
	}
	buf.WriteByte('}')
	b := buf.Bytes()
	// The decoded chunks are p.Chunks themselves (the caller hands them
	// over) unless one does not round-trip: then a copy holds its decoding.
	d := &decodedProgress{generationID: p.GenerationID, fromIndex: p.FromIndex,
		raws: make([]json.RawMessage, len(p.Chunks)), chunks: p.Chunks}
	for i := range p.Chunks {
		raw := b[ends[2*i]:ends[2*i+1]:ends[2*i+1]]
		d.raws[i] = raw
		if !roundTrips(&p.Chunks[i]) {
			if &d.chunks[0] == &p.Chunks[0] {
				d.chunks = append([]UIMessageChunk(nil), p.Chunks...)
			}
			d.chunks[i] = UIMessageChunk{}
			if err := json.Unmarshal(raw, &d.chunks[i]); err != nil {
				return Event{}, err
			}
		}
	}
	return Event{ID: id, Type: TypeGenerationProgress, Payload: b, Cause: cause, progress: d}, nil
}

// Plain returns e without the decoding NewProgressEvent attached to it: the
// event as a store or a subscriber sees it, whose fold decodes Payload. A
// caller that reuses the chunks it handed to NewProgressEvent makes every
// copy of the event it keeps Plain first.
func (e Event) Plain() Event {
	e.progress = nil
	return e
}

// roundTrips reports whether c's JSON decodes to c itself: no raw JSON
// field (encoding compacts them) and only valid UTF-8 strings (encoding
// replaces invalid bytes).
func roundTrips(c *UIMessageChunk) bool {
	for _, r := range [...]json.RawMessage{c.Input, c.Output, c.ApprovalDesc, c.Data, c.MessageMeta, c.ToolMetadata, c.ProviderMetadata} {
		if r != nil {
			return false
		}
	}
	for _, s := range [...]string{c.Type, c.ID, c.Delta, c.ErrorText, c.ToolCallID, c.ToolName, c.InputTextDelta, c.InputEncoding,
		c.Title, c.ApprovalID, c.Signature, c.SourceID, c.URL, c.MediaType, c.Filename, c.MessageID, c.FinishReason, c.Reason} {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// appendDeltaChunk appends c's JSON exactly as json.Marshal writes it when
// c sets no field but Type, ID and Delta (text and reasoning deltas, most
// of a stream's chunks) and their strings need no escaping but the common
// kinds, and reports true; otherwise it appends nothing and reports false,
// and the caller uses encoding/json. Reflection over the chunk's 29 fields
// was the largest cost of NewProgressEvent.
func appendDeltaChunk(dst []byte, c *UIMessageChunk) ([]byte, bool) {
	if !onlyTypeIDDelta(c) {
		return dst, false
	}
	start := len(dst)
	dst = append(dst, `{"type":`...)
	dst, ok := AppendJSONString(dst, c.Type)
	if ok && c.ID != "" {
		dst = append(dst, `,"id":`...)
		dst, ok = AppendJSONString(dst, c.ID)
	}
	if ok && c.Delta != "" {
		dst = append(dst, `,"delta":`...)
		dst, ok = AppendJSONString(dst, c.Delta)
	}
	if !ok {
		return dst[:start], false
	}
	return append(dst, '}'), true
}

// onlyTypeIDDelta reports whether c sets no field but Type, ID and Delta.
// (TestOnlyTypeIDDeltaSeesEveryField fails when a field is added to
// UIMessageChunk and not here.)
func onlyTypeIDDelta(c *UIMessageChunk) bool {
	return c.ErrorText == "" && c.ToolCallID == "" && c.ToolName == "" && c.InputTextDelta == "" &&
		c.Input == nil && c.Output == nil && c.InputEncoding == "" && !c.Dynamic && c.Title == "" &&
		c.ProviderExec == nil && c.Preliminary == nil && c.ApprovalID == "" && c.ApprovalDesc == nil &&
		c.Signature == "" && c.SourceID == "" && c.URL == "" && c.MediaType == "" && c.Filename == "" &&
		c.Data == nil && !c.Transient && c.MessageID == "" && c.MessageMeta == nil && c.FinishReason == "" &&
		c.Reason == "" && c.ToolMetadata == nil && c.ProviderMetadata == nil &&
		c.Citations == nil && c.Kind == "" && c.Approved == nil && !c.IsAutomatic &&
		c.InputSchemaInput == nil && c.Parts == nil
}

// AppendJSONString appends s as encoding/json writes a string (escaping HTML
// characters, as json.Marshal does), and reports true, for strings of valid
// UTF-8 whose only characters to escape are quotes, backslashes, tabs,
// newlines, carriage returns and <, >, &. For anything else (other control
// characters, invalid UTF-8, U+2028, U+2029) it returns dst as it was and
// false: the caller encodes s with encoding/json. NewProgressEvent uses it
// for deltas, the gateway for its event envelopes; FuzzDeltaChunk and the
// gateway's FuzzEnvelope compare it with encoding/json.
func AppendJSONString(dst []byte, s string) ([]byte, bool) {
	start := len(dst)
	dst = append(dst, '"')
	last := 0 // s[last:i] is still to copy
	for i := 0; i < len(s); {
		b := s[i]
		if b >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				return dst[:start], false
			}
			i += size
			continue
		}
		var esc string
		switch b {
		case '"':
			esc = `\"`
		case '\\':
			esc = `\\`
		case '\n':
			esc = `\n`
		case '\r':
			esc = `\r`
		case '\t':
			esc = `\t`
		case '<':
			esc = `\u003c`
		case '>':
			esc = `\u003e`
		case '&':
			esc = `\u0026`
		default:
			if b < 0x20 {
				return dst[:start], false
			}
			i++
			continue
		}
		dst = append(dst, s[last:i]...)
		dst = append(dst, esc...)
		i++
		last = i
	}
	dst = append(dst, s[last:]...)
	return append(dst, '"'), true
}
