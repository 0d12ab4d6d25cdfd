package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// Passivation frees a session's memory: 10,000 sessions are activated
// (each folds and keeps its state), then passivate when idle; afterwards
// the runtime holds no session, and the heap is back within a small margin
// of where it was before they were activated (their entries stay in the
// store). Set A2_PASSIVATE_SESSIONS for another count.
func TestPassivationFreesMemory(t *testing.T) {
	if testing.CoverMode() != "" {
		// Coverage counters (the mutation run's first pass) change what a
		// session costs: the bytes per session are not the node's.
		t.Skip("heap figures under coverage instrumentation are not meaningful: run without -cover (go test ./actors -run TestPassivationFreesMemory)")
	}
	n := 10000
	if testing.Short() {
		n = 1000
	}
	f := newFixture(t, `{"replies":[]}`, nil)
	ctx := context.Background()
	before := heapInUse()
	passive := false
	activate := func(round int) {
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := w; i < n; i += 16 {
					id := fmt.Sprintf("r%d-p%05d", round, i)
					ev := protocol.Inputs.Message(protocol.UIMessage{ID: "m-" + id, Role: protocol.RoleUser,
						Parts: []protocol.Part{{Type: protocol.PartText, Text: "context for session " + id}}}, protocol.MessageOptions{Generate: &passive})
					if _, err := f.rt.Push(ctx, "assistant", id, []protocol.Event{ev}, false); err != nil {
						errs <- err
						return
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	passivate := func() {
		f.rt.PassivateIdle()
		deadline := time.Now().Add(30 * time.Second)
		for f.rt.ActiveSessions() > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d sessions still active", f.rt.ActiveSessions())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	activate(1)
	active := f.rt.ActiveSessions()
	during := heapInUse()
	passivate()
	after1 := heapInUse()
	// A second round of as many new sessions: the runtime reuses what the
	// first round left (tables sized for the peak of active sessions), so
	// the heap grows only by the new sessions' entries in the store (here an
	// in-memory filesystem).
	activate(2)
	passivate()
	after2 := heapInUse()
	perActive := (float64(during) - float64(before)) / float64(n)
	growth := (float64(after2) - float64(after1)) / float64(n)
	t.Logf("%d sessions: heap %d KiB before, %d KiB with %d active (%.0f B each), %d KiB after passivating them, %d KiB after %d more sessions came and went (%.0f B each: their store entries)",
		n, before>>10, during>>10, active, perActive, after1>>10, after2>>10, n, growth)
	if active != n {
		t.Fatalf("%d sessions were active, want %d", active, n)
	}
	if raceEnabled {
		t.Log("heap figures are not checked under the race detector (its instrumentation allocates); run go test ./actors -run Passivation without -race")
	} else if growth > perActive*0.7 {
		// perActive counts a session's actor and its store entries, growth
		// the store entries alone (about half: since the runtime writes
		// ai.session.created, a little more). An actor that stayed in
		// memory would bring growth up to perActive.
		t.Fatalf("each passivated session still holds %.0f bytes (an active one %.0f)", growth, perActive)
	}
	// A passivated session reactivates from the store.
	st, idx, err := f.rt.State(ctx, "assistant", "r1-p00042")
	if err != nil || idx == 0 || len(st.AI.Messages) != 1 {
		t.Fatalf("reactivation: %v %d", err, idx)
	}
}

// Reading a session nobody wrote to gives the initial state at index 0 and
// activates nothing, so reads of unknown session IDs cost no memory; once
// something is pushed, State reads the session's actor.
func TestStateOfAnUnknownSessionActivatesNothing(t *testing.T) {
	f := newFixture(t, `{"replies":[]}`, nil)
	ctx := context.Background()
	for i := range 100 {
		st, idx, err := f.rt.State(ctx, "assistant", fmt.Sprintf("nobody-%d", i))
		if err != nil || idx != 0 || len(st.AI.Messages) != 0 || st.AI.Status != protocol.StatusIdle {
			t.Fatalf("State of an unknown session: %v, index %d, %d messages, status %q", err, idx, len(st.AI.Messages), st.AI.Status)
		}
	}
	if n := f.rt.ActiveSessions(); n != 0 {
		t.Fatalf("reading 100 unknown sessions activated %d", n)
	}
	passive := false
	f.push("nobody-7", protocol.Inputs.Message(protocol.UIMessage{ID: "m1", Role: protocol.RoleUser,
		Parts: []protocol.Part{{Type: protocol.PartText, Text: "hello"}}}, protocol.MessageOptions{Generate: &passive}))
	f.rt.PassivateIdle()
	f.waitFor("nobody-7", "the message", func(s *protocol.AIState) bool { return len(s.Messages) == 1 })
	if _, idx, err := f.rt.State(ctx, "assistant", "nobody-7"); err != nil || idx == 0 {
		t.Fatalf("State after a push: index %d, %v", idx, err)
	}
}

// A session whose handler succeeded is idle once the completion is
// folded: it passivates like any other (mutant handlers.go:88).
func TestASessionPassivatesAfterItsHandlerSucceeded(t *testing.T) {
	f := handlerFixture(t, func(context.Context, protocol.Event) error { return nil })
	f.flag("h1", "flag-1")
	if done := f.handled("h1"); len(done) != 1 {
		t.Fatalf("%d handler completions, want 1", len(done))
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.rt.IsActive("h1") {
		f.rt.PassivateIdle()
		if time.Now().After(deadline) {
			t.Fatal("the session did not passivate after its handler succeeded")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A session passivates once idle even when its idle timer fired while it
// was busy. protoactor cancels an actor's receive timeout when it fires; a
// session that ignored it (here a tool call running longer than
// PassivateAfter, in the soak a push arriving as the timer fired) stayed
// active, its state in memory, until the process ended.
func TestASessionBusyWhenItsIdleTimerFiredStillPassivates(t *testing.T) {
	ran := make(chan struct{})
	slow := tools.Tool{Name: "slow", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		defer close(ran)
		select {
		case <-time.After(300 * time.Millisecond):
			return json.RawMessage(`"done"`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	withSlow := func(a *AgentOptions) { a.Tools = []tools.Tool{slow} }
	f := newFixture(t, `{"replies":[{"toolCalls":[{"name":"slow","input":{}}],"then":{"text":"answered"}}]}`, withSlow)
	f.close()
	f.opts.PassivateAfter = 50 * time.Millisecond
	f.open(withSlow)
	f.push("s1", protocol.Inputs.Text("m1", "hello"))
	// Nothing asks the session anything while the tool runs (a state read
	// would restart its timer): the timer fires during the run.
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the tool did not run")
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.rt.IsActive("s1") {
		if time.Now().After(deadline) {
			t.Fatalf("the session is still active 10 s after its tool ended (PassivateAfter %s)", f.opts.PassivateAfter)
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.waitFor("s1", "the turn, from the store", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "answered" })
}
