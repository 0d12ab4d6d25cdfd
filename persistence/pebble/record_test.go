package pebble

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// recordSamples are valid records, the seed corpus of FuzzDecodeRecord.
func recordSamples() [][]byte {
	events := []protocol.Event{
		{ID: "e1", Type: "ai.message.created", Payload: []byte(`{"messageId":"m1"}`), Index: 1, Session: "s1", Time: 1700000000000},
		{ID: "a2.ai:abcdefghijklmnopqrstuvwxyz", Type: "ai.generation.progress", Payload: []byte(`{"chunks":[{"type":"text-delta","delta":"héllo"}]}`), Index: 1 << 40, Session: "sess/ü", Time: -1, Cause: "w1"},
		{ID: "x", Type: "t", Index: 7, Session: "s"},
	}
	var out [][]byte
	for i := range events {
		out = append(out, encodeEvent(nil, &events[i]))
	}
	out = append(out,
		encodeRef(nil, "s1", 42),
		encodeMeta(nil, 1<<33),
		encodeSnapshot(nil, &persistence.Snapshot{Session: "s1", Reducer: "a2.ai.state.v27", Index: 9, State: []byte(`{"messages":[]}`)}),
		// An event record with an unknown field 15 (a newer writer) and a
		// repeated index (the last one wins).
		append(encodeEvent(nil, &events[2]), 0x7a, 0x01, 'z', 0x20, 0x08),
	)
	return out
}

// FuzzDecodeRecord feeds arbitrary bytes to every record decoder: they must
// return an error or a value, never panic, and a decoded event must encode
// and decode back to itself.
func FuzzDecodeRecord(f *testing.F) {
	for _, b := range recordSamples() {
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if e, err := decodeEvent(b); err == nil {
			again, err := decodeEvent(encodeEvent(nil, &e))
			if err != nil {
				t.Fatalf("re-decoding %+v: %v", e, err)
			}
			if !sameEventList([]protocol.Event{again}, []protocol.Event{e}) {
				t.Fatalf("round trip changed %+v into %+v", e, again)
			}
		}
		_, _ = decodeRef(b)
		_, _ = decodeMeta(b)
		if s, err := decodeSnapshot(b); err == nil {
			again, err := decodeSnapshot(encodeSnapshot(nil, &s))
			if err != nil || again.Session != s.Session || again.Reducer != s.Reducer || again.Index != s.Index || !bytes.Equal(again.State, s.State) {
				t.Fatalf("snapshot round trip: %+v -> %+v, %v", s, again, err)
			}
		}
		_ = describeKey(b)
	})
}

func TestRecordRoundTrip(t *testing.T) {
	e := protocol.Event{ID: "e1", Type: "t", Payload: []byte(` {"a": 1} `), Index: 3, Session: "s", Time: 5, Cause: "c"}
	got, err := decodeEvent(encodeEvent([]byte("prefix"), &e)[len("prefix"):])
	if err != nil || !sameEventList([]protocol.Event{got}, []protocol.Event{e}) {
		t.Fatalf("round trip of %+v = %+v, %v", e, got, err)
	}
	// Unknown fields are skipped and a repeated scalar keeps its last value.
	samples := recordSamples()
	withUnknown, err := decodeEvent(samples[len(samples)-1])
	if err != nil || withUnknown.Index != 8 || withUnknown.ID != "x" {
		t.Fatalf("record with an unknown field and a repeated index = %+v, %v; want index 8", withUnknown, err)
	}
	for _, bad := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "no id"},
		{"wrong wire type", []byte{0x08, 0x01}, "wire type"},
		{"truncated length", []byte{0x0a, 0x05, 'a'}, "field 1"},
		{"invalid UTF-8 ID", []byte{0x0a, 0x01, 0xff}, "UTF-8"},
		{"no index", encodeEvent(nil, &protocol.Event{ID: "a", Session: "s"}), "no index"},
	} {
		if _, err := decodeEvent(bad.b); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: decodeEvent error %v, want one mentioning %q", bad.name, err, bad.want)
		}
	}
}

