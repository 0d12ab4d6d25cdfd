package pebble

import (
	"context"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// A store written before the work index existed (its format key without
// the index's completeness mark) reads as incomplete until a full scan
// marks it, so that the start-up scan does not trust an index that misses
// its sessions.
func TestWorkIndexOfAnOlderStoreIsIncomplete(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	s, err := Open("db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "s1", 0, []protocol.Event{{ID: "a", Type: "t", Payload: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	// What a store of the previous build looks like: no mark.
	if err := s.db.Delete(workCompleteKey, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open("db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if done, err := s.WorkIndexComplete(ctx); err != nil || done {
		t.Fatalf("WorkIndexComplete of an older store = %v, %v; want false", done, err)
	}
	if err := s.MarkWorkIndexComplete(ctx); err != nil {
		t.Fatal(err)
	}
	if done, err := s.WorkIndexComplete(ctx); err != nil || !done {
		t.Fatalf("WorkIndexComplete after the mark = %v, %v", done, err)
	}
}

// A batch and the append that must precede it (a session's first batch and
// its ownership claim) are one synced write when both are new; when the
// preceding append replays, the batch is written alone; when it conflicts,
// its Check's error is the batch's and nothing of the batch is written;
// when the batch conflicts, the preceding append is written alone; a
// preceding append to the batch's own session is refused (mutants: the two
// committed one after the other; the batch written after a refused check;
// the preceding append dropped when the batch conflicts).
func TestAppendPrecededAsync(t *testing.T) {
	ctx := context.Background()
	ev := func(id string) []protocol.Event {
		return []protocol.Event{{ID: id, Type: "t", Payload: []byte(`{"n":1}`)}}
	}
	refused := errors.New("refused by the check")
	check := func(_ []protocol.Event, err error) error {
		if errors.Is(err, persistence.ErrPartialDuplicateBatch) {
			return refused
		}
		return err
	}
	for _, c := range []struct {
		name      string
		before    func(s *Store) // what the store holds first
		session   string
		expected  uint64
		wantErr   error
		wantPre   int // events in the preceding log afterwards
		wantBatch int // events in the batch's log afterwards
		wantSyncs uint64
	}{
		{name: "both new", session: "s1", wantPre: 1, wantBatch: 1, wantSyncs: 1},
		{name: "the preceding append replays", before: func(s *Store) { mustAppend(t, s, "owner", ev("claim")) },
			session: "s1", wantPre: 1, wantBatch: 1, wantSyncs: 1},
		{name: "the preceding append conflicts", before: func(s *Store) { mustAppend(t, s, "elsewhere", ev("claim")) },
			session: "s1", wantErr: refused, wantPre: 0, wantBatch: 0},
		{name: "the batch conflicts", before: func(s *Store) { mustAppend(t, s, "s1", ev("first")) },
			session: "s1", expected: 0, wantErr: persistence.ErrIndexConflict, wantPre: 1, wantBatch: 1, wantSyncs: 1},
		{name: "its own session", session: "owner", wantErr: persistence.ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := Open("db", Options{FS: vfs.NewMem()})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if c.before != nil {
				c.before(s)
			}
			m, err := s.Metrics()
			if err != nil {
				t.Fatal(err)
			}
			syncs := fsyncCount(m)
			res := make(chan error, 1)
			pre := persistence.Preceding{Session: "owner", Events: ev("claim"), Check: check}
			s.Append(ctx, c.session, c.expected, ev("batch"), persistence.Preceded(pre), persistence.Async(func(_ []protocol.Event, err error) { res <- err }))
			if err := <-res; !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, c.wantErr)
			}
			if c.session == "owner" {
				if got, _ := s.Read(ctx, "owner", 0, 10); len(got) != 0 {
					t.Fatalf("the refused append wrote %v", got)
				}
				return
			}
			if got, _ := s.Read(ctx, "owner", 0, 10); len(got) != c.wantPre {
				t.Fatalf("the preceding log holds %d events, want %d", len(got), c.wantPre)
			}
			if got, _ := s.Read(ctx, "s1", 0, 10); len(got) != c.wantBatch {
				t.Fatalf("the batch's log holds %d events, want %d", len(got), c.wantBatch)
			}
			if m, err = s.Metrics(); err != nil {
				t.Fatal(err)
			}
			if got := fsyncCount(m) - syncs; got != c.wantSyncs {
				t.Fatalf("%d synced writes, want %d", got, c.wantSyncs)
			}
		})
	}
}

func mustAppend(t *testing.T, s *Store, session string, evs []protocol.Event) {
	t.Helper()
	if _, err := s.Append(context.Background(), session, 0, evs); err != nil {
		t.Fatal(err)
	}
}
