package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// groupResult is what one append of a hand-made group was answered.
type groupResult struct {
	events []protocol.Event
	err    error
}

// pending makes an append for a hand-made group, recording its answer.
func pending(t *testing.T, results map[string]*groupResult, name, session string, expected uint64, opts persistence.AppendOptions, events ...protocol.Event) *pendingAppend {
	t.Helper()
	batch, err := persistence.PrepareBatch(session, events)
	if err != nil {
		t.Fatal(err)
	}
	r := &groupResult{}
	results[name] = r
	return &pendingAppend{ctx: context.Background(), session: session, expected: expected, batch: batch, opts: opts,
		done: func(evs []protocol.Event, err error) {
			if r.events != nil || r.err != nil {
				t.Errorf("append %s answered twice", name)
			}
			r.events, r.err = evs, err
		}}
}

func ev(id string) protocol.Event {
	return protocol.Event{ID: id, Type: "t", Payload: []byte(`{"id":"` + id + `"}`)}
}

// One group of appends to many sessions is one statement, and each batch
// is answered on its own: an index conflict, a lease lost, a conflicting
// reuse of an ID and an identical resubmission beside batches that are
// written, none changing its neighbours' fate; a batch whose error fails
// the whole statement is retried alone, and its neighbours are written.
func TestGroupAnswersEachBatchAlone(t *testing.T) {
	url := testURL(t)
	s := openStore(t, url, newSchema(t, url), Options{})
	ctx := t.Context()
	stored, err := s.Append(ctx, "a", 0, []protocol.Event{ev("a-1")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "d", 0, []protocol.Event{ev("d-1")}); err != nil {
		t.Fatal(err)
	}
	lease, err := s.AcquireLease(ctx, "leased", "x")
	if err != nil {
		t.Fatal(err)
	}
	work := true
	results := map[string]*groupResult{}
	group := []*pendingAppend{
		pending(t, results, "new", "n1", 0, persistence.AppendOptions{}, ev("n1-1"), ev("n1-2")),
		pending(t, results, "conflict", "a", 0, persistence.AppendOptions{}, ev("a-x")),
		pending(t, results, "replay", "a", 7, persistence.AppendOptions{}, ev("a-1")),
		pending(t, results, "stale-epoch", "leased", 0, persistence.AppendOptions{Epoch: lease.Epoch + 1}, ev("l-stale")),
		pending(t, results, "fenced", "leased", 0, persistence.AppendOptions{Epoch: lease.Epoch}, ev("l-1")),
		pending(t, results, "work", "w1", 0, persistence.AppendOptions{Work: &work}, ev("w1-1")),
		pending(t, results, "same-session-next", "n1", 2, persistence.AppendOptions{}, ev("n1-3")),
	}
	before := s.commit.statements.Load()
	s.runGroup(group)
	if n := s.commit.statements.Load() - before; n != 1 {
		t.Fatalf("the group took %d statements, want 1", n)
	}
	wantWritten := func(name string, first uint64, n int) {
		t.Helper()
		r := results[name]
		if r.err != nil || len(r.events) != n || r.events[0].Index != first {
			t.Fatalf("append %s = %v, %v; want %d events from index %d", name, r.events, r.err, n, first)
		}
	}
	wantErr := func(name string, target error) {
		t.Helper()
		if r := results[name]; !errors.Is(r.err, target) {
			t.Fatalf("append %s = %v, %v; want %v", name, r.events, r.err, target)
		}
	}
	wantWritten("new", 1, 2)
	wantWritten("same-session-next", 3, 1)
	wantWritten("fenced", 1, 1)
	wantWritten("work", 1, 1)
	wantErr("conflict", persistence.ErrIndexConflict)
	wantErr("stale-epoch", persistence.ErrLeaseLost)
	if r := results["replay"]; r.err != nil || len(r.events) != 1 || r.events[0].Index != 1 || r.events[0].Time != stored[0].Time {
		t.Fatalf("the identical resubmission = %v, %v; want the stored event %v", r.events, r.err, stored)
	}
	for session, want := range map[string][]string{"n1": {"n1-1", "n1-2", "n1-3"}, "a": {"a-1"}, "c": nil, "leased": {"l-1"}, "w1": {"w1-1"}} {
		got, err := s.Read(ctx, session, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range got {
			ids = append(ids, e.ID)
		}
		if strings.Join(ids, ",") != strings.Join(want, ",") {
			t.Fatalf("session %s holds %v, want %v", session, ids, want)
		}
	}
	if has, err := s.HasWork(ctx, "w1"); err != nil || !has {
		t.Fatalf("HasWork(w1) = %v, %v; want the mark written with the batch", has, err)
	}

	// A batch at its session's index that reuses a stored ID beside one
	// that is new: the statement cannot tell which batch's rows collided,
	// so the group writes nothing and each batch is written alone (one
	// statement for the group, then one per batch).
	results = map[string]*groupResult{}
	group = []*pendingAppend{
		pending(t, results, "reuse", "c", 0, persistence.AppendOptions{}, ev("c-1"), ev("d-1")),
		pending(t, results, "beside", "e", 0, persistence.AppendOptions{}, ev("e-1")),
	}
	before = s.commit.statements.Load()
	s.runGroup(group)
	if n := s.commit.statements.Load() - before; n != 3 {
		t.Fatalf("the group with a reused ID took %d statements, want 3 (the group, then each batch alone)", n)
	}
	wantErr("reuse", persistence.ErrPartialDuplicateBatch)
	wantWritten("beside", 1, 1)
	for session, want := range map[string]uint64{"c": 0, "e": 1} {
		if last, err := s.LastIndex(ctx, session); err != nil || last != want {
			t.Fatalf("LastIndex(%s) = %d, %v; want %d", session, last, err, want)
		}
	}

	// A batch the statement cannot write at all (an ID past the index's
	// row size): the group fails as a whole, and is retried one batch at a
	// time.
	var long strings.Builder
	for i := 0; long.Len() < 9000; i++ {
		fmt.Fprintf(&long, "%x", (i*2654435761)%1000003)
	}
	results = map[string]*groupResult{}
	group = []*pendingAppend{
		pending(t, results, "before", "g1", 0, persistence.AppendOptions{}, ev("g1-1")),
		pending(t, results, "too-long", "g2", 0, persistence.AppendOptions{}, ev(long.String())),
		pending(t, results, "after", "g3", 0, persistence.AppendOptions{}, ev("g3-1")),
	}
	before = s.commit.statements.Load()
	s.runGroup(group)
	if n := s.commit.statements.Load() - before; n != 4 {
		t.Fatalf("the failed group took %d statements, want 4 (the group, then each batch alone)", n)
	}
	wantWritten("before", 1, 1)
	wantWritten("after", 1, 1)
	if r := results["too-long"]; r.err == nil || errors.Is(r.err, persistence.ErrFailed) || !strings.Contains(r.err.Error(), "nothing written") {
		t.Fatalf("the batch with an ID too long = %v; want its own error, saying nothing was written", r.err)
	}
	if last, err := s.LastIndex(ctx, "g2"); err != nil || last != 0 {
		t.Fatalf("LastIndex(g2) = %d, %v; want 0", last, err)
	}
}

// Concurrent appends of many sessions share commits: fewer statements than
// appends, and every append is answered with its own batch.
func TestConcurrentAppendsShareCommits(t *testing.T) {
	url := testURL(t)
	s := openStore(t, url, newSchema(t, url), Options{Committers: 1})
	const writers, each = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			session := fmt.Sprintf("s%d", w)
			for i := range each {
				got, err := s.Append(t.Context(), session, uint64(i), []protocol.Event{ev(fmt.Sprintf("%s-%d", session, i))})
				if err != nil || len(got) != 1 || got[0].Index != uint64(i+1) || got[0].Session != session {
					errs <- fmt.Errorf("append %d of %s = %v, %v", i, session, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	statements, batches := s.commit.statements.Load(), s.commit.batches.Load()
	if batches != writers*each || statements >= batches/2 {
		t.Fatalf("%d appends took %d statements: want them to share commits (fewer than half as many statements)", batches, statements)
	}
	t.Logf("%d appends in %d statements (%.1f per commit)", batches, statements, float64(batches)/float64(statements))
}

// A live tail of a session this store writes gets each batch without
// reading it back, and a tail that starts at the end the store just wrote
// (a push answered with its own stream) reads nothing either; a tail that
// starts further back reads the history once.
func TestTailsAreFedWithoutReading(t *testing.T) {
	url := testURL(t)
	s := openStore(t, url, newSchema(t, url), Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	reads := 0
	read := s.Read
	s.follow = persistence.NewFanout(func(ctx context.Context, session string, after uint64, limit int) ([]protocol.Event, error) {
		reads++
		return read(ctx, session, after, limit)
	}, s.stopped, func() error { return persistence.ErrClosed })

	first, err := s.Append(ctx, "s", 0, []protocol.Event{ev("e1"), ev("e2")})
	if err != nil {
		t.Fatal(err)
	}
	// Starts at the first pushed event: the batch just written is known.
	tail, err := s.Follow("s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	got, err := tail.Next(ctx)
	if err != nil || len(got) != 2 || got[0].ID != "e1" || reads != 0 {
		t.Fatalf("first Next = %v, %v after %d reads; want e1, e2 from memory", got, err, reads)
	}
	next, err := s.Append(ctx, "s", 2, []protocol.Event{ev("e3")})
	if err != nil {
		t.Fatal(err)
	}
	got, err = tail.Next(ctx)
	if err != nil || len(got) != 1 || got[0].Index != 3 || reads != 0 {
		t.Fatalf("second Next = %v, %v after %d reads; want e3 at index 3 from memory", got, err, reads)
	}
	if string(got[0].Payload) != string(next[0].Payload) || got[0].Time != next[0].Time || got[0].Time < first[0].Time {
		t.Fatalf("the tail's event %+v differs from the acknowledged %+v", got[0], next[0])
	}
	// A tail from further back than the store remembers reads.
	s.follow.Lagged("s")
	back, err := s.Follow("s", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	got, err = back.Next(ctx)
	if err != nil || len(got) != 2 || got[0].Index != 2 || reads != 1 {
		t.Fatalf("Next of a tail from index 1 = %v, %v after %d reads; want e2, e3 read once", got, err, reads)
	}
}

// A committer lingers only after a busy group, only while its queue has
// room, and only until its oldest append has waited Options.GroupLinger.
func TestLingerFor(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	ms := time.Millisecond
	for _, c := range []struct {
		name         string
		linger       time.Duration
		last, queued int
		oldest       time.Time
		want         time.Duration
	}{
		{"after a busy group, the rest of the linger", 5 * ms, lingerAfter, 1, now.Add(-2 * ms), 3 * ms},
		{"after a lone append: at once", 5 * ms, 1, 1, now, 0},
		{"just under busy: at once", 5 * ms, lingerAfter - 1, 3, now, 0},
		{"the oldest waited the linger already", 5 * ms, 10, 3, now.Add(-6 * ms), 0},
		{"a full queue: at once", 5 * ms, 10, maxGroupAppends, now, 0},
		{"linger off", -1, 10, 3, now, 0},
	} {
		if got := lingerFor(c.linger, c.last, c.queued, c.oldest, now); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
