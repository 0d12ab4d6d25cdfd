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

// TestIDFilterFirstLayer: the store's first live layer holds a million
// IDs, so that a few hundred thousand appended IDs stay in one layer with
// few false positives, where layers grown from 4,096 each add their own
// (idFilterFirstLayer).
func TestIDFilterFirstLayer(t *testing.T) {
	const n, probes = 300_000, 100_000
	rate := func(first int) (float64, int) {
		f := newIDFilter(10, first)
		for i := range n {
			f.add(fmt.Sprintf("id-%d", i))
		}
		fp := 0
		for i := range probes {
			if f.mayContain(fmt.Sprintf("other-%d", i)) {
				fp++
			}
		}
		return float64(fp) / probes, len(f.layers)
	}
	big, bigLayers := rate(idFilterFirstLayer)
	small, smallLayers := rate(1 << 12)
	t.Logf("%d IDs: first layer of a million: %d layers, %.4f false positives; of 4,096: %d layers, %.4f", n, bigLayers, big, smallLayers, small)
	if bigLayers != 1 || big > 0.005 {
		t.Errorf("from a first layer of a million, %d IDs took %d layers and %.4f false positives, want one layer and under 0.5%%", n, bigLayers, big)
	}
	if small < 2*big || small < 0.01 {
		t.Errorf("layers grown from 4,096 gave %.4f false positives, not clearly more than %.4f: the first layer's size does not matter", small, big)
	}
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
