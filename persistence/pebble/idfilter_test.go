package pebble

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// TestIDFilterHasNoFalseNegatives adds IDs past several layer doublings and
// checks that every added ID is reported, and that unknown IDs mostly are
// not (the filter must actually spare lookups).
func TestIDFilterHasNoFalseNegatives(t *testing.T) {
	f := newIDFilter(10, 1000)
	const n = 50_000
	for i := range n {
		f.add(fmt.Sprintf("id-%d", i))
	}
	if len(f.layers) < 3 {
		t.Fatalf("%d layers after %d IDs from a capacity of 4096, want growth", len(f.layers), n)
	}
	for i := range n {
		if id := fmt.Sprintf("id-%d", i); !f.mayContain(id) {
			t.Fatalf("false negative for %q", id)
		}
	}
	fp := 0
	for i := range n {
		if f.mayContain(fmt.Sprintf("other-%d", i)) {
			fp++
		}
	}
	// About 1% per layer; allow generous slack, but far from "always maybe".
	if rate := float64(fp) / n; rate > 0.05 {
		t.Fatalf("false-positive rate %.3f over %d layers", rate, len(f.layers))
	}
	t.Logf("%d layers, false-positive rate %.4f", len(f.layers), float64(fp)/n)
}

// TestIDFilterIsFilledOnReopen appends, reopens, waits for the background
// scan, and checks that every stored ID is in the filter and that
// duplicates are still recognised through it.
func TestIDFilterIsFilledOnReopen(t *testing.T) {
	ctx := t.Context()
	fs := vfs.NewMem()
	s, err := Open("db", Options{FS: fs, Logger: testLogger{t}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for b := range 20 {
		batch := make([]protocol.Event, 500)
		for i := range batch {
			batch[i] = protocol.Event{ID: fmt.Sprintf("id-%d-%d", b, i), Type: "t", Payload: []byte(`{}`)}
			ids = append(ids, batch[i].ID)
		}
		if _, err := s.Append(ctx, "s", uint64(b*500), batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open("db", Options{FS: fs, Logger: testLogger{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !s.ids.ready.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the ID scan did not finish in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	for _, id := range ids {
		if !s.ids.mayContain(id) {
			t.Fatalf("stored ID %q is not in the filter after reopening", id)
		}
	}
	got, err := s.Append(ctx, "s", 0, []protocol.Event{{ID: "id-3-7", Type: "t", Payload: []byte(`{}`)}})
	if err != nil || len(got) != 1 || got[0].Index != 3*500+8 {
		t.Fatalf("replay through the filter = %v, %v", got, err)
	}
	if _, err := s.Append(ctx, "other", 0, []protocol.Event{{ID: "id-19-499", Type: "t", Payload: []byte(`{}`)}}); !errors.Is(err, persistence.ErrPartialDuplicateBatch) {
		t.Fatalf("reuse in another session through the filter: %v, want ErrPartialDuplicateBatch", err)
	}
}
