package actors

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

// An attempt whose context ended before its goroutine ran (its session
// stopped, or it was superseded or paused meanwhile) never enters Execute:
// seed 1141 of the simulated schedules, run beside seed 1142, started
// attempt 3 of a call after attempt 4 had started, when the crashed
// runtime's goroutine for attempt 3 got its turn late.
func TestAnAttemptCancelledBeforeItsGoroutineRanNeverStarts(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrStopped)
	entered := 0
	execute := func(context.Context) (json.RawMessage, error) {
		entered++
		return json.RawMessage(`{"ran":true}`), nil
	}
	end := enterTool(ctx, &toolEnd{call: "c1", version: 0, attempt: 3}, execute, nil)
	if entered != 0 {
		t.Fatalf("Execute was entered %d times with a context that had ended", entered)
	}
	if end.started || !end.cancelled || !errors.Is(end.err, ErrStopped) || end.output != nil {
		t.Fatalf("end = %+v, want not started, cancelled by ErrStopped, no output", end)
	}
	if end.call != "c1" || end.attempt != 3 {
		t.Fatalf("end names %q attempt %d, want c1 attempt 3", end.call, end.attempt)
	}

	end = enterTool(context.Background(), &toolEnd{call: "c1", attempt: 4}, execute, nil)
	if entered != 1 || !end.started || end.cancelled || end.err != nil || string(end.output) != `{"ran":true}` {
		t.Fatalf("a live attempt: entered %d, end %+v", entered, end)
	}
}
