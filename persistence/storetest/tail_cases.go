package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// tailCases: Wait, and live tails built from Wait and Read.
var tailCases = []testCase{
	{name: "wait/returns-at-once-when-the-log-is-ahead", run: func(e *env) {
		e.append("s1", 0, evs("a", 3)...)
		for after := range uint64(3) {
			n, err := e.s.Wait(e.ctx, "s1", after)
			if err != nil || n != 3 {
				e.t.Fatalf("Wait(after %d) = %d, %v; want 3", after, n, err)
			}
		}
	}},
	{name: "wait/wakes-on-append", run: func(e *env) {
		e.append("s1", 0, evs("a", 1)...)
		done := make(chan struct{})
		var n uint64
		var err error
		go func() {
			defer close(done)
			n, err = e.s.Wait(e.ctx, "s1", 1)
		}()
		time.Sleep(20 * time.Millisecond) // let Wait block; the result does not depend on it
		e.append("s1", 1, evs("b", 2)...)
		<-done
		if err != nil || n != 3 {
			e.t.Fatalf("Wait(after 1) = %d, %v; want 3", n, err)
		}
	}},
	{name: "wait/other-sessions-do-not-wake-it-early", run: func(e *env) {
		ctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
		defer cancel()
		go func() {
			for i := range 5 {
				if _, err := e.s.Append(e.ctx, "other", uint64(i), evs(fmt.Sprintf("o%d", i), 1)); err != nil {
					return
				}
			}
		}()
		n, err := e.s.Wait(ctx, "s1", 0)
		if !errors.Is(err, context.DeadlineExceeded) {
			e.t.Fatalf("Wait on an idle session = %d, %v; want context.DeadlineExceeded", n, err)
		}
	}},
	{name: "wait/cancelled-by-context", run: func(e *env) {
		e.append("s1", 0, evs("a", 1)...)
		ctx, cancel := context.WithCancel(e.ctx)
		go func() {
			time.Sleep(20 * time.Millisecond)
			cancel()
		}()
		n, err := e.s.Wait(ctx, "s1", 1)
		if !errors.Is(err, context.Canceled) {
			e.t.Fatalf("cancelled Wait = %d, %v; want context.Canceled", n, err)
		}
		dl, cancel2 := context.WithTimeout(e.ctx, 10*time.Millisecond)
		defer cancel2()
		n, err = e.s.Wait(dl, "empty", 0)
		if !errors.Is(err, context.DeadlineExceeded) {
			e.t.Fatalf("Wait past its deadline = %d, %v; want context.DeadlineExceeded", n, err)
		}
	}},
	{name: "wait/unblocked-by-close", run: func(e *env) {
		unblockedByClose(e, "Wait", func() error {
			_, err := e.s.Wait(e.ctx, "s1", 0)
			return err
		})
	}},
	{name: "tail/followers-see-every-index-once-in-order", run: func(e *env) {
		followLiveTail(e, 4, 3, 240)
	}},
}

// followLiveTail runs writers that append total events to one session (each
// retrying on ErrIndexConflict) while followers tail it with Wait and Read
// from index 0. Every follower must see indexes 1..total exactly once, in
// order, each event equal to the final log's.
func followLiveTail(e *env, writers, followers, total int) {
	const session = "tail"
	type seen struct {
		events []protocol.Event
		err    error
	}
	results := make([]seen, followers)
	var wg sync.WaitGroup
	for f := range followers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var after uint64
			limit := 1 + f*3 // followers read in different page sizes
			for after < uint64(total) {
				if _, err := e.s.Wait(e.ctx, session, after); err != nil {
					results[f].err = fmt.Errorf("Wait(after %d): %w", after, err)
					return
				}
				got, err := e.s.Read(e.ctx, session, after, limit)
				if err != nil {
					results[f].err = fmt.Errorf("Read(after %d): %w", after, err)
					return
				}
				if len(got) == 0 {
					results[f].err = fmt.Errorf("Read(after %d) is empty although Wait reported more", after)
					return
				}
				for _, g := range got {
					if g.Index != after+1 {
						results[f].err = fmt.Errorf("after index %d came %d", after, g.Index)
						return
					}
					after = g.Index
					results[f].events = append(results[f].events, g)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		raceWriters(e, session, writers, total)
	}()
	wg.Wait()
	final := e.log(session)
	if len(final) != total {
		e.t.Fatalf("log has %d events, want %d", len(final), total)
	}
	for f, r := range results {
		if r.err != nil {
			e.t.Fatalf("follower %d: %v", f, r.err)
		}
		if !sameEvents(r.events, final) {
			e.t.Fatalf("follower %d saw %d events that differ from the log", f, len(r.events))
		}
	}
}

// raceWriters runs writers that append total single-event batches to one
// session, each retrying on ErrIndexConflict, and fails the case on any
// other error. It returns when all are written.
func raceWriters(e *env, session string, writers, total int) {
	var (
		wg   sync.WaitGroup
		next sync.Mutex // hands out event numbers
		n    int
	)
	errs := make([]error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				next.Lock()
				if n >= total {
					next.Unlock()
					return
				}
				n++
				batch := []protocol.Event{ev(fmt.Sprintf("%s-%d", session, n), "test.note", fmt.Sprintf(`{"writer":%d}`, w))}
				next.Unlock()
				for {
					last, err := e.s.LastIndex(e.ctx, session)
					if err == nil {
						_, err = e.s.Append(e.ctx, session, last, batch)
					}
					if err == nil {
						break
					}
					if !errors.Is(err, persistence.ErrIndexConflict) {
						errs[w] = err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			e.t.Errorf("writer %d: %v", w, err)
		}
	}
}

// unblockedByClose runs call, which blocks, closes the store and checks
// that call returns ErrClosed soon after.
func unblockedByClose(e *env, what string, call func() error) {
	errc := make(chan error, 1)
	go func() { errc <- call() }()
	time.Sleep(20 * time.Millisecond)
	if err := e.s.Close(); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		wantErr(e.t, what+" on a store being closed", err, persistence.ErrClosed)
	case <-time.After(10 * time.Second):
		e.t.Fatal(what + " still blocked 10 s after Close")
	}
}
