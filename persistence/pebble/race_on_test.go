//go:build race

package pebble

// raceEnabled is true when the test binary runs under the race detector,
// which slows the crash test about twentyfold; it then runs fewer seeds.
const raceEnabled = true
