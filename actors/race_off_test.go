//go:build !race

package actors

// raceEnabled is true under the race detector.
const raceEnabled = false
