package pebble

import (
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/persistence/storetest"
)

// TestConformance runs the Store conformance suite on Pebble's in-memory
// filesystem and on a temporary directory of the real one.
func TestConformance(t *testing.T) {
	t.Run("mem", func(t *testing.T) {
		storetest.Run(t, factory(func(t *testing.T) (vfs.FS, string) { return vfs.NewMem(), "db" }, Options{}))
	})
	t.Run("dir", func(t *testing.T) {
		storetest.Run(t, factory(func(t *testing.T) (vfs.FS, string) { return vfs.Default, t.TempDir() }, Options{}))
	})
	// Without the ID filter every duplicate check is a Pebble lookup.
	t.Run("mem-no-id-filter", func(t *testing.T) {
		storetest.Run(t, factory(func(t *testing.T) (vfs.FS, string) { return vfs.NewMem(), "db" }, Options{IDFilterBitsPerKey: -1}))
	})
}

// factory opens each store with opts at a new location from where, and
// reopens it at the same location.
func factory(where func(t *testing.T) (vfs.FS, string), opts Options) storetest.Factory {
	type location struct {
		fs  vfs.FS
		dir string
	}
	var mu sync.Mutex
	locations := map[persistence.Store]location{}
	open := func(t *testing.T, loc location) persistence.Store {
		o := opts
		o.FS, o.Logger = loc.fs, testLogger{t}
		s, err := Open(loc.dir, o)
		if err != nil {
			t.Fatalf("Open(%s): %v", loc.dir, err)
		}
		mu.Lock()
		locations[s] = loc
		mu.Unlock()
		return s
	}
	return storetest.Factory{
		Open: func(t *testing.T) persistence.Store {
			fs, dir := where(t)
			return open(t, location{fs, dir})
		},
		Reopen: func(t *testing.T, closed persistence.Store) persistence.Store {
			mu.Lock()
			loc, ok := locations[closed]
			mu.Unlock()
			if !ok {
				t.Fatal("Reopen of a store this factory did not open")
			}
			return open(t, loc)
		},
	}
}

// testLogger sends Pebble's log lines to the test log.
type testLogger struct{ t testing.TB }

func (l testLogger) Infof(format string, args ...any)  {}
func (l testLogger) Errorf(format string, args ...any) { l.t.Logf("pebble: "+format, args...) }
func (l testLogger) Fatalf(format string, args ...any) { l.t.Logf("pebble fatal: "+format, args...) }
