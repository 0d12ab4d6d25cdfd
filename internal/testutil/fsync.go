package testutil

import (
	"os"
	"slices"
	"testing"
	"time"
)

// MedianFsync is the median latency of a 256-byte write followed by fsync
// of a file in dir, over 200 of them: the baseline that durable latencies
// are stated against in the benchmarks (docs/benchmarks.md).
func MedianFsync(tb testing.TB, dir string) time.Duration {
	tb.Helper()
	return Median(FsyncLatencies(tb, dir, 200))
}

// FsyncLatencies measures n writes of 256 bytes, each followed by fsync,
// appended to a file in dir.
func FsyncLatencies(tb testing.TB, dir string, n int) []time.Duration {
	tb.Helper()
	f, err := os.CreateTemp(dir, "fsync-probe-*")
	if err != nil {
		tb.Fatal(err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	ds := make([]time.Duration, 0, n)
	buf := make([]byte, 256)
	for range n {
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			tb.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			tb.Fatal(err)
		}
		ds = append(ds, time.Since(t))
	}
	return ds
}

// Median is the median of ds (0 for none); ds is left as it was.
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
