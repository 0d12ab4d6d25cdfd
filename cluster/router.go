package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/actors/sessionpb"
	"github.com/a2-runtime/a2/cluster/clusterpb"
	"github.com/a2-runtime/a2/internal/wire"
	"github.com/a2-runtime/a2/protocol"
)

// Router serves the cluster's sessions over HTTP: it implements
// gateway.Router, routing every request by session ID to the member that
// places the session, with the semantics of a single node (the member's
// runtime validates, decides and answers; errors keep their kinds across
// the hop). Requests retry while a session moves (call.go).
type Router struct{ n *Node }

// Router returns the node's router.
func (n *Node) Router() Router { return Router{n} }

// agent returns the named agent, as the gateway knows it.
func (r Router) agent(name string) (*actors.Agent, error) {
	if a, ok := r.n.agents[name]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("%w %q", actors.ErrUnknownAgent, name)
}

// check refuses an unknown agent and a malformed session ID before any
// request leaves this node.
func (r Router) check(agent, session string) error {
	if _, err := r.agent(agent); err != nil {
		return err
	}
	return protocol.ValidateCallerID("session", session)
}

// Push implements gateway.Router.
func (r Router) Push(ctx context.Context, agent, session string, events []protocol.Event, trusted bool) ([]protocol.Event, error) {
	if err := r.check(agent, session); err != nil {
		return nil, err
	}
	var res sessionpb.PushResponse
	if _, err := r.n.request(ctx, session, kindPush, pushRequest(agent, session, events, trusted), &res); err != nil {
		return nil, err
	}
	return wire.EventsFromPB(res.Events), nil
}

// PushUntilIdle implements gateway.PushStreamer: the push and the stream
// until idle from its first event are one request to the session's owner
// (kind push.stream), a round trip fewer than Push then
// SubscribeUntilIdle. A member of an older build answers
// errors.ErrUnsupported (ErrUnsupported wraps it), having pushed nothing.
func (r Router) PushUntilIdle(ctx context.Context, agent, session string, events []protocol.Event, trusted bool) ([]protocol.Event, <-chan protocol.Event, <-chan error, error) {
	if err := r.check(agent, session); err != nil {
		return nil, nil, nil, err
	}
	return r.n.pushSubscribe(ctx, session, pushRequest(agent, session, events, trusted))
}

func pushRequest(agent, session string, events []protocol.Event, trusted bool) *sessionpb.PushRequest {
	req := &sessionpb.PushRequest{Agent: agent, Session: session, Trusted: trusted}
	for _, ev := range events {
		req.Events = append(req.Events, wire.EventToPB(ev))
	}
	return req
}

// State implements gateway.Router.
func (r Router) State(ctx context.Context, agent, session string) (*protocol.SessionState, uint64, error) {
	a, err := r.agent(agent)
	if err != nil {
		return nil, 0, err
	}
	if err := protocol.ValidateCallerID("session", session); err != nil {
		return nil, 0, err
	}
	var res sessionpb.StateResponse
	if _, err := r.n.request(ctx, session, kindState, &sessionpb.StateRequest{Agent: agent, Session: session}, &res); err != nil {
		return nil, 0, err
	}
	st, err := a.Contract().UnmarshalState(res.State)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: the state of session %q does not decode: %v", actors.ErrUnavailable, session, err)
	}
	return st, res.Index, nil
}

// Idle implements gateway.IdleReader. A member of an older build, which
// does not know the question, is answered from its State.
func (r Router) Idle(ctx context.Context, agent, session string) (uint64, bool, error) {
	if _, err := r.agent(agent); err != nil {
		return 0, false, err
	}
	if err := protocol.ValidateCallerID("session", session); err != nil {
		return 0, false, err
	}
	var res clusterpb.IdleResponse
	if _, err := r.n.request(ctx, session, kindIdle, &clusterpb.IdleRequest{Agent: agent, Session: session}, &res); err != nil {
		if !errors.Is(err, ErrUnsupported) {
			return 0, false, err
		}
		st, index, err := r.State(ctx, agent, session)
		if err != nil {
			return 0, false, err
		}
		return index, st.AI.Idle(), nil
	}
	return res.Index, res.Idle, nil
}

// History implements gateway.Router.
func (r Router) History(ctx context.Context, agent, session string, after uint64, limit int) ([]protocol.Event, error) {
	if err := r.check(agent, session); err != nil {
		return nil, err
	}
	var res clusterpb.HistoryResponse
	req := &clusterpb.HistoryRequest{Agent: agent, Session: session, After: after, Limit: int32(min(limit, 1<<30))}
	if _, err := r.n.request(ctx, session, kindHistory, req, &res); err != nil {
		return nil, err
	}
	return wire.EventsFromPB(res.Events), nil
}

// Subscribe implements gateway.Router: the stream follows the session
// across moves of its owner (stream.go).
func (r Router) Subscribe(ctx context.Context, agent, session string, after uint64) (<-chan protocol.Event, <-chan error, error) {
	return r.subscribe(ctx, agent, session, after, false)
}

// SubscribeUntilIdle implements gateway.IdleSubscriber: the owner itself
// ends the stream once the session is idle (kind subscribe.idle), so the
// stream asks nothing across the hop per event. A member of an older build
// answers errors.ErrUnsupported (ErrUnsupported wraps it).
func (r Router) SubscribeUntilIdle(ctx context.Context, agent, session string, after uint64) (<-chan protocol.Event, <-chan error, error) {
	return r.subscribe(ctx, agent, session, after, true)
}

func (r Router) subscribe(ctx context.Context, agent, session string, after uint64, untilIdle bool) (<-chan protocol.Event, <-chan error, error) {
	if err := r.check(agent, session); err != nil {
		return nil, nil, err
	}
	return r.n.subscribe(ctx, agent, session, after, untilIdle)
}
