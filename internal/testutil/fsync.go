package testutil

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// MedianFsync is the median latency of a 256-byte write followed by fsync
// of a file in dir, over 200 of them: the baseline that durable latencies
// are stated against in the benchmarks (docs/benchmarks.md).
func MedianFsync(tb testing.TB, dir string) time.Duration {
	tb.Helper()
	f, err := os.Create(filepath.Join(dir, "fsync-probe"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	ds := make([]time.Duration, 0, 200)
	buf := make([]byte, 256)
	for range 200 {
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			tb.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			tb.Fatal(err)
		}
		ds = append(ds, time.Since(t))
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}
