package protocol

import (
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
// p.Chunks afterwards. Its payload is p's JSON, and the event carries p
// decoded as well: Fold applies it without decoding the payload again,
// which is most of the cost of folding a progress batch the runtime has
// just built. The result is the same as folding the payload: a chunk whose
// JSON does not decode back to itself (raw JSON fields, which encoding
// compacts; strings that are not valid UTF-8) is kept as its decoding.
func NewProgressEvent(id, cause string, p GenerationProgress) (Event, error) {
	// The decoded chunks are p.Chunks themselves (the caller hands them
	// over) unless one does not round-trip: then a copy holds its decoding.
	d := &decodedProgress{generationID: p.GenerationID, fromIndex: p.FromIndex,
		raws: make([]json.RawMessage, len(p.Chunks)), chunks: p.Chunks}
	gen, err := json.Marshal(p.GenerationID)
	if err != nil {
		return Event{}, err
	}
	size := 64 + len(gen)
	for i := range p.Chunks {
		raw, err := json.Marshal(&p.Chunks[i])
		if err != nil {
			return Event{}, err
		}
		d.raws[i] = raw
		size += len(raw) + 1
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
	// The same bytes as json.Marshal(p): fields in declaration order.
	b := make([]byte, 0, size)
	b = append(b, `{"generationId":`...)
	b = append(b, gen...)
	b = append(b, `,"fromIndex":`...)
	b = strconv.AppendInt(b, int64(p.FromIndex), 10)
	b = append(b, `,"chunks":`...)
	if p.Chunks == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, raw := range d.raws {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, raw...)
		}
		b = append(b, ']')
	}
	b = append(b, '}')
	return Event{ID: id, Type: TypeGenerationProgress, Payload: b, Cause: cause, progress: d}, nil
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
