package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// TestKilledConnectionLeavesNoPartialBatch terminates the backend of an
// append transaction that has written its rows but not committed: the
// append fails, nothing of its batch is visible, and an identical
// resubmission then appends it whole.
func TestKilledConnectionLeavesNoPartialBatch(t *testing.T) {
	url := testURL(t)
	schema := newSchema(t, url)
	paused := make(chan uint32, 1)
	resume := make(chan struct{})
	var armed atomic.Bool
	armed.Store(true)
	s := openStore(t, url, schema, Options{BeforeCommit: func(ctx context.Context, session string, pid uint32) error {
		if !armed.CompareAndSwap(true, false) {
			return nil
		}
		paused <- pid
		<-resume
		return nil
	}})
	ctx := t.Context()
	batch := []protocol.Event{
		{ID: "a", Type: "t", Payload: []byte(`1`)},
		{ID: "b", Type: "t", Payload: []byte(`2`)},
		{ID: "c", Type: "t", Payload: []byte(`3`)},
	}
	type result struct {
		events []protocol.Event
		err    error
	}
	done := make(chan result, 1)
	go func() {
		got, err := s.Append(ctx, "s1", 0, batch)
		done <- result{got, err}
	}()
	var pid uint32
	select {
	case pid = <-paused:
	case <-time.After(30 * time.Second):
		t.Fatal("the append never reached BeforeCommit")
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var killed bool
	if err := conn.QueryRow(ctx, "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, killed, err)
	}
	close(resume)
	r := <-done
	if r.err == nil {
		t.Fatalf("append whose connection was killed returned %v and no error", r.events)
	}
	t.Logf("cut-off append: %v", r.err)

	if got, err := s.Read(ctx, "s1", 0, 10); err != nil || len(got) != 0 {
		t.Fatalf("Read after the killed append = %v, %v; want nothing", got, err)
	}
	if got, err := s.Lookup(ctx, []string{"a", "b", "c"}); err != nil || len(got) != 0 {
		t.Fatalf("Lookup after the killed append = %v, %v; want nothing", got, err)
	}
	if n, err := s.LastIndex(ctx, "s1"); err != nil || n != 0 {
		t.Fatalf("LastIndex after the killed append = %d, %v; want 0", n, err)
	}
	if got, err := s.Sessions(ctx, "", 10); err != nil || len(got) != 0 {
		t.Fatalf("Sessions after the killed append = %q, %v; want none", got, err)
	}
	got, err := s.Append(ctx, "s1", 0, batch)
	if err != nil || len(got) != 3 || got[2].Index != 3 {
		t.Fatalf("resubmission = %v, %v; want the batch at 1..3", got, err)
	}
}

// TestServerRestartDuringAppends restarts the PostgreSQL server while
// workers append to their own sessions. A worker whose append fails
// resubmits the same batch until it is acknowledged (a replay if it had
// landed). Afterwards, on a new store, every session's log is exactly its
// acknowledged batches, in order, with no gap and nothing else.
//
// It needs A2_TEST_POSTGRES_CTL, a shell command that restarts the server
// of A2_TEST_POSTGRES_URL (.ci/run sets it).
func TestServerRestartDuringAppends(t *testing.T) {
	url := testURL(t)
	restart := os.Getenv("A2_TEST_POSTGRES_CTL")
	if restart == "" {
		t.Skip("set A2_TEST_POSTGRES_CTL to a shell command that restarts the server of A2_TEST_POSTGRES_URL (e.g. 'pg_ctl -D DIR -m fast -w restart'); .ci/run sets it")
	}
	schema := newSchema(t, url)
	// One committer: the workers' appends share groups, so the restart
	// cuts groups of several sessions off in the middle.
	s := openStore(t, url, schema, Options{MaxConns: 8, PollInterval: 100 * time.Millisecond, Committers: 1})

	const workers = 16
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var failures atomic.Int64
	acked := make([][]protocol.Event, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			session := fmt.Sprintf("restart-%d", w)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				batch := []protocol.Event{
					{ID: fmt.Sprintf("%s-%d-a", session, n), Type: "t", Payload: fmt.Appendf(nil, `{"n":%d}`, n)},
					{ID: fmt.Sprintf("%s-%d-b", session, n), Type: "t", Payload: fmt.Appendf(nil, `{"n":%d}`, n)},
				}
				expected := uint64(len(acked[w]))
				for {
					got, err := s.Append(ctx, session, expected, batch)
					if err == nil {
						acked[w] = append(acked[w], got...)
						break
					}
					if ctx.Err() != nil {
						errs[w] = fmt.Errorf("worker %d: gave up on batch %d: %w", w, n, err)
						return
					}
					if errors.Is(err, persistence.ErrIndexConflict) || errors.Is(err, persistence.ErrPartialDuplicateBatch) {
						errs[w] = fmt.Errorf("worker %d: resubmission of batch %d: %w", w, n, err)
						return
					}
					failures.Add(1)
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	out, err := exec.CommandContext(ctx, "sh", "-c", restart).CombinedOutput()
	if err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("restart command %q: %v\n%s", restart, err, out)
	}
	// Keep appending until every worker has been acknowledged again.
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if failures.Load() == 0 {
		t.Fatal("no append failed: the restart did not cut any caller off, so the test proved nothing")
	}
	t.Logf("%d appends failed during the restart and were resubmitted", failures.Load())
	if st, b := s.commit.statements.Load(), s.commit.batches.Load(); st >= b {
		t.Fatalf("%d appends took %d statements: the appends never shared a commit, so no group was cut off", b, st)
	}

	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s2 := openStore(t, url, schema, Options{})
	for w := range workers {
		session := fmt.Sprintf("restart-%d", w)
		got, err := s2.Read(t.Context(), session, 0, 1<<20)
		if err != nil {
			t.Fatalf("Read(%s): %v", session, err)
		}
		if len(got) != len(acked[w]) || len(got) == 0 {
			t.Fatalf("session %s holds %d events, %d were acknowledged", session, len(got), len(acked[w]))
		}
		for i := range got {
			a := acked[w][i]
			if got[i].ID != a.ID || got[i].Index != a.Index || got[i].Time != a.Time || string(got[i].Payload) != string(a.Payload) {
				t.Fatalf("session %s event %d = %+v, acknowledged %+v", session, i, got[i], a)
			}
		}
	}
}
