package pebble

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

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
