package actors

import (
	"sync/atomic"

	"github.com/a2-runtime/a2/protocol"
)

// sessionStatus is what an active session actor publishes of its state for
// Runtime.Idle: its durable log index, whether the session is idle at it
// and whether a write is in flight, in one word (index<<3 | writing<<2 |
// idle<<1 | 1; 0 while nothing is published). The actor sets it when it
// has loaded its state, when a write starts and when it became durable;
// it is the only writer, and Idle's callers, on any goroutine, read it.
// While a write is in flight Idle asks the actor, which answers once the
// write is durable: an event of that write may already be streamed, and
// the status from before it would call the session idle before that event.
// Otherwise the status is what the actor would answer.
type sessionStatus struct{ v atomic.Uint64 }

const (
	statusSet     = 1
	statusIdle    = 2
	statusWriting = 4
	statusShift   = 3
)

// publishStatus sets the session's status from its state, with no write in
// flight.
func (s *sessionActor) publishStatus() {
	if s.status == nil {
		s.status = &sessionStatus{}
		s.rt.statuses.Store(key(s.agent.Name(), s.id), s.status)
	}
	v := s.index<<statusShift | statusSet
	if s.state.AI.Idle() {
		v |= statusIdle
	}
	s.status.v.Store(v)
}

// publishWriting marks the status as having a write in flight.
func (s *sessionActor) publishWriting() {
	if s.status != nil {
		s.status.v.Store(s.status.v.Load() | statusWriting)
	}
}

// unpublishStatus withdraws the session's status: the actor stops or
// cannot answer, and Idle asks it (or its next activation) instead.
func (s *sessionActor) unpublishStatus() {
	if s.status != nil {
		s.rt.statuses.CompareAndDelete(key(s.agent.Name(), s.id), s.status)
		s.status = nil
	}
}

// publishedStatus returns a session's published status, ok false when its
// actor published none (not active, or not loaded yet).
func (r *Runtime) publishedStatus(agent, session string) (index uint64, idle, ok bool) {
	if _, found := r.agents[agent]; !found || protocol.ValidateCallerID("session", session) != nil {
		return 0, false, false // the asking path says what is wrong
	}
	e, found := r.statuses.Load(key(agent, session))
	if !found {
		return 0, false, false
	}
	v := e.(*sessionStatus).v.Load()
	if v&statusSet == 0 || v&statusWriting != 0 {
		return 0, false, false
	}
	return v >> statusShift, v&statusIdle != 0, true
}
