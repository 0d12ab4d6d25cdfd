package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/protocol"
)

// Router is what the gateway serves: the sessions of a set of agents. The
// single-node runtime (RuntimeRouter over *actors.Runtime) implements it,
// and so does the cluster's router (cluster.Router), which sends each
// request to the member that places the session. Every method is safe for
// concurrent use.
//
// Errors the gateway maps to HTTP statuses: actors.ErrUnknownAgent (404),
// *protocol.ValidationError (400), actors.ErrPartialDuplicateBatch and
// actors.ErrSessionOwned (409), actors.ErrUnavailable and actors.ErrClosed
// (503). Anything else is an internal error (500).
type Router interface {
	// Push validates events pushed by a client (trusted false) or appended by
	// server code (trusted true) and returns the persisted events once
	// durable. An identical resubmission returns the stored events and
	// appends nothing; on any error nothing is appended.
	Push(ctx context.Context, agent, session string, events []protocol.Event, trusted bool) ([]protocol.Event, error)
	// State returns the session's folded state and the log index it is at.
	State(ctx context.Context, agent, session string) (*protocol.SessionState, uint64, error)
	// Subscribe checks the agent and session, then streams the session's
	// durable events with an index greater than after, in order, with no gap
	// and no duplicate: history first, then the live tail. The channel
	// closes when ctx ends or the subscription fails (the error is then sent
	// on the error channel first).
	Subscribe(ctx context.Context, agent, session string, after uint64) (<-chan protocol.Event, <-chan error, error)
	// History returns up to limit durable events of the session with an
	// index greater than after, in index order.
	History(ctx context.Context, agent, session string, after uint64, limit int) ([]protocol.Event, error)
}

// IdleReader is a Router that also tells a session's durable index and
// whether it is idle there without reading its state: a stream that ends
// once the session is idle (until=idle, a push with stream=1) then costs a
// few such questions per turn, not the whole state. A Router without it
// serves those streams from State.
type IdleReader interface {
	Idle(ctx context.Context, agent, session string) (index uint64, idle bool, err error)
}

// IdleSubscriber is a Router whose streams can end themselves once the
// session is idle: the cluster's, where the session's owner asks its own
// runtime after each event instead of the gateway asking across a hop.
// The event channel closes after the event the session was idle at, with
// io.EOF on the error channel. A router that cannot serve it for a
// session (a member of an older build) answers errors.ErrUnsupported, and
// the gateway subscribes and asks IdleReader itself.
type IdleSubscriber interface {
	SubscribeUntilIdle(ctx context.Context, agent, session string, after uint64) (<-chan protocol.Event, <-chan error, error)
}

// PushStreamer is a Router that pushes and opens the stream until idle
// from the first stored event in one step: the cluster's, where the push
// and the subscription are then one request to the session's owner. The
// channels are those of IdleSubscriber's; a push that stored nothing
// answers nil channels. A router that cannot (a member of an older build)
// answers errors.ErrUnsupported having pushed nothing, and the gateway
// pushes and subscribes itself.
type PushStreamer interface {
	PushUntilIdle(ctx context.Context, agent, session string, events []protocol.Event, trusted bool) (stored []protocol.Event, evs <-chan protocol.Event, errc <-chan error, err error)
}

// RuntimeRouter serves the sessions of one in-process runtime.
type RuntimeRouter struct {
	Runtime *actors.Runtime
}

var (
	_ Router      = RuntimeRouter{}
	_ AgentLister = RuntimeRouter{}
)

// Agents implements AgentLister.
func (r RuntimeRouter) Agents() []string { return r.Runtime.Agents() }

// check refuses an unknown agent and a session ID that breaks the caller-ID
// rules, before anything reads the store.
func (r RuntimeRouter) check(agent, session string) error {
	if _, ok := r.Runtime.Agent(agent); !ok {
		return fmt.Errorf("%w %q", actors.ErrUnknownAgent, agent)
	}
	return protocol.ValidateCallerID("session", session)
}

// Push implements Router.
func (r RuntimeRouter) Push(ctx context.Context, agent, session string, events []protocol.Event, trusted bool) ([]protocol.Event, error) {
	return r.Runtime.Push(ctx, agent, session, events, trusted)
}

// State implements Router.
func (r RuntimeRouter) State(ctx context.Context, agent, session string) (*protocol.SessionState, uint64, error) {
	return r.Runtime.State(ctx, agent, session)
}

// Idle implements IdleReader.
func (r RuntimeRouter) Idle(ctx context.Context, agent, session string) (uint64, bool, error) {
	return r.Runtime.Idle(ctx, agent, session)
}

// Subscribe implements Router.
func (r RuntimeRouter) Subscribe(ctx context.Context, agent, session string, after uint64) (<-chan protocol.Event, <-chan error, error) {
	if err := r.check(agent, session); err != nil {
		return nil, nil, err
	}
	evs, errc := r.Runtime.Subscribe(ctx, agent, session, after)
	// Subscribe reports a refusal (a session another agent owns) on errc
	// before it returns: answer it before the stream's headers, so that the
	// client gets a status.
	select {
	case err := <-errc:
		return nil, nil, err
	default:
	}
	return evs, errc, nil
}

// History implements Router.
func (r RuntimeRouter) History(ctx context.Context, agent, session string, after uint64, limit int) ([]protocol.Event, error) {
	if err := r.check(agent, session); err != nil {
		return nil, err
	}
	evs, err := r.Runtime.History(ctx, agent, session, after, limit)
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, actors.ErrUnknownAgent) && !errors.Is(err, actors.ErrSessionOwned) {
		return nil, fmt.Errorf("%w: %v", actors.ErrUnavailable, err)
	}
	return evs, err
}
