package testutil

import (
	"fmt"
	"os"
)

// QuietPebble is a Pebble logger for tests: it drops Pebble's
// informational lines ("Found 0 WALs", compaction notes), prints its
// errors to stderr, and panics on a fatal one (the test fails with the
// stack).
type QuietPebble struct{}

func (QuietPebble) Infof(string, ...any) {}

func (QuietPebble) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
}

func (QuietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
