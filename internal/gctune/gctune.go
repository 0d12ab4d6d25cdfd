// Package gctune holds the garbage-collector settings a node runs with.
//
// A session runtime streams small chunks through several goroutines and
// allocates as it goes; with Go's default heap goal (GOGC=100) the collector
// runs about once a second at 1,000 concurrent streams on two cores, and its
// mark phases (25-50 ms) hold up the chunks in flight: they set the p99 of
// chunk-to-subscriber latency (docs/benchmarks.md,
// "The 1,000-stream p99 within the bound"). A node
// therefore collects less often, with a heap goal of DefaultPercent, and
// caps its heap with a memory limit of LimitFraction of the memory it may
// use, so that the larger goal never costs more memory than the machine
// has: near the limit the collector runs as often as it must.
//
// GOGC and GOMEMLIMIT, when set, are the operator's and stay as they are.
package gctune

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

const (
	// DefaultPercent is the heap goal a node sets when GOGC is not set:
	// the heap may grow to 9 times what is live before a collection.
	DefaultPercent = 800
	// LimitFraction is the share of the memory available to the process
	// (its cgroup's limit, or the machine's memory) a node sets as its soft
	// memory limit when GOMEMLIMIT is not set.
	LimitFraction = 0.75
)

// Settings are collector settings; a zero field leaves that setting as it is.
type Settings struct {
	Percent int   // debug.SetGCPercent
	Limit   int64 // debug.SetMemoryLimit, in bytes
}

// Decide returns the settings a node applies, given its environment and
// the memory available to it in bytes (0: unknown). Without a known amount
// of memory it changes nothing: a larger heap goal is safe only with a
// memory limit behind it, unless the operator set one (GOMEMLIMIT).
func Decide(getenv func(string) string, available int64) Settings {
	var s Settings
	userLimit := getenv("GOMEMLIMIT") != ""
	if !userLimit && available > 0 {
		s.Limit = int64(float64(available) * LimitFraction)
	}
	if getenv("GOGC") == "" && (userLimit || s.Limit > 0) {
		s.Percent = DefaultPercent
	}
	return s
}

// Apply applies s and returns a function that restores what was there.
func Apply(s Settings) (restore func()) {
	percent, limit := -2, int64(-1)
	if s.Percent != 0 {
		percent = debug.SetGCPercent(s.Percent)
	}
	if s.Limit > 0 {
		limit = debug.SetMemoryLimit(s.Limit)
	}
	return func() {
		if percent != -2 {
			debug.SetGCPercent(percent)
		}
		if limit >= 0 {
			debug.SetMemoryLimit(limit)
		}
	}
}

// ForNode decides and applies a node's settings from the process's
// environment and memory; see Decide.
func ForNode() (Settings, func()) {
	s := Decide(os.Getenv, Available())
	return s, Apply(s)
}

// Available is the memory available to the process in bytes: its cgroup's
// memory limit (cgroup v2) when it has one, else the machine's memory; 0
// when neither can be read.
func Available() int64 {
	total := int64(0)
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		total = memTotal(string(b))
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if limit := cgroupMax(string(b)); limit > 0 && (total == 0 || limit < total) {
			return limit
		}
	}
	return total
}

// memTotal reads MemTotal from the text of /proc/meminfo, in bytes; 0 if
// it is not there.
func memTotal(meminfo string) int64 {
	for line := range strings.Lines(meminfo) {
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb <= 0 || kb > 1<<43 {
			return 0
		}
		return kb << 10
	}
	return 0
}

// cgroupMax reads a cgroup v2 memory.max file: a number of bytes, or "max"
// (no limit: 0).
func cgroupMax(s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}
