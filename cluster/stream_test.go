package cluster

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/a2-runtime/a2/protocol"
)

// drain reads a stream to its end (the event channel closed), within 15 s,
// and answers its events and the error that ended it.
func drain(t *testing.T, evs <-chan protocol.Event, errc <-chan error) ([]protocol.Event, error) {
	t.Helper()
	return drainWithin(t, evs, errc, 15*time.Second)
}

// A stream until idle is ended by the session's owner: the event channel
// closes after the event the session went idle at, with io.EOF, and the
// gateway asks nothing across the hop per event. One that starts where the
// session is idle already ends at once with no event (after the last event
// of a turn, a stream opened again at a new owner would otherwise wait for
// the session's next turn). A plain stream goes on past the idle point.
func TestAStreamUntilIdleEndsAtTheOwner(t *testing.T) {
	n, rt := startTestMember(t, memberSetup{script: `{"replies":[{"match":"first","text":"one two three","delayMs":20}],"default":{"text":"again"}}`})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := n.Router()

	plainCtx, plainCancel := context.WithCancel(ctx)
	defer plainCancel()
	plain, _, err := r.Subscribe(plainCtx, "assistant", "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Push(ctx, "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m1", "first")}, false); err != nil {
		t.Fatal(err)
	}
	evs, errc, err := r.SubscribeUntilIdle(ctx, "assistant", "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	got, end := drain(t, evs, errc)
	if !errors.Is(end, io.EOF) {
		t.Fatalf("the stream ended with %v, want io.EOF (the owner ended it at idle)", end)
	}
	at, idle, err := rt.Idle(ctx, "assistant", "s1")
	if err != nil || !idle {
		t.Fatalf("the session after the stream's end: idle %v at %d (%v), want idle", idle, at, err)
	}
	for i, ev := range got {
		if ev.Index != uint64(i+1) {
			t.Fatalf("event %d has index %d, want %d", i, ev.Index, i+1)
		}
	}
	if len(got) == 0 || got[len(got)-1].Index != at {
		t.Fatalf("the stream delivered %d events, ending before the idle index %d", len(got), at)
	}
	if got[len(got)-1].Type != protocol.TypeGenerationCompleted {
		t.Fatalf("the stream's last event is %s, want the turn's completion", got[len(got)-1].Type)
	}

	// Where the session is idle already: an end at once, nothing delivered.
	evs, errc, err = r.SubscribeUntilIdle(ctx, "assistant", "s1", at)
	if err != nil {
		t.Fatal(err)
	}
	if got, end := drain(t, evs, errc); len(got) != 0 || !errors.Is(end, io.EOF) {
		t.Fatalf("a stream from the idle index %d: %d events, ended with %v; want none and io.EOF", at, len(got), end)
	}

	// The plain stream saw the first turn and goes on into the second.
	if _, err := r.Push(ctx, "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m2", "second")}, false); err != nil {
		t.Fatal(err)
	}
	for want := uint64(1); want <= at+1; want++ {
		select {
		case ev := <-plain:
			if ev.Index != want {
				t.Fatalf("the plain stream: index %d, want %d", ev.Index, want)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("the plain stream stopped before index %d (the first turn was idle at %d)", want, at)
		}
	}

	// A push and its stream in one request (push.stream): the stream starts
	// at the first pushed event and ends at idle. The pushed events cross
	// the hop once (in the answer: the owner's stream starts after them),
	// and the stream is opened once.
	opened, dups := n.streamSeq.Load(), n.streamDuplicates.Load()
	stored, evs, errc, err := r.PushUntilIdle(ctx, "assistant", "s2", []protocol.Event{protocol.Inputs.Text("p1", "first")}, false)
	if err != nil || len(stored) != 1 || stored[0].ID != "p1" {
		t.Fatalf("push with a stream: %v, stored %+v", err, stored)
	}
	got, end = drain(t, evs, errc)
	if !errors.Is(end, io.EOF) || len(got) == 0 || got[0].Index != stored[0].Index {
		t.Fatalf("the pushed stream: %d events from %v, ended with %v; want from the pushed event %d to io.EOF", len(got), got, end, stored[0].Index)
	}
	at2, idle2, err := rt.Idle(ctx, "assistant", "s2")
	if err != nil || !idle2 || got[len(got)-1].Index != at2 {
		t.Fatalf("the pushed stream ended at %d; the session is idle %v at %d (%v)", got[len(got)-1].Index, idle2, at2, err)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Index != got[i-1].Index+1 {
			t.Fatalf("the pushed stream went from %d to %d", got[i-1].Index, got[i].Index)
		}
	}
	if o, d := n.streamSeq.Load()-opened, n.streamDuplicates.Load()-dups; o != 1 || d != 0 {
		t.Fatalf("the pushed stream was opened %d times and sent %d events twice; want once and none", o, d)
	}
	// Its resubmission replays: the same stored event, and a stream from it.
	again, evs, errc, err := r.PushUntilIdle(ctx, "assistant", "s2", []protocol.Event{protocol.Inputs.Text("p1", "first")}, false)
	if err != nil || len(again) != 1 || again[0].Index != stored[0].Index {
		t.Fatalf("a resubmitted push with a stream: %v, %+v; want the stored event at %d", err, again, stored[0].Index)
	}
	if got2, end := drain(t, evs, errc); !errors.Is(end, io.EOF) || len(got2) != len(got) {
		t.Fatalf("the resubmission's stream: %d events, ended with %v; want the same %d and io.EOF", len(got2), end, len(got))
	}
}
