//go:build race

package actors

// raceEnabled is true under the race detector, whose instrumentation makes
// heap figures meaningless.
const raceEnabled = true
