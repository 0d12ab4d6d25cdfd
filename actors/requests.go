// The runtime's requests of a session: pushes, state and idle reads,
// live streams and input requests (runtime.go has the runtime's overview).

package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/a2-runtime/a2/actors/sessionpb"
	"github.com/a2-runtime/a2/internal/wire"
	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/telemetry"
)

// Push validates events pushed by a client (trusted false) or appended by
// server code (trusted true), appends them with their decisions and
// effects, and returns the persisted events once durable (R-INPUT-27). An
// identical resubmission returns the stored events and appends nothing
// (R-LOG-09); a conflicting reuse of an ID fails with
// ErrPartialDuplicateBatch (R-LOG-10). Bad input is a
// *protocol.ValidationError and appends nothing.
func (r *Runtime) Push(ctx context.Context, agentName, session string, events []protocol.Event, trusted bool) ([]protocol.Event, error) {
	a, err := r.agent(agentName)
	if err != nil {
		return nil, err
	}
	if err := protocol.ValidateCallerID("session", session); err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, &protocol.ValidationError{Field: "events", Message: "at least one event is required"}
	}
	trust := protocol.Untrusted
	if trusted {
		trust = protocol.Trusted
	}
	seen := map[string]bool{}
	for i, ev := range events {
		if ev.Session != "" && ev.Session != session {
			return nil, &protocol.ValidationError{Field: fmt.Sprintf("events[%d].session", i), Message: "names another session"}
		}
		if err := a.contract.ValidateIngress(ev, trust); err != nil {
			var ve *protocol.ValidationError
			if errors.As(err, &ve) {
				return nil, &protocol.ValidationError{Field: fmt.Sprintf("events[%d].%s", i, ve.Field), Message: ve.Message}
			}
			return nil, err
		}
		if seen[ev.ID] {
			return nil, &protocol.ValidationError{Field: fmt.Sprintf("events[%d].id", i), Message: "repeats an ID of the same push"}
		}
		seen[ev.ID] = true
	}
	// The caller's span (the HTTP request's, a tool's) continues in the
	// session actor's admit span: the push has no span of its own.
	req := &sessionpb.PushRequest{Agent: agentName, Session: session, Trusted: trusted, Trace: telemetry.Inject(ctx)}
	for _, ev := range events {
		ev.Session = session
		req.Events = append(req.Events, wire.EventToPB(ev))
	}
	res, err := r.request(ctx, a, session, req)
	if err != nil {
		return nil, err
	}
	resp := res.(*sessionpb.PushResponse)
	if resp.Error != nil {
		return nil, wire.FromPBError(resp.Error)
	}
	return wire.EventsFromPB(resp.Events), nil
}

// State returns the session's folded state (AIState merged with the
// application state) and the log index it is at (R-CONTRACT-16). A session
// nobody wrote to reads as the initial state at index 0, without
// activating an actor for it: reads of unknown sessions cost no memory.
func (r *Runtime) State(ctx context.Context, agentName, session string) (*protocol.SessionState, uint64, error) {
	a, b, index, err := r.state(ctx, agentName, session)
	if err != nil {
		return nil, 0, err
	}
	if b == nil {
		return newSessionState(a, session), 0, nil
	}
	st, err := a.contract.UnmarshalState(b)
	if err != nil {
		return nil, 0, err
	}
	return st, index, nil
}

// readable checks a read of a session: its agent and ID, and, when the
// session is not active here, whether its log is empty (a session nobody
// wrote to, read without activating it).
func (r *Runtime) readable(ctx context.Context, agentName, session string) (a *Agent, empty bool, err error) {
	if a, err = r.agent(agentName); err != nil {
		return nil, false, err
	}
	if err := protocol.ValidateCallerID("session", session); err != nil {
		return nil, false, err
	}
	if r.active(a, session) {
		return a, false, nil
	}
	last, err := r.storeOf(a).LastIndex(ctx, session)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		return nil, false, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return a, last == 0, nil
}

// Idle returns the session's durable log index and whether the session is
// idle at it (protocol.AIState.Idle): what a stream that ends once the
// session is idle asks after each event. An active session's actor
// publishes both after each write (sessionStatus), which Idle reads
// without a message to it; another session is asked, which activates it.
// A session nobody wrote to is idle at index 0.
func (r *Runtime) Idle(ctx context.Context, agentName, session string) (uint64, bool, error) {
	if index, idle, ok := r.publishedStatus(agentName, session); ok {
		return index, idle, nil
	}
	a, empty, err := r.readable(ctx, agentName, session)
	if err != nil || empty {
		return 0, err == nil, err
	}
	res, err := r.request(ctx, a, session, &statusRequest{})
	if err != nil {
		return 0, false, err
	}
	reply := res.(*statusReply)
	if reply.err != nil {
		return 0, false, reply.err
	}
	return reply.index, reply.idle, nil
}

// StateJSON is State as the state's JSON (SessionState.MarshalJSON), for a
// node that answers another: it decodes nothing.
func (r *Runtime) StateJSON(ctx context.Context, agentName, session string) ([]byte, uint64, error) {
	a, b, index, err := r.state(ctx, agentName, session)
	if err != nil || b != nil {
		return b, index, err
	}
	b, err = newSessionState(a, session).MarshalJSON()
	return b, 0, err
}

// newSessionState is the state of a session nobody wrote to: the initial
// state, with the session's ID, so that it has the fields of any other.
func newSessionState(a *Agent, session string) *protocol.SessionState {
	st := a.contract.NewState()
	st.AI.Session.ID = session
	return st
}

