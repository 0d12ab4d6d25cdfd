package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	const gib = int64(1) << 30
	for _, tc := range []struct {
		name      string
		env       map[string]string
		available int64
		want      Settings
	}{
		{"defaults on a known machine", nil, 24 * gib, Settings{Percent: DefaultPercent, Limit: 18 * gib, Headroom: DefaultHeadroom}},
		{"memory unknown: nothing changes", nil, 0, Settings{}},
		{"the operator's GOGC stays", map[string]string{"GOGC": "100"}, 24 * gib, Settings{Limit: 18 * gib}},
		{"GOGC=off stays, with a limit behind it", map[string]string{"GOGC": "off"}, 8 * gib, Settings{Limit: 6 * gib}},
		{"the operator's GOMEMLIMIT stays", map[string]string{"GOMEMLIMIT": "4GiB"}, 24 * gib, Settings{Percent: DefaultPercent, Headroom: DefaultHeadroom}},
		{"GOMEMLIMIT without known memory", map[string]string{"GOMEMLIMIT": "4GiB"}, 0, Settings{Percent: DefaultPercent, Headroom: DefaultHeadroom}},
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

func TestPercentFor(t *testing.T) {
	const mib = uint64(1) << 20
	for _, tc := range []struct {
		live, headroom uint64
		most, want     int
	}{
		{0, 256 * mib, 800, 800},          // nothing measured yet
		{10 * mib, 256 * mib, 800, 800},   // a small heap keeps the whole goal
		{32 * mib, 256 * mib, 800, 800},   // exactly 8 x live
		{33 * mib, 256 * mib, 800, 775},   // just past it
		{64 * mib, 256 * mib, 800, 400},   // the headroom binds
		{128 * mib, 256 * mib, 800, 200},  //
		{256 * mib, 256 * mib, 800, 100},  // the floor
		{1024 * mib, 256 * mib, 800, 100}, // never under the floor
		{1024 * mib, 256 * mib, 50, 50},   // a goal under the floor stays
		{1 << 62, 3 << 61, 800, 150},      // no overflow
		{1, 1 << 63, 800, 800},            //
	} {
		if got := PercentFor(tc.live, tc.headroom, tc.most); got != tc.want {
			t.Errorf("PercentFor(%d, %d, %d) = %d, want %d", tc.live, tc.headroom, tc.most, got, tc.want)
		}
	}
}

// gogc reads the heap goal the runtime runs with.
func gogc(t *testing.T) int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Fatalf("%s not supported", s[0].Name)
	}
	return int(s[0].Value.Uint64())
}

// collectAndWait runs a collection and waits until the finalizers it
// queued have run: those queued with a sentinel of its own, twice over.
func collectAndWait(t *testing.T) {
	for range 2 {
		done := make(chan struct{})
		runtime.SetFinalizer(&struct{ p *int }{}, func(*struct{ p *int }) { close(done) })
		deadline := time.After(10 * time.Second)
		for ran := false; !ran; {
			runtime.GC()
			select {
			case <-done:
				ran = true
			case <-time.After(10 * time.Millisecond):
			case <-deadline:
				t.Fatal("no finalizer ran within 10 s of collections")
			}
		}
	}
}

// With a headroom, the heap goal follows the live heap after each
// collection, and restore ends that.
func TestHeadroomFollowsTheLiveHeap(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	live := make([]byte, 32<<20) // 32 MiB live, 4 MiB of headroom: 12.5% -> the floor
	for i := range live {
		live[i] = byte(i)
	}
	restore := Apply(Settings{Percent: 800, Headroom: 4 << 20})
	if got := gogc(t); got != 800 {
		t.Fatalf("heap goal %d%% before a collection, want 800%%", got)
	}
	collectAndWait(t)
	if got := gogc(t); got != MinPercent {
		t.Fatalf("heap goal %d%% after a collection with 32 MiB live and 4 MiB of headroom, want %d%%", got, MinPercent)
	}
	runtime.KeepAlive(live)
	live = nil
	// The test's own heap is well under 4 MiB: the goal rises again.
	collectAndWait(t)
	if got := gogc(t); got <= MinPercent {
		t.Fatalf("heap goal %d%% after the 32 MiB were freed, want it above %d%%", got, MinPercent)
	}
	restore()
	if got := gogc(t); got != 100 {
		t.Fatalf("heap goal %d%% after restore, want 100%%", got)
	}
	debug.SetGCPercent(321)
	collectAndWait(t)
	if got := gogc(t); got != 321 {
		t.Fatalf("heap goal %d%% after restore and a collection, want the 321%% set after restore", got)
	}
}
