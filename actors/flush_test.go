package actors

import (
	"testing"
	"time"
)

// TestDecideFlush states the session actor's batching policy as a table:
// what is waiting, the time, and what the actor does (write now, or look
// again at a hold's or the progress delay's end). tryFlush acts on the
// verdict; the runtime tests (progress_test.go, behaviour_test.go) check
// the writes that result.
func TestDecideFlush(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	hold := startHold // 5 ms
	write := flushVerdict{write: true}
	none := flushVerdict{}
	for _, tc := range []struct {
		name string
		in   flushInput
		want flushVerdict
	}{
		{"nothing waiting: no write, nothing to look again for", flushInput{now: t0}, none},
		{"a push waiting: written now", flushInput{now: t0, queued: 1}, write},
		{"chunks waiting, no progress delay: written now",
			flushInput{now: t0, lanes: []laneFlush{{chunks: 3}}}, write},
		{"a start alone, within its hold: waits for the lane's next report until the hold ends",
			flushInput{now: ms(2), lanes: []laneFlush{{started: true, startedAt: t0}}}, flushVerdict{wake: t0.Add(hold)}},
		{"a start alone, its hold over: written",
			flushInput{now: t0.Add(hold), lanes: []laneFlush{{started: true, startedAt: t0}}}, write},
		{"a start with chunks: written with them",
			flushInput{now: ms(1), lanes: []laneFlush{{started: true, startedAt: t0, chunks: 1}}}, write},
		{"a start with its end: written with it",
			flushInput{now: ms(1), lanes: []laneFlush{{started: true, startedAt: t0, ended: true}}}, write},
		{"a finish chunk came, the end not yet: the chunks wait for the end until the hold ends",
			flushInput{now: ms(1), lanes: []laneFlush{{chunks: 2, boundary: true, finishedAt: t0}}}, flushVerdict{wake: t0.Add(hold)}},
		{"a finish chunk came, its hold over: the chunks are written without the end",
			flushInput{now: t0.Add(hold), lanes: []laneFlush{{chunks: 2, boundary: true, finishedAt: t0}}}, write},
		{"a finish chunk and the end: written together",
			flushInput{now: ms(1), lanes: []laneFlush{{chunks: 2, finishedAt: t0, ended: true}}}, write},
		{"a finished step's hold does not hold a push back",
			flushInput{now: ms(1), queued: 1, lanes: []laneFlush{{chunks: 2, finishedAt: t0}}}, write},
		{"a lane's events before its chunks (a compaction's request) are written at once, even after a finish chunk",
			flushInput{now: ms(1), lanes: []laneFlush{{pre: 1, finishedAt: t0}}}, write},
		{"an end alone: written",
			flushInput{now: t0, lanes: []laneFlush{{ended: true}}}, write},
		{"two holds: the earlier end is when to look again",
			flushInput{now: ms(1), lanes: []laneFlush{{chunks: 1, finishedAt: ms(-1)}, {started: true, startedAt: t0}}}, flushVerdict{wake: ms(-1).Add(hold)}},
		{"one lane held, another's chunks ready: written",
			flushInput{now: ms(1), lanes: []laneFlush{{chunks: 1, finishedAt: t0}, {chunks: 1}}}, write},

		{"progress delay: progress alone within the delay waits until it ends",
			flushInput{now: ms(10), maxDelay: 50 * time.Millisecond, maxChunks: 8, lastWrite: t0, lanes: []laneFlush{{chunks: 3}}},
			flushVerdict{wake: ms(50), tick: true}},
		{"progress delay: over once the delay has passed",
			flushInput{now: ms(50), maxDelay: 50 * time.Millisecond, maxChunks: 8, lastWrite: t0, lanes: []laneFlush{{chunks: 3}}}, write},
		{"progress delay: a boundary chunk is written at once",
			flushInput{now: ms(10), maxDelay: 50 * time.Millisecond, maxChunks: 8, lastWrite: t0, lanes: []laneFlush{{chunks: 3, boundary: true}}}, write},
		{"progress delay: maxChunks chunks are written at once",
			flushInput{now: ms(10), maxDelay: 50 * time.Millisecond, maxChunks: 3, lastWrite: t0, lanes: []laneFlush{{chunks: 3}}}, write},
		{"progress delay: a push is written at once",
			flushInput{now: ms(10), queued: 1, maxDelay: 50 * time.Millisecond, maxChunks: 8, lastWrite: t0, lanes: []laneFlush{{chunks: 3}}}, write},
		{"progress delay: an end is written at once",
			flushInput{now: ms(10), maxDelay: 50 * time.Millisecond, maxChunks: 8, lastWrite: t0, lanes: []laneFlush{{chunks: 3, ended: true}}}, write},
		{"progress delay: a start whose hold is over is written at once",
			flushInput{now: ms(10), maxDelay: 50 * time.Millisecond, maxChunks: 8, lastWrite: t0, lanes: []laneFlush{{started: true, startedAt: t0}}}, write},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideFlush(tc.in); got != tc.want {
				t.Fatalf("decideFlush = %+v, want %+v", got, tc.want)
			}
		})
	}
}
