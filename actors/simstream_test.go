package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/a2-runtime/a2/protocol"
)

// The simulated schedules' live stream (simulate_test.go): a client
// follows the session's log and reconnects at random moments, after the
// last event it got (its Last-Event-ID) or, one time in four, after an
// earlier one (a client that lost what it had shown). A stream delivers
// every event after the one it resumed from once, in order, each the log's
// event at its index: it neither repeats nor skips one, across crashes of
// the runtime (a stream the crash ended is opened again at the next
// reconnect) and failed writes.
type simStream struct {
	cancel context.CancelFunc
	events <-chan protocol.Event
	last   uint64 // the index of the last event delivered
	got    int    // events delivered, over every connection
}

// reconnect drops the client's stream, if any, and opens another.
func (sm *simulation) reconnect() {
	s := sm.stream
	if s == nil {
		s = &simStream{}
		sm.stream = s
	}
	if s.cancel != nil {
		s.cancel()
	}
	if s.last > 0 && sm.r.IntN(4) == 0 {
		s.last = uint64(sm.r.IntN(int(s.last)))
	}
	sm.logf("reconnect after %d", s.last)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.events, _ = sm.tr.f.rt.Subscribe(ctx, sm.tr.f.agent.Name(), sm.tr.session, s.last)
}

// readStream checks what the stream has delivered since the last check
// against log (read again when the stream is past it).
func (sm *simulation) readStream(log []protocol.Event) error {
	s := sm.stream
	for s != nil && s.events != nil {
		var ev protocol.Event
		var ok bool
		select {
		case ev, ok = <-s.events:
		default:
			return nil
		}
		if !ok {
			s.events = nil // ended (a crash closed its runtime): the next reconnect opens another
			return nil
		}
		if ev.Index != s.last+1 {
			return fmt.Errorf("the stream delivered event %d after %d: a repeat or a gap", ev.Index, s.last)
		}
		if ev.Index > uint64(len(log)) {
			log = sm.storedLog()
		}
		if ev.Index > uint64(len(log)) || log[ev.Index-1].ID != ev.ID {
			return fmt.Errorf("the stream's event %d is %s, not the log's", ev.Index, ev.ID)
		}
		s.last = ev.Index
		s.got++
	}
	return nil
}

// streamCaughtUp waits (bounded) until the client's stream, reconnected,
// has delivered the whole log.
func (sm *simulation) streamCaughtUp() error {
	if sm.stream == nil {
		return nil
	}
	defer sm.stream.cancel()
	if sm.stream.events == nil {
		sm.reconnect()
	}
	log := sm.storedLog()
	deadline := time.Now().Add(transcriptWait)
	for sm.stream.last < uint64(len(log)) {
		if err := sm.readStream(log); err != nil {
			return err
		}
		if sm.stream.events == nil || time.Now().After(deadline) {
			return fmt.Errorf("the stream ended at %d of the log's %d events", sm.stream.last, len(log))
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}
