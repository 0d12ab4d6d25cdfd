package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// Application event handlers (R-CONTRACT-15, R-LOG-18). The agent's
// contract records every event of a handled type as handler work in the
// state (protocol.Contract.WithHandlers); the session actor runs each
// handler until it returns nil, then appends ai.handler.completed, which
// ends the work. A handler that fails runs again after a backoff; one that
// is running when its actor stops (or its process dies) runs again at the
// next activation: at least once, with the event, whose ID is the
// idempotency key for its side effects.
//
// A handler that keeps failing (a downstream service down for hours, a bug
// that fails on one event) runs handlerAttempts times in a row, then rests
// (5 minutes, doubling at each rest of the session's handlers up to an
// hour, until one succeeds): meanwhile it does not keep its session
// active, so the session may passivate and free its memory, and a timer of
// the runtime wakes the session (activating it if need be) to run the
// handler again. Before, such a handler retried every 30 s for ever and
// held its session in memory all along.

type handlerDone struct{ eventID string }

// handlerResting: the handler of eventID failed handlerAttempts times in a
// row and rests; wakeHandlers: the rest is over.
type (
	handlerResting struct{ eventID string }
	wakeHandlers   struct{}
	handlersWoken  struct{}
)

// handlerState is where an application event's handler run stands in this
// activation.
type handlerState int8

const (
	handlerRunning handlerState = iota // running, or waiting to run again
	handlerDoneRun                     // returned nil; its completion is not folded yet
	handlerAtRest                      // failed handlerAttempts times in a row; runs again when woken
)

// errEventMissing: the store does not return the event a handler owes a
// run for (it folded from the log, so a store that lost it is broken).
var errEventMissing = errors.New("actors: the handled event is not in the store")

// handlerBackoff is the wait after a handler's first failure; it doubles
// up to handlerMaxBackoff. After handlerAttempts failures in a row (51 s of
// backoff with these values) the handler rests: handlerRest the first time,
// twice as long each time after, up to handlerMaxRest, until it succeeds.
var (
	handlerBackoff    = 100 * time.Millisecond
	handlerMaxBackoff = 30 * time.Second
	handlerAttempts   = 10
	handlerRest       = 5 * time.Minute
	handlerMaxRest    = time.Hour
)

// reconcileHandlers starts the handler of every application event the
// state owes a run that is not running yet.
func (s *sessionActor) reconcileHandlers(work []protocol.Work) {
	if len(s.agent.opts.Handlers) == 0 {
		return // the common case, on every write: nothing to do
	}
	if s.writing {
		// The state holds the batch being written: its events are not
		// durable yet. Persist, then act: the write's end reconciles again.
		return
	}
	// A run stays listed until its completion is folded (the state no
	// longer owes it), so that it does not start again meanwhile.
	if len(s.handlerRuns) > 0 {
		owed := map[string]bool{}
		for _, w := range work {
			if w.Kind == protocol.WorkHandler {
				owed[w.EventID] = true
			}
		}
		for id, st := range s.handlerRuns {
			if st != handlerRunning && !owed[id] {
				delete(s.handlerRuns, id)
			}
		}
	}
	for _, w := range work {
		if _, known := s.handlerRuns[w.EventID]; w.Kind != protocol.WorkHandler || known {
			continue
		}
		h := s.agent.opts.Handlers[w.EventType]
		if h == nil {
			continue // an agent without this handler any more owes nothing to run
		}
		if s.handlerRuns == nil {
			s.handlerRuns = map[string]handlerState{}
			s.handlerCtx, s.stopHandlers = context.WithCancelCause(context.Background())
		}
		s.handlerRuns[w.EventID] = handlerRunning
		ctx, store, session, id, self, sys, logger := s.handlerCtx, s.store, s.id, w.EventID, s.self, s.rt.system, s.rt.opts.Logger
		attempts := handlerAttempts
		go func() {
			wait := handlerBackoff
			for attempt := 1; ; attempt++ {
				err := runHandler(ctx, h, store, id)
				if err == nil {
					sys.Root.Send(self, &handlerDone{eventID: id})
					return
				}
				if ctx.Err() != nil {
					return // the actor stopped: the next activation runs it again
				}
				if attempt >= attempts {
					logger.Error("application handler failed every attempt; it rests, and runs again after the rest",
						"session", session, "event", id, "attempts", attempt, "err", err)
					sys.Root.Send(self, &handlerResting{eventID: id})
					return
				}
				logger.Warn("application handler failed; it runs again", "session", session, "event", id, "attempt", attempt, "err", err)
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
				wait = min(2*wait, handlerMaxBackoff)
			}
		}()
	}
}

// runHandler reads the event and runs h on it; a panic is an error.
func runHandler(ctx context.Context, h Handler, store persistence.Store, id string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the handler panicked: %v", r)
		}
	}()
	evs, err := store.Lookup(ctx, []string{id})
	if err != nil {
		return err
	}
	if len(evs) != 1 {
		return errEventMissing
	}
	return h(ctx, evs[0])
}

func (s *sessionActor) onHandlerDone(m *handlerDone) {
	s.handlerRuns[m.eventID] = handlerDoneRun // forgotten once the completion is folded
	s.rt.handlerSucceeded(s.agent, s.id)
	s.queueWork(protocol.Event{ID: protocol.DeriveID("handled", s.id, m.eventID), Type: protocol.TypeHandlerCompleted,
		Payload: mustJSON(protocol.HandlerCompleted{EventID: m.eventID}), Cause: m.eventID})
	s.flushSoon()
}

// onHandlerResting puts a handler that failed every attempt to rest: it no
// longer keeps the session active, and the runtime wakes the session after
// the rest (wakeHandlersLater), activating it if it passivated meanwhile.
func (s *sessionActor) onHandlerResting(m *handlerResting) {
	if s.handlerRuns[m.eventID] != handlerRunning {
		return
	}
	s.handlerRuns[m.eventID] = handlerAtRest
	s.rt.wakeHandlersLater(s.agent, s.id)
}

// onWakeHandlers ends the rest of the resting handlers: they run again.
func (s *sessionActor) onWakeHandlers() {
	woken := false
	for id, st := range s.handlerRuns {
		if st == handlerAtRest {
			delete(s.handlerRuns, id)
			woken = true
		}
	}
	if woken {
		s.reconcile()
	}
}

// handlersRunning reports whether a handler runs or its completion is not
// written yet: the actor does not passivate meanwhile. A resting handler
// does not count.
func (s *sessionActor) handlersRunning() bool {
	for _, st := range s.handlerRuns {
		if st != handlerAtRest {
			return true
		}
	}
	return false
}
