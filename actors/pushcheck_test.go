package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// lookupCounter counts the store's lookups of each ID.
type lookupCounter struct {
	*countingStore
	mu     sync.Mutex
	lookup map[string]int
}

func (l *lookupCounter) Lookup(ctx context.Context, ids []string) ([]protocol.Event, error) {
	l.mu.Lock()
	for _, id := range ids {
		l.lookup[id]++
	}
	l.mu.Unlock()
	return l.countingStore.Lookup(ctx, ids)
}

func (l *lookupCounter) lookups(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lookup[id]
}

func (l *lookupCounter) Follow(session string, after uint64) (persistence.Tail, error) {
	return l.countingStore.Follow(session, after)
}

// uncheckedFixture is a runtime whose sessions admit pushes without a
// lookup as soon as they own their log (Options.LookupPushesFor < 0).
func uncheckedFixture(t *testing.T) (*fixture, *lookupCounter) {
	f := newFixtureWith(t, `{"default":{"text":"ok"}}`, Options{LookupPushesFor: -1})
	f.recovered() // the start-up scan reads the store the test replaces
	lc := &lookupCounter{countingStore: f.store, lookup: map[string]int{}}
	f.rt.store = lc
	return f, lc
}

// reactivate stops the session's actor, so that its next request
// activates it again with nothing in memory.
func (f *fixture) reactivate(session string) {
	f.t.Helper()
	if err := f.rt.Release(context.Background(), session); err != nil {
		f.t.Fatal(err)
	}
}

// R-LOG-09 R-LOG-10: a push admitted without a lookup (an activation that
// has not written its IDs, past its first LookupPushesFor) is still
// answered as the rules say when its IDs are stored: an identical
// resubmission replays the stored events and appends nothing, a
// conflicting reuse (other content, or an ID of another session) is
// refused with ErrPartialDuplicateBatch and appends nothing, and the
// session's state stays the fold of its log.
func TestUncheckedPushesOfStoredIDs(t *testing.T) {
	f, lc := uncheckedFixture(t)
	waitIdle := func(session string, msgs int) {
		f.waitFor(session, fmt.Sprintf("%d messages", msgs), func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == msgs })
	}
	first := f.push("s1", protocol.Inputs.Text("m1", "Hello"))
	waitIdle("s1", 2)
	f.push("s2", protocol.Inputs.Text("other", "Hi"))
	waitIdle("s2", 2)
	// A message that starts no turn: its resubmission's batch is nothing
	// but stored events, which the store replays.
	passive := false
	note := protocol.Inputs.Message(protocol.UIMessage{ID: "note", Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: "fyi"}}},
		protocol.MessageOptions{Generate: &passive})
	noted := f.push("s1", note)
	waitIdle("s1", 3)
	// A new activation that owns the log and wrote nothing yet: m2 is
	// admitted unchecked, and so is the resubmission of m1 after it.
	f.reactivate("s1")
	f.push("s1", protocol.Inputs.Text("m2", "Again"))
	waitIdle("s1", 5)
	if n := lc.lookups("m2"); n != 0 {
		t.Fatalf("a session that owns its log looked a new push's IDs up %d times", n)
	}
	if n := lc.lookups("m1"); n != 1 {
		t.Fatalf("the session's first push was looked up %d times, want once (its write claims the session)", n)
	}
	// A resubmission of a push this activation wrote (its answer lost) is
	// looked up, and answered without a new activation.
	loads := f.store.loads.Load()
	if again := f.push("s1", protocol.Inputs.Text("m2", "Again")); len(again) != 1 || lc.lookups("m2") != 1 {
		t.Fatalf("m2's resubmission answered %+v after %d lookups, want its event after one", again, lc.lookups("m2"))
	}
	if n := f.store.loads.Load() - loads; n != 0 {
		t.Fatalf("m2's resubmission activated the session %d more times", n)
	}
	last, _ := f.store.LastIndex(context.Background(), "s1")

	again := f.push("s1", protocol.Inputs.Text("m1", "Hello"))
	if len(again) != 1 || again[0].Index != first[0].Index || again[0].ID != "m1" {
		t.Fatalf("the resubmission answered %+v, want the stored %+v", again, first)
	}
	if again := f.push("s1", note); len(again) != 1 || again[0].Index != noted[0].Index {
		t.Fatalf("the passive message's resubmission answered %+v, want the stored %+v", again, noted)
	}
	if st, at, err := f.rt.State(context.Background(), "assistant", "s1"); err != nil || at != last || len(st.AI.Messages) != 5 {
		t.Fatalf("after the resubmissions the state is at %d with %d messages (%v), want %d and 5", at, len(st.AI.Messages), err, last)
	}
	_, err := f.rt.Push(context.Background(), "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m1", "Hello!")}, false)
	if !errors.Is(err, ErrPartialDuplicateBatch) {
		t.Fatalf("a conflicting reuse: %v", err)
	}
	_, err = f.rt.Push(context.Background(), "assistant", "s1", []protocol.Event{protocol.Inputs.Text("other", "Hi")}, false)
	if !errors.Is(err, ErrPartialDuplicateBatch) {
		t.Fatalf("a reuse of another session's ID: %v", err)
	}
	if now, _ := f.store.LastIndex(context.Background(), "s1"); now != last {
		t.Fatalf("the resubmission and the refused pushes appended: last index %d, was %d", now, last)
	}

	// The state after all this is the fold of the log, and the session
	// goes on.
	f.push("s1", protocol.Inputs.Text("m3", "Once more"))
	st := f.waitFor("s1", "m3 answered", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 7 })
	evs, err := f.store.Read(context.Background(), "s1", 0, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := protocol.DeriveUIMessages(evs)
	if err != nil || len(msgs) != len(st.Messages) {
		t.Fatalf("the log folds to %d messages (%v), the state has %d", len(msgs), err, len(st.Messages))
	}
	for i := range msgs {
		if msgs[i].ID != st.Messages[i].ID || textOf(msgs[i]) != textOf(st.Messages[i]) {
			t.Fatalf("message %d: log %q %q, state %q %q", i, msgs[i].ID, textOf(msgs[i]), st.Messages[i].ID, textOf(st.Messages[i]))
		}
	}
	ids := map[string]int{}
	for _, ev := range evs {
		ids[ev.ID]++
		if ids[ev.ID] > 1 {
			t.Fatalf("event %s is in the log twice", ev.ID)
		}
	}
}

