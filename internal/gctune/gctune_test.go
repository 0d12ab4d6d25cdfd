package gctune

import (
	"os"
	"runtime/debug"
	"testing"
)

func TestDecide(t *testing.T) {
	const gib = int64(1) << 30
	for _, tc := range []struct {
		name      string
		env       map[string]string
		available int64
		want      Settings
	}{
		{"defaults on a known machine", nil, 24 * gib, Settings{Percent: DefaultPercent, Limit: 18 * gib}},
		{"memory unknown: nothing changes", nil, 0, Settings{}},
		{"the operator's GOGC stays", map[string]string{"GOGC": "100"}, 24 * gib, Settings{Limit: 18 * gib}},
		{"GOGC=off stays, with a limit behind it", map[string]string{"GOGC": "off"}, 8 * gib, Settings{Limit: 6 * gib}},
		{"the operator's GOMEMLIMIT stays", map[string]string{"GOMEMLIMIT": "4GiB"}, 24 * gib, Settings{Percent: DefaultPercent}},
		{"GOMEMLIMIT without known memory", map[string]string{"GOMEMLIMIT": "4GiB"}, 0, Settings{Percent: DefaultPercent}},
		{"both set: nothing changes", map[string]string{"GOGC": "200", "GOMEMLIMIT": "4GiB"}, 24 * gib, Settings{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(func(k string) string { return tc.env[k] }, tc.available)
			if got != tc.want {
				t.Fatalf("Decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestApplyRestores(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	limitBefore := debug.SetMemoryLimit(-1)
	restore := Apply(Settings{Percent: 123, Limit: 1 << 40})
	if got := debug.SetGCPercent(123); got != 123 {
		t.Errorf("GC percent %d after Apply, want 123", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 1<<40 {
		t.Errorf("memory limit %d after Apply, want %d", got, int64(1)<<40)
	}
	restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent %d after restore, want 100", got)
	}
	if got := debug.SetMemoryLimit(-1); got != limitBefore {
		t.Errorf("memory limit %d after restore, want %d", got, limitBefore)
	}
	// A zero Settings changes nothing.
	Apply(Settings{})()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent %d after an empty Apply, want 100", got)
	}
}

func TestMemTotal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"MemTotal:       24590764 kB\nMemFree:        1000 kB\n", 24590764 << 10},
		{"MemFree:        1000 kB\nMemTotal: 2048 kB", 2048 << 10},
		{"MemFree:        1000 kB\n", 0},
		{"MemTotal:       many kB\n", 0},
		{"MemTotal:       2048 MB\n", 0},
		{"MemTotal:       -5 kB\n", 0},
		{"MemTotal:\n", 0},
		{"", 0},
	} {
		if got := memTotal(tc.in); got != tc.want {
			t.Errorf("memTotal(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestCgroupMax(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"max\n", 0},
		{"1073741824\n", 1 << 30},
		{"0\n", 0},
		{"", 0},
		{"12abc", 0},
	} {
		if got := cgroupMax(tc.in); got != tc.want {
			t.Errorf("cgroupMax(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestAvailableReadsThisMachine(t *testing.T) {
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		t.Skipf("no /proc/meminfo here (%v): Available reads Linux's; run on Linux", err)
	}
	if got := Available(); got <= 0 {
		t.Fatalf("Available = %d with /proc/meminfo present", got)
	}
}