func TestKeysOrderByIndexAndSeparateSessions(t *testing.T) {
	if bytes.Compare(logKey("s", 255), logKey("s", 256)) >= 0 || bytes.Compare(logKey("s", 1), logKey("s", 1<<63)) >= 0 {
		t.Fatal("log keys of one session do not sort by index")
	}
	// "s" and "s\x00..." must not share a prefix range.
	p := logPrefix("s")
	for _, other := range []string{"s\x00", "s1", "ss"} {
		if k := logKey(other, 1); bytes.HasPrefix(k, p) {
			t.Fatalf("log key of %q has the prefix of session \"s\"", other)
		}
	}
	if !bytes.Equal(prefixEnd([]byte{'a', 0xff}), []byte{'b'}) || prefixEnd([]byte{0xff}) != nil {
		t.Fatal("prefixEnd")
	}
}

func TestSnapshotRetention(t *testing.T) {
	ctx := t.Context()
	for _, keep := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("retention=%d", keep), func(t *testing.T) {
			s, err := Open("db", Options{FS: vfs.NewMem(), SnapshotRetention: keep, Logger: testLogger{t}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if keep == 0 {
				keep = defaultSnapshotRetention
			}
			for _, idx := range []uint64{5, 1, 9, 7, 3, 11, 2} {
				for _, r := range []string{"r1", "r2"} {
					if err := s.SaveSnapshot(ctx, persistence.Snapshot{Session: "s", Reducer: r, Index: idx, State: fmt.Appendf(nil, "%s@%d", r, idx)}); err != nil {
						t.Fatal(err)
					}
				}
			}
			want := []uint64{11, 9, 7, 5, 3, 2, 1}[:keep]
			for _, r := range []string{"r1", "r2"} {
				got := snapshotIndexes(t, s, "s", r)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("reducer %s keeps snapshots %v, want %v", r, got, want)
				}
			}
		})
	}
}

// snapshotIndexes lists the stored snapshot indexes of (session, reducer),
// newest first.
func snapshotIndexes(t *testing.T, s *Store, session, reducer string) []uint64 {
	prefix := snapshotPrefix(session, reducer)
	iter, err := s.db.NewIter(&pebbledb.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	defer iter.Close()
	var out []uint64
	for valid := iter.Last(); valid; valid = iter.Prev() {
		idx, err := keyIndex(iter.Key(), len(prefix))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, idx)
	}
	return out
}

// TestSessionCacheEviction runs appends over more sessions than the cache
// holds: evicted sessions reload their last index and keep fencing.
func TestSessionCacheEviction(t *testing.T) {
	ctx := t.Context()
	s, err := Open("db", Options{FS: vfs.NewMem(), SessionCacheSize: 2, Logger: testLogger{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for round := range 3 {
		for i := range 10 {
			session := fmt.Sprintf("s%d", i)
			if _, err := s.Append(ctx, session, uint64(round), []protocol.Event{{ID: fmt.Sprintf("%s-%d", session, round), Type: "t"}}); err != nil {
				t.Fatalf("round %d %s: %v", round, session, err)
			}
			if _, err := s.Append(ctx, session, uint64(round), []protocol.Event{{ID: fmt.Sprintf("%s-%d-stale", session, round), Type: "t"}}); !errors.Is(err, persistence.ErrIndexConflict) {
				t.Fatalf("round %d %s: stale append: %v", round, session, err)
			}
		}
		s.sessions.mu.Lock()
		cached := len(s.sessions.m)
		s.sessions.mu.Unlock()
		if cached > 3 {
			t.Fatalf("%d sessions cached, want at most the limit of 2 plus the one just released", cached)
		}
	}
}

func TestOpenRefusesAnotherFormat(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("db", Options{FS: fs, Logger: testLogger{t}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set(formatKey, []byte{formatVersion + 1}, pebbledb.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open("db", Options{FS: fs, Logger: testLogger{t}}); err == nil || !strings.Contains(err.Error(), "format version 2") {
		t.Fatalf("Open of a version-2 store: %v, want a format version error", err)
	}
}