// A resubmission admitted unchecked fails its batch; the new pushes it
// shared the batch with are written once, by the next activation, and
// answered with their own events.
func TestUncheckedResubmissionSparesItsNeighbours(t *testing.T) {
	f, _ := uncheckedFixture(t)
	first := f.push("s1", protocol.Inputs.Text("m0", "Hello"))
	f.waitFor("s1", "answered", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	f.reactivate("s1")
	f.push("s1", protocol.Inputs.Text("warm", "Warm up"))
	f.waitFor("s1", "warm", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 4 })
	const n = 8
	var wg sync.WaitGroup
	answers := make([][]protocol.Event, n+1)
	errs := make([]error, n+1)
	for i := 0; i <= n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev := protocol.Inputs.Text(fmt.Sprintf("n%d", i), "queued")
			if i == n {
				ev = protocol.Inputs.Text("m0", "Hello") // the resubmission
			}
			answers[i], errs[i] = f.rt.Push(context.Background(), "assistant", "s1", []protocol.Event{ev}, false)
		}()
	}
	wg.Wait()
	for i := 0; i <= n; i++ {
		if errs[i] != nil {
			t.Fatalf("push %d: %v", i, errs[i])
		}
	}
	if got := answers[n]; len(got) != 1 || got[0].Index != first[0].Index {
		t.Fatalf("the resubmission answered %+v, want %+v", got, first)
	}
	evs, err := f.store.Read(context.Background(), "s1", 0, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]protocol.Event{}
	for _, ev := range evs {
		if _, dup := byID[ev.ID]; dup {
			t.Fatalf("event %s is in the log twice", ev.ID)
		}
		byID[ev.ID] = ev
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("n%d", i)
		st, ok := byID[id]
		if !ok || len(answers[i]) != 1 || answers[i][0].Index != st.Index {
			t.Fatalf("push %s: stored %v at %d, answered %+v", id, ok, st.Index, answers[i])
		}
	}
}

// A push whose batch another writer's append beat (two runtimes on one
// store, or an owner's last moment before a takeover) was not written:
// the runtime decides it again on the log as it now is, and the push
// succeeds, after the other writer's events.
func TestPushBeatenByAnotherWriterIsDecidedAgain(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, nil)
	f.push("s1", protocol.Inputs.Text("m1", "first"))
	f.waitFor("s1", "m1 answered", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	// A second runtime on the same store writes the session behind the
	// first one's back.
	other, err := New(f.store, []*Agent{f.agent}, Options{SkipRecovery: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := other.Push(ctx, "assistant", "s1", []protocol.Event{protocol.Inputs.Text("elsewhere", "from the other")}, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, idle, err := other.Idle(ctx, "assistant", "s1"); err != nil {
			t.Fatal(err)
		} else if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other runtime's turn did not end")
		}
		time.Sleep(5 * time.Millisecond)
	}
	other.Close()
	got := f.push("s1", protocol.Inputs.Text("m2", "second"))
	last, _ := f.store.LastIndex(ctx, "s1")
	evs, _ := f.store.Read(ctx, "s1", 0, int(last))
	at := map[string]uint64{}
	for _, ev := range evs {
		at[ev.ID] = ev.Index
	}
	if len(got) != 1 || got[0].Index != at["m2"] || at["m2"] < at["elsewhere"] {
		t.Fatalf("m2 answered %+v; the log has it at %d, the other writer's at %d", got, at["m2"], at["elsewhere"])
	}
}
