package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/cluster/clusterpb"
	"github.com/a2-runtime/a2/cluster/gossip"
	"github.com/a2-runtime/a2/internal/wire"
	"github.com/a2-runtime/a2/telemetry"
)

// Requests between nodes.
//
// A request carries its caller's deadline end to end: each attempt waits at
// most the time left (and at most AttemptTimeout, so that a member that
// died before the gossip noticed costs one attempt), the envelope tells the
// receiver the deadline, and the receiver bounds its own work by it. An
// attempt that finds no grain (a dead letter: the session's grain is not
// active) asks the owner's activator to activate it and tries again at
// once. An attempt answered MOVED (the member no longer places the
// session, or is leaving), LEASE_HELD (the member that had the session
// died and its lease has not expired yet), CLOSED, a timeout or a dead
// letter from a node
// that is gone is retried at the owner of the current view, after a
// backoff from 2 ms doubling to 200 ms that a view change cuts short.
// Every request is safe to retry: pushes are idempotent by event ID
// (R-LOG-09), the rest only read. protoactor's own cluster.Request, with
// its fixed five-second lookups, is not used.

// maxBackoff bounds the pause between two attempts of a request.
const maxBackoff = 200 * time.Millisecond

// errOwnerGone is an attempt abandoned because its member left the view
// (the gossip declared it dead): retried at once at the session's owner of
// the new view.
var errOwnerGone = errors.New("cluster: the member asked left the cluster's view")

// ask sends env to pid and waits up to timeout for its answer. It gives up
// early, with errOwnerGone, when the view no longer lists the member at
// pid's address among the nodes alive: a request to a member that died does not wait
// out its attempt's timeout once the gossip has said so.
func (n *Node) ask(pid *actor.PID, env *clusterpb.Envelope, timeout time.Duration) (*clusterpb.Envelope, error) {
	f := n.system.Root.RequestFuture(pid, env, timeout)
	type result struct {
		res any
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := f.Result()
		done <- result{res, err}
	}()
	v := n.view.Load()
	var r result
	for waiting := true; waiting; {
		select {
		case r = <-done:
			waiting = false
		case <-v.changed:
			v = n.view.Load()
			if !v.alive(pid.Address) {
				return nil, fmt.Errorf("%w: %s", errOwnerGone, pid.Address)
			}
		}
	}
	res, err := r.res, r.err
	if err != nil {
		return nil, err
	}
	renv, ok := res.(*clusterpb.Envelope)
	if !ok {
		return nil, fmt.Errorf("%w: an answer of type %T", ErrUnsupported, res)
	}
	return renv, nil
}

// request sends a request of kind to the grain of session on the member
// that places it, and decodes the answer into out; it returns the member
// that answered.
func (n *Node) request(ctx context.Context, session, kind string, body proto.Message, out proto.Message) (_ gossip.Meta, err error) {
	var answered gossip.Meta
	ctx, span := telemetry.Start(ctx, telemetry.SpanForward, trace.WithSpanKind(trace.SpanKindClient))
	carrier := telemetry.Inject(ctx)
	attempts := 0
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.String(telemetry.AttrCluster, kind), attribute.String(telemetry.AttrSession, session),
				attribute.String(telemetry.AttrTarget, answered.ID), attribute.Int(telemetry.AttrAttempt, attempts))
			telemetry.Fail(span, wire.CodeOf(err), err)
		}
		span.End()
	}()
	err = n.retry(ctx, session, func(owner gossip.Meta, timeout time.Duration, dl time.Time) (*clusterpb.Envelope, error) {
		answered = owner
		attempts++
		grainPID := actor.NewPID(owner.Address(), grainPrefix+session)
		env := wrap(kind, body, dl)
		env.Trace = carrier
		res, err := n.ask(grainPID, env, timeout)
		if !errors.Is(err, actor.ErrDeadLetter) {
			return res, err
		}
		// No grain there: activate it, then ask again.
		act, err := n.ask(actor.NewPID(owner.Address(), activatorName), wrap(kindActivate, &clusterpb.ActivateRequest{Session: session}, dl), time.Until(dl))
		if err != nil {
			return nil, err
		}
		if err := answer(act, &clusterpb.ActivateResponse{}); err != nil {
			return act, nil // the loop reads the error (MOVED: retried)
		}
		return n.ask(grainPID, env, max(time.Until(dl), time.Millisecond))
	}, out)
	return answered, err
}

// retry runs attempt at the owner of session in the current view until an
// answer other than a retryable one, or until ctx ends (with no deadline:
// RequestTimeout). It decodes a result into out.
func (n *Node) retry(ctx context.Context, session string, attempt func(owner gossip.Meta, timeout time.Duration, deadline time.Time) (*clusterpb.Envelope, error), out proto.Message) error {
	parent := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.RequestTimeout)
		defer cancel()
	}
	dl, _ := ctx.Deadline()
	backoff := 2 * time.Millisecond
	var last error
	for {
		v := n.view.Load()
		owner, ok := ownerOf(session, v.hosts)
		if !ok {
			last = ErrNoMembers
		} else if timeout := min(time.Until(dl), n.cfg.AttemptTimeout); timeout > 0 {
			env, err := attempt(owner, timeout, dl)
			if err == nil {
				err = answer(env, out)
				if err == nil || !retryable(err) {
					return err
				}
			}
			last = err
		}
		select {
		case <-time.After(backoff):
		case <-v.changed:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		backoff = min(backoff*2, maxBackoff)
	}
	if err := parent.Err(); err != nil {
		return err
	}
	if last == nil {
		last = ctx.Err()
	}
	return fmt.Errorf("%w: session %q: no member answered in time: %v", actors.ErrUnavailable, session, last)
}

// retryable reports whether an answer asks for another attempt.
func retryable(err error) bool {
	return errors.Is(err, actors.ErrMoved) || errors.Is(err, actors.ErrClosed) || errors.Is(err, actors.ErrLeaseHeld)
}

// alive reports whether the view lists a node alive (leaving ones
// included) whose remote address is addr.
func (v *view) alive(addr string) bool {
	for _, m := range v.all {
		if m.Address() == addr {
			return true
		}
	}
	return false
}
