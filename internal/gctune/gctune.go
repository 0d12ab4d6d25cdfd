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
// The goal is also held to at most DefaultHeadroom bytes past the live heap
// (but never under MinPercent): a node whose sessions keep a few hundred MB
// live would otherwise grow its heap to several GB, and a young node spends
// its CPU faulting in and walking fresh memory. With 1,000 sessions in
// memory the 3-step turn cost 20 to 45% less CPU with the bound than with
// 800% alone, the more the longer the node ran, while a heap of tens of MB,
// such as the 1,000-stream run's, keeps the whole 800% (docs/benchmarks.md,
// "A heap goal bounded in bytes").
// The node applies the bound after each collection, from the live heap that
// collection found.
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
	// DefaultHeadroom is the most the heap may grow past its live bytes
	// before a collection, when the node sets the heap goal: the goal
	// follows the live heap down from DefaultPercent to MinPercent.
	DefaultHeadroom = 256 << 20
	// MinPercent is the lowest heap goal the headroom may bring: Go's
	// default.
	MinPercent = 100
	// LimitFraction is the share of the memory available to the process
	// (its cgroup's limit, or the machine's memory) a node sets as its soft
	// memory limit when GOMEMLIMIT is not set.
	LimitFraction = 0.75
)

// Settings are collector settings; a zero field leaves that setting as it is.
type Settings struct {
	Percent int   // debug.SetGCPercent: the heap goal (with a Headroom, its most)
	Limit   int64 // debug.SetMemoryLimit, in bytes
	// Headroom, when not zero, bounds the heap's growth past what is live
	// to this many bytes: after each collection the heap goal is set to
	// PercentFor(live, Headroom, Percent).
	Headroom int64
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
		s.Percent, s.Headroom = DefaultPercent, DefaultHeadroom
	}
	return s
}

// PercentFor is the heap goal, in percent of the live heap, that lets a
// heap of live bytes grow by at most headroom bytes before a collection,
// between MinPercent and most. With nothing live (not measured yet) it is
// most.
func PercentFor(live, headroom uint64, most int) int {
	if most <= MinPercent || live == 0 {
		return most
	}
	p := float64(headroom) / float64(live) * 100
	if p >= float64(most) {
		return most
	}
	return max(int(p), MinPercent)
}

// Apply applies s and returns a function that restores what was there.
// With a Headroom and a Percent, the heap goal follows the live heap from
// then on, set after each collection, until restore.
func Apply(s Settings) (restore func()) {
	percent, limit := -2, int64(-1)
	if s.Percent != 0 {
		percent = debug.SetGCPercent(s.Percent)
	}
	if s.Limit > 0 {
		limit = debug.SetMemoryLimit(s.Limit)
	}
	var f *follower
	if s.Percent > 0 && s.Headroom > 0 {
		f = follow(uint64(s.Headroom), s.Percent)
	}
	return func() {
		if f != nil {
			f.stop()
		}
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
