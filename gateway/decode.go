package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/a2-runtime/a2/protocol"
)

// readJSONBody reads a request body of JSON: its media type, its size
// limit, UTF-8 and JSON syntax.
func (g *Gateway) readJSONBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !isJSONSuffix(mt)) {
			return nil, errorf(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "Content-Type",
				"is %q; send the body as application/json (curl: -H 'Content-Type: application/json')", ct)
		}
	}
	limit := g.opts.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, "body", "is %d bytes, more than the limit of %d", r.ContentLength, limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, "body", "is more than the limit of %d bytes", limit)
		}
		return nil, errClientGone
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, invalid("body", `is empty; send a JSON object (a push is {"events":[{"id":...,"type":...,"payload":...}]})`)
	}
	if !utf8.Valid(body) {
		return nil, invalid("body", "is not valid UTF-8")
	}
	if !json.Valid(body) {
		var v any
		err := json.Unmarshal(body, &v)
		if err == nil {
			err = errors.New("unexpected data after the JSON value")
		}
		return nil, invalid("body", "is not valid JSON: %v", err)
	}
	return body, nil
}

// decodeEvents reads the body of a push, {"events":[{"id","type","payload"}]},
// within the configured limits. It checks the envelope only (shape, JSON
// types, limits, UTF-8); the events themselves are validated by the Router
// (Contract.ValidateIngress), which names the offending field.
func (g *Gateway) decodeEvents(w http.ResponseWriter, r *http.Request) ([]protocol.Event, error) {
	body, err := g.readJSONBody(w, r)
	if err != nil {
		return nil, err
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return nil, invalid("body", `must be a JSON object {"events":[...]}`)
	}
	for k := range top {
		if k != "events" {
			return nil, invalid(k, `is not a field of a push; the body is {"events":[...]}`)
		}
	}
	raw, ok := top["events"]
	if !ok || string(raw) == "null" {
		return nil, invalid("events", "is required")
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, invalid("events", "must be an array of events")
	}
	if len(list) == 0 {
		return nil, invalid("events", "must hold at least one event")
	}
	if len(list) > g.opts.MaxEvents {
		return nil, errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, "events", "holds %d events, more than the limit of %d per push", len(list), g.opts.MaxEvents)
	}
	out := make([]protocol.Event, len(list))
	for i, r := range list {
		ev, err := decodeEvent(fmt.Sprintf("events[%d]", i), r)
		if err != nil {
			return nil, err
		}
		out[i] = ev
	}
	return out, nil
}

func isJSONSuffix(mt string) bool {
	return len(mt) > 5 && mt[len(mt)-5:] == "+json"
}

// decodeEvent reads one pushed event: an object with a string id, a string
// type and a payload (any JSON value, stored compacted).
func decodeEvent(field string, raw json.RawMessage) (protocol.Event, error) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return protocol.Event{}, invalid(field, `must be an object {"id","type","payload"}`)
	}
	for k := range m {
		switch k {
		case "id", "type", "payload":
		default:
			return protocol.Event{}, invalid(field+"."+k, "is not a field of a pushed event (id, type, payload); index, session, time and cause are set by A2")
		}
	}
	var ev protocol.Event
	for _, f := range []struct {
		name string
		dst  *string
	}{{"id", &ev.ID}, {"type", &ev.Type}} {
		v, ok := m[f.name]
		if !ok {
			return protocol.Event{}, invalid(field+"."+f.name, "is required")
		}
		if json.Unmarshal(v, f.dst) != nil {
			return protocol.Event{}, invalid(field+"."+f.name, "must be a string, not %s", jsonKind(v))
		}
	}
	p, ok := m["payload"]
	if !ok || string(p) == "null" {
		return protocol.Event{}, invalid(field+".payload", "is required")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, p); err != nil {
		return protocol.Event{}, invalid(field+".payload", "is not valid JSON: %v", err)
	}
	ev.Payload = buf.Bytes()
	return ev, nil
}

// jsonKind names the JSON type of a value, for error messages.
func jsonKind(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// uintParam reads an optional non-negative integer query parameter.
func uintParam(r *http.Request, name string, def uint64) (uint64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, invalid(name, "must be a non-negative integer, not %q", s)
	}
	return n, nil
}
