package pebble

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// groupFixture holds the first WAL sync it sees armed, counts WAL syncs,
// and can fail the next one.
type groupFixture struct {
	s               *Store
	armed, failNext atomic.Bool
	syncs           atomic.Int64
	held, release   chan struct{}
}

func newGroupFixture(t *testing.T) *groupFixture {
	f := &groupFixture{held: make(chan struct{}, 1), release: make(chan struct{})}
	gate := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !isWAL(op) || !isSync(op.Kind) {
			return nil
		}
		f.syncs.Add(1)
		if f.armed.CompareAndSwap(true, false) {
			f.held <- struct{}{}
			<-f.release
			return nil
		}
		if f.failNext.CompareAndSwap(true, false) {
			return errors.New("injected WAL sync failure")
		}
		return nil
	})
	s, err := Open("db", Options{FS: errorfs.Wrap(vfs.NewMem(), gate), Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	f.s = s
	t.Cleanup(func() { _ = s.Close() })
	return f
}

// queued waits until n commits wait behind the one in progress.
func (f *groupFixture) queued(t *testing.T, n int) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.s.group.mu.Lock()
		q := len(f.s.group.queue)
		f.s.group.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d commits queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// appendAll starts one append per session and returns their results.
func (f *groupFixture) appendAll(t *testing.T, sessions []string) chan error {
	out := make(chan error, len(sessions))
	for _, session := range sessions {
		go func() {
			_, err := f.s.Append(t.Context(), session, 0, []protocol.Event{{ID: "e-" + session, Type: "t", Payload: []byte(`1`)}})
			out <- err
		}()
	}
	return out
}

func sessionNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// TestGroupCommitSharesOneSync: appends that arrive while a commit is
// syncing are committed together with one WAL sync, and each is durable
// and readable when its Append returns.
func TestGroupCommitSharesOneSync(t *testing.T) {
	f := newGroupFixture(t)
	f.armed.Store(true)
	first := f.appendAll(t, []string{"first"})
	<-f.held // the first commit is syncing
	later := sessionNames("s", 20)
	results := f.appendAll(t, later)
	f.queued(t, len(later))
	before := f.syncs.Load()
	close(f.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range later {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if got := f.syncs.Load() - before; got != 1 {
		t.Errorf("the 20 queued appends took %d WAL syncs, want 1", got)
	}
	for _, session := range later {
		evs, err := f.s.Read(t.Context(), session, 0, 10)
		if err != nil || len(evs) != 1 || evs[0].ID != "e-"+session {
			t.Fatalf("session %s reads %v, %v after its append returned", session, evs, err)
		}
	}
}

// TestGroupCommitFailsTogether: when the sync of a group fails, every
// append of the group fails with ErrFailed, none of them is visible, and
// the store refuses further appends.
func TestGroupCommitFailsTogether(t *testing.T) {
	f := newGroupFixture(t)
	f.armed.Store(true)
	first := f.appendAll(t, []string{"first"})
	<-f.held
	later := sessionNames("s", 10)
	results := f.appendAll(t, later)
	f.queued(t, len(later))
	f.failNext.Store(true) // the first sync succeeds; the group's fails
	close(f.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range later {
		if err := <-results; !errors.Is(err, persistence.ErrFailed) {
			t.Fatalf("an append of the failed group returned %v, want ErrFailed", err)
		}
	}
	for _, session := range later {
		if evs, err := f.s.Read(t.Context(), session, 0, 10); len(evs) != 0 {
			t.Fatalf("session %s of the failed group reads %v, %v", session, evs, err)
		}
	}
	if _, err := f.s.Append(t.Context(), "after", 0, []protocol.Event{{ID: "after", Type: "t", Payload: []byte(`1`)}}); !errors.Is(err, persistence.ErrFailed) {
		t.Fatalf("an append after the failure returned %v, want ErrFailed", err)
	}
}

// appendAsync calls Append with Async and returns what done received, failing the
// test if done is not called exactly once within 10 s.
func appendAsync(t *testing.T, s *Store, ctx context.Context, session string, expected uint64, events []protocol.Event) ([]protocol.Event, error) {
	t.Helper()
	type result struct {
		evs []protocol.Event
		err error
	}
	out := make(chan result, 2)
	s.Append(ctx, session, expected, events, persistence.Async(func(evs []protocol.Event, err error) { out <- result{evs, err} }))
	select {
	case r := <-out:
		select {
		case <-out:
			t.Fatal("an Async append called done twice")
		case <-time.After(20 * time.Millisecond):
		}
		return r.evs, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("an Async append did not call done")
		return nil, nil
	}
}

// TestAppendAsyncAnswersAsAppend: for good and bad batches alike,
// an Async append's done receives what Append returns on a store in the same
// state, and writes what Append writes.
func TestAppendAsyncAnswersAsAppend(t *testing.T) {
	ev := func(id, payload string) protocol.Event {
		return protocol.Event{ID: id, Type: "t", Payload: []byte(payload)}
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		expected uint64
		events   []protocol.Event
		wantErr  error // nil: success
	}{
		{"a new batch", context.Background(), 1, []protocol.Event{ev("b", `2`), ev("c", `3`)}, nil},
		{"a stale expected index", context.Background(), 0, []protocol.Event{ev("b", `2`)}, persistence.ErrIndexConflict},
		{"an index past the end", context.Background(), 5, []protocol.Event{ev("b", `2`)}, persistence.ErrIndexConflict},
		{"an empty batch", context.Background(), 1, nil, persistence.ErrInvalid},
		{"an empty event ID", context.Background(), 1, []protocol.Event{ev("", `2`)}, persistence.ErrInvalid},
		{"an ID twice in the batch", context.Background(), 1, []protocol.Event{ev("b", `2`), ev("b", `2`)}, persistence.ErrInvalid},
		{"an identical resubmission", context.Background(), 7, []protocol.Event{ev("a", `1`)}, nil},
		{"a stored ID with another payload", context.Background(), 1, []protocol.Event{ev("a", `9`)}, persistence.ErrPartialDuplicateBatch},
		{"a stored ID beside a new one", context.Background(), 1, []protocol.Event{ev("a", `1`), ev("b", `2`)}, persistence.ErrPartialDuplicateBatch},
		{"a cancelled context", cancelled, 1, []protocol.Event{ev("b", `2`)}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [2][]protocol.Event
			var errs [2]error
			var logs [2][]protocol.Event
			for i := range 2 {
				s, err := Open("db", Options{FS: vfs.NewMem(), Logger: quietLogger{}})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Append(context.Background(), "s", 0, []protocol.Event{ev("a", `1`)}); err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					got[i], errs[i] = s.Append(tc.ctx, "s", tc.expected, tc.events)
				} else {
					got[i], errs[i] = appendAsync(t, s, tc.ctx, "s", tc.expected, tc.events)
				}
				logs[i], _ = s.Read(context.Background(), "s", 0, 10)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if tc.wantErr == nil && errs[1] != nil || tc.wantErr != nil && !errors.Is(errs[1], tc.wantErr) {
				t.Fatalf("AppendAsync: %v, want %v", errs[1], tc.wantErr)
			}
			if (errs[0] == nil) != (errs[1] == nil) || errs[0] != nil && errs[0].Error() != errs[1].Error() {
				t.Fatalf("AppendAsync: %v; Append: %v", errs[1], errs[0])
			}
			if !sameEvents(got[0], got[1]) || !sameEvents(logs[0], logs[1]) {
				t.Fatalf("AppendAsync returned %v and left %v; Append returned %v and left %v", got[1], logs[1], got[0], logs[0])
			}
		})
	}
}

// sameEvents compares events but for their times.
func sameEvents(a, b []protocol.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.Time, y.Time = 0, 0
		if !protocol.SameContent(x, y) || x.Index != y.Index || x.Session != y.Session {
			return false
		}
	}
	return true
}

// TestAppendAsyncAnswersOnceDurable: done comes only after the WAL sync of
// the batch's group, for a group of asynchronous appends as for one, and
// when the group's sync fails every done receives ErrFailed and nothing is
// visible.
func TestAppendAsyncAnswersOnceDurable(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			f := newGroupFixture(t)
			f.armed.Store(true)
			first := f.appendAll(t, []string{"first"})
			<-f.held // the first commit is syncing
			var released sync.Once
			release := func() { released.Do(func() { close(f.release) }) }
			t.Cleanup(release) // before the store closes, should the test fail
			sessions := sessionNames("s", 10)
			answers := make(chan error, len(sessions))
			for _, session := range sessions {
				f.s.Append(t.Context(), session, 0, []protocol.Event{{ID: "e-" + session, Type: "t", Payload: []byte(`1`)}},
					persistence.Async(func(_ []protocol.Event, err error) { answers <- err }))
			}
			f.queued(t, len(sessions))
			select {
			case err := <-answers:
				t.Fatalf("an asynchronous append was answered (%v) before its sync", err)
			case <-time.After(50 * time.Millisecond):
			}
			f.failNext.Store(fail) // the first sync succeeds; the group's as told
			release()
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			for range sessions {
				select {
				case err := <-answers:
					if fail && !errors.Is(err, persistence.ErrFailed) || !fail && err != nil {
						t.Fatalf("an asynchronous append of the group was answered %v (sync failed: %v)", err, fail)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("an asynchronous append was not answered")
				}
			}
			for _, session := range sessions {
				evs, err := f.s.Read(t.Context(), session, 0, 10)
				if fail && len(evs) != 0 || !fail && (err != nil || len(evs) != 1) {
					t.Fatalf("session %s reads %v, %v (sync failed: %v)", session, evs, err, fail)
				}
			}
		})
	}
}
