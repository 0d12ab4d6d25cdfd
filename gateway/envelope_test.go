package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/a2-runtime/a2/protocol"
)

// envelopeCases are events whose envelope the stream writes: a typical
// progress event, and the shapes that leave appendEnvelope's fast paths
// (strings to escape, a payload with line breaks, an empty payload).
var envelopeCases = []protocol.Event{
	{ID: "a2.ai:0123456789abcdef", Type: protocol.TypeGenerationProgress, Index: 42, Session: "s1", Time: 1764500000000, Cause: "a2.ai:fedcba",
		Payload: json.RawMessage(`{"generationId":"g1","fromIndex":3,"chunks":[{"type":"text-delta","id":"t","delta":"Hello <b> & \"you\"\n"}]}`)},
	{ID: "m1", Type: "ai.control.requested", Payload: json.RawMessage(`{"a":1}`)},
	{ID: `quote"and\backslash`, Type: "app.tab\there", Payload: json.RawMessage(`"x"`), Cause: "héllo \u2028 wörld"},
	{ID: "ctl\x01\x1f", Type: "t", Session: "\xff\xfe invalid utf-8", Payload: json.RawMessage(`[1, 2]`)},
	{ID: "indented", Type: "t", Payload: json.RawMessage("{\n  \"a\": [1,\r\n 2],\n  \"s\": \"line\\nbreak\"\n}\n")},
	{ID: "empty", Type: "t"},
	{ID: "spaces", Type: "t", Payload: json.RawMessage(` {"a" : true} `), Index: 1, Time: -5},
	{ID: `back\slash`, Type: "t", Payload: json.RawMessage(`1`), Cause: "del\x7f"},
}

// TestEnvelopeIsMarshal: the stream's envelope encoder gives, for every
// event, JSON equal to json.Marshal's (the documented envelope,
// docs/protocol.md) on one line, so that it is one SSE data line.
func TestEnvelopeIsMarshal(t *testing.T) {
	for _, ev := range envelopeCases {
		checkEnvelope(t, ev)
	}
}

// FuzzEnvelope checks TestEnvelopeIsMarshal's property on any event whose
// payload is valid JSON (the only payloads a store holds).
func FuzzEnvelope(f *testing.F) {
	for _, ev := range envelopeCases {
		f.Add(ev.ID, ev.Type, string(ev.Payload), ev.Index, ev.Session, ev.Time, ev.Cause)
	}
	f.Fuzz(func(t *testing.T, id, typ, payload string, index uint64, session string, time int64, cause string) {
		if payload != "" && !json.Valid([]byte(payload)) {
			return
		}
		checkEnvelope(t, protocol.Event{ID: id, Type: typ, Payload: json.RawMessage(payload), Index: index, Session: session, Time: time, Cause: cause})
	})
}

func checkEnvelope(t *testing.T, ev protocol.Event) {
	t.Helper()
	got := appendEnvelope(nil, ev)
	if bytes.ContainsAny(got, "\r\n") {
		t.Fatalf("envelope of %+v has a line break: %s", ev, got)
	}
	if utf8.Valid(ev.Payload) && !utf8.Valid(got) {
		t.Fatalf("envelope of %+v is not UTF-8: %q", ev, got)
	}
	want := ev
	if len(want.Payload) == 0 {
		want.Payload = json.RawMessage("null") // as json.Marshal writes a nil RawMessage
	}
	wantJSON, err := json.Marshal(want)
	if err != nil {
		t.Fatalf("json.Marshal(%+v): %v", ev, err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("envelope of %+v is not JSON: %v\n%s", ev, err, got)
	}
	if err := json.Unmarshal(wantJSON, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("envelope of %+v:\n got %s\nwant %s", ev, got, wantJSON)
	}
}

// TestWriteSSEFrame: one event is one SSE frame, id and event lines then a
// single data line with the envelope, and the scratch buffer carries over.
func TestWriteSSEFrame(t *testing.T) {
	var out bytes.Buffer
	bw := bufio.NewWriter(&out)
	var buf []byte
	for _, ev := range envelopeCases[4:6] {
		buf = writeSSE(bw, ev, buf)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	frames := strings.Split(strings.TrimSuffix(out.String(), "\n\n"), "\n\n")
	if len(frames) != 2 {
		t.Fatalf("%d frames, want 2:\n%s", len(frames), out.String())
	}
	for i, fr := range frames {
		lines := strings.Split(fr, "\n")
		if len(lines) != 3 || lines[0] != "id: 0" || lines[1] != "event: t" || !strings.HasPrefix(lines[2], "data: {") {
			t.Fatalf("frame %d: %q", i, fr)
		}
		var env protocol.Event
		if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[2], "data: ")), &env); err != nil || env.ID != envelopeCases[4+i].ID {
			t.Fatalf("frame %d's data %q: %v", i, lines[2], err)
		}
	}
}

// BenchmarkEnvelope: the stream's envelope of a progress event, against
// json.Marshal of the same event (the encoder it replaced) in the same run.
func BenchmarkEnvelope(b *testing.B) {
	ev := envelopeCases[0]
	b.Run("appendEnvelope", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = appendEnvelope(buf[:0], ev)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
