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

type handlerDone struct{ eventID string }

// errEventMissing: the store does not return the event a handler owes a
// run for (it folded from the log, so a store that lost it is broken).
var errEventMissing = errors.New("actors: the handled event is not in the store")

// handlerBackoff is the wait after a handler's first failure; it doubles
// up to handlerMaxBackoff.
var (
	handlerBackoff    = 100 * time.Millisecond
	handlerMaxBackoff = 30 * time.Second
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
		for id, running := range s.handlerRuns {
			if !running && !owed[id] {
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
			s.handlerRuns = map[string]bool{}
			s.handlerCtx, s.stopHandlers = context.WithCancelCause(context.Background())
		}
		s.handlerRuns[w.EventID] = true
		ctx, store, session, id, self, sys, logger := s.handlerCtx, s.store, s.id, w.EventID, s.self, s.rt.system, s.rt.opts.Logger
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
	s.handlerRuns[m.eventID] = false // done; forgotten once the completion is folded
	s.queueWork(protocol.Event{ID: protocol.DeriveID("handled", s.id, m.eventID), Type: protocol.TypeHandlerCompleted,
		Payload: mustJSON(protocol.HandlerCompleted{EventID: m.eventID}), Cause: m.eventID})
	s.flushSoon()
}

// handlersRunning reports whether a handler runs or its completion is not
// written yet: the actor does not passivate meanwhile.
func (s *sessionActor) handlersRunning() bool {
	return len(s.handlerRuns) > 0
}
