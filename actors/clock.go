package actors

import "time"

// clock is the time the session actor's write batching reads and waits on
// (the flush decision's now, a generation's start and finish, the holds and
// the progress delay). The runtime's is the system clock; the timing
// transcripts (transcript_test.go) drive one by hand.
type clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func())
}

type systemClock struct{}

func (systemClock) Now() time.Time                      { return time.Now() }
func (systemClock) AfterFunc(d time.Duration, f func()) { time.AfterFunc(d, f) }
