package pebble

import (
	"errors"
	"fmt"
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
