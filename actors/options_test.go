package actors

import (
	"testing"
	"time"
)

// The runtime's option defaults are the documented ones, and explicit
// values are kept (mutants runtime.go:63, 67 of the session-9 run).
func TestRuntimeOptionDefaults(t *testing.T) {
	d := Options{}.withDefaults()
	if d.SnapshotEvery != 1000 || d.SnapshotBytes != 4<<20 || d.PassivateAfter != 2*time.Minute || d.RequestTimeout != 30*time.Second {
		t.Fatalf("defaults %+v", d)
	}
	set := Options{SnapshotEvery: 5, SnapshotBytes: 7, PassivateAfter: time.Second, RequestTimeout: 3 * time.Second}.withDefaults()
	if set.SnapshotEvery != 5 || set.SnapshotBytes != 7 || set.PassivateAfter != time.Second || set.RequestTimeout != 3*time.Second {
		t.Fatalf("explicit options were not kept: %+v", set)
	}
}

// An application handler's retries wait 100 ms after the first failure,
// doubling up to 30 s (docs/protocol.md §3.17; mutants handlers.go:60, 61).
func TestHandlerBackoffIsTheDocumentedOne(t *testing.T) {
	if handlerBackoff != 100*time.Millisecond || handlerMaxBackoff != 30*time.Second {
		t.Fatalf("handler backoff %v up to %v, want 100ms up to 30s", handlerBackoff, handlerMaxBackoff)
	}
}
