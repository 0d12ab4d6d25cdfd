package pebble

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/protocol"
)

// openInMemory opens a store on Pebble's in-memory filesystem, closed
// when the test ends.
func openInMemory(t *testing.T) *Store {
	t.Helper()
	s, err := Open("db", Options{FS: vfs.NewMem(), Logger: testLogger{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func notes(prefix string, n int, payload string) []protocol.Event {
	out := make([]protocol.Event, n)
	for i := range out {
		out[i] = protocol.Event{ID: fmt.Sprintf("%s-%d", prefix, i+1), Type: "test.note", Payload: json.RawMessage(payload)}
	}
	return out
}

// A follower that starts within its session's latest events in memory
// (sessionState.recent) reads no log: it starts without lag, and its first
// Next returns exactly what the log holds after its start, with copies the
// appender cannot change. Once the session is no longer among the latest
// to append, or its batch was too large to keep, a follower reads the log
// as before, and gets the same events.
func TestAFollowerStartsFromTheRecentEvents(t *testing.T) {
	ctx := context.Background()
	s := openInMemory(t)
	var last uint64
	appendBatch := func(session string, batch []protocol.Event) {
		t.Helper()
		if session == "s" {
			out, err := s.Append(ctx, session, last, batch)
			if err != nil {
				t.Fatal(err)
			}
			last = out[len(out)-1].Index
			return
		}
		if _, err := s.Append(ctx, session, 0, batch); err != nil {
			t.Fatal(err)
		}
	}
	first := notes("a", 3, `{"n":1}`)
	appendBatch("s", first)
	appendBatch("s", notes("b", 2, `{"n":2}`))
	appendBatch("s", notes("c", 4, `{"n":3}`))
	copy(first[0].Payload, `{"n":9}`) // the appender's memory, changed after the append

	follow := func(what string, after uint64, lagged bool) {
		t.Helper()
		tail, err := s.Follow("s", after)
		if err != nil {
			t.Fatal(err)
		}
		defer tail.Close()
		f := tail.(*follower)
		if f.lagged.Load() != lagged {
			t.Fatalf("%s: a follower after %d starts lagged=%v, want %v", what, after, f.lagged.Load(), lagged)
		}
		want, err := s.Read(ctx, "s", after, 100)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tail.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: after %d the follower got %d events, the log holds %d", what, after, len(got), len(want))
		}
		for i := range got {
			if got[i].Index != want[i].Index || got[i].ID != want[i].ID || string(got[i].Payload) != string(want[i].Payload) {
				t.Fatalf("%s: event %d is %d %s %s, the log's %d %s %s", what, i, got[i].Index, got[i].ID, got[i].Payload, want[i].Index, want[i].ID, want[i].Payload)
			}
		}
	}
	for after := uint64(0); after < last; after++ {
		follow("in memory", after, false)
	}
	// A batch too large to keep: the log is read.
	appendBatch("s", notes("d", 1, `{"text":"`+strings.Repeat("x", recentBytes)+`"}`))
	follow("after a large batch", last-1, true)
	appendBatch("s", notes("e", 2, `{"n":4}`))
	follow("after the large batch", last-2, false)
	// recentSlots other sessions append: s's recent events go.
	for i := range recentSlots {
		appendBatch(fmt.Sprintf("o%d", i), notes(fmt.Sprintf("o%d", i), 1, `{}`))
	}
	follow("after other sessions appended", last-2, true)
	// At the end of the log, a follower waits for what comes.
	tail, err := s.Follow("s", last)
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	if tail.(*follower).lagged.Load() {
		t.Fatal("a follower at the end of the log starts lagged")
	}
	appendBatch("s", notes("f", 1, `{"n":5}`))
	got, err := tail.Next(ctx)
	if err != nil || len(got) != 1 || got[0].Index != last {
		t.Fatalf("a follower at the end got %v, %v; want event %d", got, err, last)
	}
}

// The recent events slide along their array as batches come (one
// allocation per window's worth, not per batch): what a follower was handed
// stays as it was while the window moves on, a follower that appends to
// what it was handed writes into memory of its own, and a follower that
// starts anywhere in the window gets what the log holds.
func TestTheRecentEventsSlideWithoutChangingWhatWasHandedOut(t *testing.T) {
	ctx := context.Background()
	s := openInMemory(t)
	var last uint64
	type held struct {
		events []protocol.Event
		want   []string // "index id payload" of each, when handed out
	}
	var holds []held
	describe := func(evs []protocol.Event) []string {
		out := make([]string, len(evs))
		for i, ev := range evs {
			out[i] = fmt.Sprintf("%d %s %s", ev.Index, ev.ID, ev.Payload)
		}
		return out
	}
	for b := range 200 {
		n := 1 + b%5
		out, err := s.Append(ctx, "s", last, notes(fmt.Sprintf("b%d", b), n, fmt.Sprintf(`{"batch":%d,"pad":"%s"}`, b, strings.Repeat("p", b%7*40))))
		if err != nil {
			t.Fatal(err)
		}
		last = out[len(out)-1].Index
		after := last - uint64(1+b%9)
		tail, err := s.Follow("s", after)
		if err != nil {
			t.Fatal(err)
		}
		if tail.(*follower).lagged.Load() {
			tail.Close()
			continue // the window no longer holds it: the log is read
		}
		got, err := tail.Next(ctx)
		tail.Close()
		if err != nil {
			t.Fatal(err)
		}
		want, err := s.Read(ctx, "s", after, 100)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := strings.Join(describe(got), "\n"), strings.Join(describe(want), "\n"); g != w {
			t.Fatalf("batch %d: a follower after %d got\n%s\nthe log holds\n%s", b, after, g, w)
		}
		// What it was handed, and what it appends to that.
		mine := append(got, protocol.Event{ID: "mine", Payload: json.RawMessage(`{}`)})
		holds = append(holds, held{events: got, want: describe(got)}, held{events: mine, want: describe(mine)})
	}
	if len(holds) < 200 {
		t.Fatalf("only %d of 200 followers started from the recent events", len(holds)/2)
	}
	for i, h := range holds {
		if g, w := strings.Join(describe(h.events), "\n"), strings.Join(h.want, "\n"); g != w {
			t.Fatalf("follower %d's events changed after it had them:\n%s\nwere\n%s", i, g, w)
		}
	}
}
