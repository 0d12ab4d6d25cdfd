package actors

import "time"

// The flush decision: whether the session actor starts its next write now,
// or waits, and until when. It is the batching policy alone, a pure
// function of what is waiting and the time, so that a table test states it
// (flush_test.go); tryFlush gathers the inputs, acts on the verdict and
// does the I/O.

// flushInput is what the decision reads, at one moment.
type flushInput struct {
	now time.Time
	// queued counts the pushes, lane events and work events waiting to be
	// written (the actor's queue and work queue).
	queued int
	lanes  []laneFlush
	// maxDelay and maxChunks are the agent's progress policy
	// (ProgressOptions.MaxDelayMs, MaxChunks); lastWrite is when the
	// previous write started.
	maxDelay  time.Duration
	maxChunks int
	lastWrite time.Time
}

// laneFlush is what the decision reads of one lane.
type laneFlush struct {
	chunks   int  // model chunks waiting
	boundary bool // a boundary chunk among them
	ended    bool // the lane's end (its generation's terminal event) is here
	pre      int  // events the lane reported before its chunks (a compaction's request)
	// started: the generation's start is waiting to be written, reported at
	// startedAt; finishedAt: the model's finish chunk came (zero: not yet).
	started    bool
	startedAt  time.Time
	finishedAt time.Time
}

// flushVerdict says what to do: write now, or look again at wake (zero:
// only when a message comes). tick says that wake is the end of the
// progress delay (a flushTick), not of a hold (a holdTick).
type flushVerdict struct {
	write bool
	wake  time.Time
	tick  bool
}

// decideFlush is the batching policy of the session actor's writes:
//   - A step whose finish chunk came has its end on the way (the lane sends
//     it once the model's stream returns EOF): its chunks wait for it up to
//     startHold after the finish, so that a step's last chunks and its end
//     are one write, not two.
//   - A generation's start alone waits up to startHold for the lane's next
//     report: a model that answers at once has its start, progress and end
//     written together; one that does not is shown running a few
//     milliseconds later. Events a lane reports before its chunks (a
//     compaction's request) are written at once, so that a client sees a
//     running compaction while its summary request is in flight.
//   - Anything else waiting (a push, a command, a tool's result, a lane's
//     end, chunks) is written now, except that with a progress delay
//     (maxDelay > 0) a batch of progress alone waits until maxDelay after
//     the previous write, unless it holds a boundary chunk or maxChunks
//     chunks (R-PROGRESS-03).
func decideFlush(in flushInput) flushVerdict {
	chunks, boundary, events, ended := 0, false, false, false
	var hold time.Time // the earliest end of a hold
	holdUntil := func(t time.Time) {
		if hold.IsZero() || t.Before(hold) {
			hold = t
		}
	}
	for _, l := range in.lanes {
		ended = ended || l.ended
		if !l.ended && !l.finishedAt.IsZero() && l.pre == 0 {
			if until := l.finishedAt.Add(startHold); in.now.Before(until) {
				holdUntil(until)
				continue
			}
		}
		chunks += l.chunks
		boundary = boundary || l.boundary || l.ended
		events = events || l.pre > 0
		if l.started {
			if until := l.startedAt.Add(startHold); l.chunks > 0 || l.ended || !in.now.Before(until) {
				events = true
			} else {
				holdUntil(until)
			}
		}
	}
	boundary = boundary || events
	if in.queued == 0 && chunks == 0 && !events && !ended {
		return flushVerdict{wake: hold}
	}
	if in.maxDelay > 0 && in.queued == 0 && !boundary && chunks < in.maxChunks {
		if at := in.lastWrite.Add(in.maxDelay); in.now.Before(at) {
			return flushVerdict{wake: at, tick: true}
		}
	}
	return flushVerdict{write: true}
}