// state returns the session's state as JSON, nil for a session nobody
// wrote to.
func (r *Runtime) state(ctx context.Context, agentName, session string) (*Agent, []byte, uint64, error) {
	a, empty, err := r.readable(ctx, agentName, session)
	if err != nil || empty {
		return a, nil, 0, err
	}
	res, err := r.request(ctx, a, session, &sessionpb.StateRequest{Agent: agentName, Session: session})
	if err != nil {
		return nil, nil, 0, err
	}
	resp := res.(*sessionpb.StateResponse)
	if resp.Error != nil {
		return nil, nil, 0, wire.FromPBError(resp.Error)
	}
	return a, resp.State, resp.Index, nil
}

// Subscribe streams the agent's session's durable events with an index
// greater than after, in order, with no gap and no duplicate: history from
// the store first, then the live tail. The channel closes when ctx ends or
// the store fails (the error is then sent on errc), or at once with the
// error on errc for an unknown agent or a session another agent owns.
// Subscribing activates a session that has a log, so that work a restart
// cut short resumes for the subscriber without another request; following
// a session nobody has written loads no actor.
func (r *Runtime) Subscribe(ctx context.Context, agentName, session string, after uint64) (<-chan protocol.Event, <-chan error) {
	// A small buffer: the tail buffers durable batches itself (and reads
	// the log when a subscriber falls behind); a large one per subscriber
	// was a quarter of the heap with 1,000 streams.
	out := make(chan protocol.Event, 16)
	errc := make(chan error, 1)
	a, err := r.agent(agentName)
	var tail persistence.Tail
	owned := false
	if err == nil {
		owned, err = checkOwner(ctx, r.storeOf(a), agentName, session)
	}
	if err == nil {
		tail, err = persistence.Follow(r.storeOf(a), session, after)
	}
	if err == nil && !owned {
		// Unclaimed: a session nobody has written (nothing to resume, and
		// following one must not load an actor), or a log from before
		// claims.
		var last uint64
		if last, err = r.storeOf(a).LastIndex(ctx, session); err == nil && last == 0 {
			return relay(ctx, tail, out, errc)
		}
	}
	if err == nil {
		// Following a session wakes it: work a restart cut short (a step,
		// a tool call, a handler) resumes for the client that follows it,
		// without waiting for another request (R-DELIVERY-05).
		_, err = r.pid(a, session)
	}
	if err != nil && tail != nil {
		tail.Close()
	}
	if err != nil {
		errc <- storeUnavailable(ctx, err)
		close(out)
		return out, errc
	}
	return relay(ctx, tail, out, errc)
}

// storeUnavailable is err as a caller should see it: the runtime's own
// refusals as they are, a failure of the store (it cannot be read now) as
// an ErrUnavailable, which the gateway answers 503, not 500.
func storeUnavailable(ctx context.Context, err error) error {
	var ve *protocol.ValidationError
	switch {
	case ctx.Err() != nil, errors.As(err, &ve), errors.Is(err, ErrUnknownAgent), errors.Is(err, ErrSessionOwned),
		errors.Is(err, ErrUnavailable), errors.Is(err, ErrClosed):
		return err
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// relay moves tail's events to out until ctx ends or the tail fails (its
// error then goes to errc), and closes out and the tail.
func relay(ctx context.Context, tail persistence.Tail, out chan protocol.Event, errc chan error) (<-chan protocol.Event, <-chan error) {
	live := telemetry.Metrics().SubscribersLive
	live.Add(ctx, 1)
	go func() {
		defer live.Add(context.Background(), -1)
		defer close(out)
		defer tail.Close()
		for {
			evs, err := tail.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					errc <- err
				}
				return
			}
			for _, ev := range evs {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, errc
}

// requestInput appends a tool call's trusted request-input (its ID derived
// from the call, version and input ID, so a retried attempt asks once) and
// waits for the applied answer, reading the log from the request on.
func (r *Runtime) requestInput(ctx context.Context, agent, session string, req protocol.InputRequest, call string, version int) (json.RawMessage, error) {
	if err := protocol.ValidateCallerID("inputId", req.InputID); err != nil {
		return nil, err
	}
	ev := protocol.Inputs.RequestInput(req)
	ev.ID = protocol.IdempotentID("a2.tool-input", session, call, strconv.Itoa(version), req.InputID)
	stored, err := r.Push(ctx, agent, session, []protocol.Event{ev}, true)
	if err != nil {
		return nil, err
	}
	var after uint64
	for _, e := range stored {
		if e.ID == ev.ID && e.Index > 0 {
			after = e.Index - 1
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, errc := r.Subscribe(ctx, agent, session, after)
	answers := map[string]json.RawMessage{} // answer command ID -> value
	for e := range events {
		switch e.Type {
		case protocol.TypeControlRequested:
			var c protocol.Command
			if json.Unmarshal(e.Payload, &c) == nil && c.Action == protocol.ActionInput && c.InputID == req.InputID &&
				c.RequestID == req.RequestID && c.GenerationID == req.GenerationID {
				answers[e.ID] = c.Value
			}
		case protocol.TypeControlDecided:
			var d protocol.Decided
			if json.Unmarshal(e.Payload, &d) != nil {
				continue
			}
			if d.CommandID == ev.ID && d.Outcome != protocol.OutcomeApplied {
				return nil, fmt.Errorf("the input request was %s: %s", d.Outcome, d.Reason)
			}
			if v, ok := answers[d.CommandID]; ok && d.Outcome == protocol.OutcomeApplied {
				return v, nil
			}
		}
	}
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	return nil, ctx.Err()
}
