package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	protocluster "github.com/asynkron/protoactor-go/cluster"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/actors/sessionpb"
	"github.com/a2-runtime/a2/cluster/clusterpb"
	"github.com/a2-runtime/a2/cluster/gossip"
	"github.com/a2-runtime/a2/internal/wire"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/telemetry"
)

// grain is a session's actor of kind "session" on the member that places
// it, at the PID "session/<id>": it serves the session's requests from
// other nodes (push, state, history, live streams) on the member's
// runtime, whose session actor stays the single writer of the log. Each
// request runs on its own goroutine, so that a slow one (a push waits
// until durable) holds up neither the others nor the grain's mailbox.
type grain struct {
	n       *Node
	session string
}

func (g *grain) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		g.session = c.Self().Id[len(grainPrefix):]
		c.SetReceiveTimeout(g.n.cfg.GrainIdle)
	case *clusterpb.Envelope:
		g.n.serveGrain(c, g.session, m)
	case *actor.ReceiveTimeout:
		if !g.n.rt.IsActive(g.session) && !g.n.hasStreams(g.session) {
			c.Stop(c.Self())
			return
		}
		// protoactor cancels a receive timeout once it fires: a grain whose
		// session is still active, or streamed, sets it again, or it would
		// never stop.
		c.SetReceiveTimeout(g.n.cfg.GrainIdle)
	case *actor.Stopping:
		g.n.endStreams(g.session, errMovedAway)
	case *actor.Stopped:
		g.n.grainStopped(g.session, c.Self())
	}
}

// accept returns the sender of an envelope and a function that answers it
// (from any goroutine; nothing when it was sent without a sender); ok is
// false when the envelope was refused (a newer version), answered already.
func (n *Node) accept(c actor.Context, env *clusterpb.Envelope) (sender *actor.PID, respond func(*clusterpb.Envelope), ok bool) {
	sender = c.Sender()
	respond = func(res *clusterpb.Envelope) {
		if sender != nil {
			n.system.Root.Send(sender, res)
		}
	}
	if bad := check(env); bad != nil {
		n.cfg.Logger.Warn("refused an envelope of a newer version", "kind", env.Kind, "version", env.Version, "from", sender)
		respond(bad)
		return sender, respond, false
	}
	return sender, respond, true
}

// serveGrain serves one envelope sent to a session's grain.
func (n *Node) serveGrain(c actor.Context, session string, env *clusterpb.Envelope) {
	sender, respond, ok := n.accept(c, env)
	if !ok {
		return
	}
	switch env.Kind {
	case kindStreamAck:
		var m clusterpb.StreamAck
		if unwrap(env, &m) == nil {
			n.ackStream(m.Stream, m.Seq)
		}
		return
	case kindStreamEnd:
		var m clusterpb.StreamEnd
		if unwrap(env, &m) == nil {
			n.endStream(m.Stream)
		}
		return
	case kindPush, kindPushStream, kindState, kindIdle, kindHistory, kindSubscribe, kindSubscribeIdle:
	default:
		n.cfg.Logger.Warn("refused an envelope of an unknown kind", "kind", env.Kind, "from", sender)
		respond(badMessage(codeUnsupported, "unknown envelope kind %q", env.Kind))
		return
	}
	go func() {
		ctx, cancel := context.WithDeadline(context.Background(), deadlineOf(env, n.cfg.RequestTimeout))
		defer cancel()
		// The caller's trace continues here (a malformed one is ignored).
		ctx, span := telemetry.Start(telemetry.Extract(ctx, env.Trace), telemetry.SpanServe, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String(telemetry.AttrCluster, env.Kind), attribute.String(telemetry.AttrSession, session)))
		res := n.serveRequest(ctx, session, env)
		if res.Kind == kindError && span.IsRecording() {
			var e sessionpb.Error
			if proto.Unmarshal(res.Body, &e) == nil {
				span.SetStatus(codes.Error, e.Message)
				span.SetAttributes(attribute.String(telemetry.ErrorType, e.Code))
			}
		}
		span.End()
		respond(res)
	}()
}

// pushResponse is the answer to a push: its stored events.
func pushResponse(stored []protocol.Event) *sessionpb.PushResponse {
	res := &sessionpb.PushResponse{}
	for _, ev := range stored {
		res.Events = append(res.Events, wire.EventToPB(ev))
	}
	return res
}

// serveRequest runs one request on the member's runtime and returns its
// answer. The runtime's own checks apply as on a single node; a session
// this member no longer places is answered MOVED (actors.ErrMoved).
func (n *Node) serveRequest(ctx context.Context, session string, env *clusterpb.Envelope) *clusterpb.Envelope {
	switch env.Kind {
	case kindPush:
		var m sessionpb.PushRequest
		if bad := unwrap(env, &m); bad != nil {
			return bad
		}
		if m.Session != session {
			return badMessage(codeBadMessage, "a push for session %q reached the grain of %q", m.Session, session)
		}
		stored, err := n.rt.Push(ctx, m.Agent, session, wire.EventsFromPB(m.Events), m.Trusted)
		if err != nil {
			return errorEnvelope(err)
		}
		return wrap(kindResult, pushResponse(stored), time.Time{})
	case kindPushStream:
		var m clusterpb.PushStreamRequest
		if bad := unwrap(env, &m); bad != nil {
			return bad
		}
		if m.Push == nil || m.Subscribe == nil || m.Push.Session != session || m.Subscribe.Agent != m.Push.Agent {
			return badMessage(codeBadMessage, "a push with a stream for session %q needs a push and a subscription of that session and agent", session)
		}
		if m.Subscribe.Stream == "" || m.Subscribe.SubscriberAddress == "" || m.Subscribe.SubscriberId == "" {
			return badMessage(codeBadMessage, "a push with a stream needs the stream's ID and subscriber")
		}
		stored, err := n.rt.Push(ctx, m.Push.Agent, session, wire.EventsFromPB(m.Push.Events), m.Push.Trusted)
		if err != nil {
			return errorEnvelope(err)
		}
		if len(stored) > 0 {
			// The push is durable: a failure to open the stream now is
			// the answer (a retry replays the push and opens it).
			m.Subscribe.After = stored[0].Index - 1
			if m.AfterPushed {
				m.Subscribe.After = stored[len(stored)-1].Index
			}
			if err := n.serveStream(session, m.Subscribe, true); err != nil {
				return errorEnvelope(err)
			}
		}
		return wrap(kindResult, pushResponse(stored), time.Time{})
	case kindState:
		var m sessionpb.StateRequest
		if bad := unwrap(env, &m); bad != nil {
			return bad
		}
		b, index, err := n.rt.StateJSON(ctx, m.Agent, session)
		if err != nil {
			return errorEnvelope(err)
		}
		return wrap(kindResult, &sessionpb.StateResponse{State: b, Index: index}, time.Time{})
	case kindIdle:
		var m clusterpb.IdleRequest
		if bad := unwrap(env, &m); bad != nil {
			return bad
		}
		index, idle, err := n.rt.Idle(ctx, m.Agent, session)
		if err != nil {
			return errorEnvelope(err)
		}
		return wrap(kindResult, &clusterpb.IdleResponse{Index: index, Idle: idle}, time.Time{})
	case kindHistory:
		var m clusterpb.HistoryRequest
		if bad := unwrap(env, &m); bad != nil {
			return bad
		}
		if err := n.checkSession(m.Agent, session); err != nil {
			return errorEnvelope(err)
		}
		evs, err := n.rt.History(ctx, m.Agent, session, m.After, int(m.Limit))
		if err != nil {
			return errorEnvelope(err)
		}
		res := &clusterpb.HistoryResponse{}
		for _, ev := range evs {
			res.Events = append(res.Events, wire.EventToPB(ev))
		}
		return wrap(kindResult, res, time.Time{})
	case kindSubscribe, kindSubscribeIdle:
		var m clusterpb.SubscribeRequest
		if bad := unwrap(env, &m); bad != nil {
			return bad
		}
		if err := n.serveStream(session, &m, env.Kind == kindSubscribeIdle); err != nil {
			return errorEnvelope(err)
		}
		return wrap(kindResult, &clusterpb.SubscribeResponse{}, time.Time{})
	}
	return badMessage(codeUnsupported, "unknown envelope kind %q", env.Kind)
}

// checkSession refuses an unknown agent and a session ID that breaks the
// caller-ID rules, as the single node's router does before a read.
func (n *Node) checkSession(agent, session string) error {
	if n.rt != nil {
		if _, ok := n.rt.Agent(agent); !ok {
			return errUnknownAgent(agent)
		}
	} else if _, ok := n.agents[agent]; !ok {
		return errUnknownAgent(agent)
	}
	return protocol.ValidateCallerID("session", session)
}

func errUnknownAgent(agent string) error {
	return fmt.Errorf("%w %q", actors.ErrUnknownAgent, agent)
}

// grainStopped forgets a stopped grain.
func (n *Node) grainStopped(session string, p *actor.PID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cur, ok := n.grains[session]; ok && cur.Equal(p) {
		delete(n.grains, session)
	}
}

// receiveActivator is the actor every member has at "a2-activator": it
// activates grains for the nodes that found none (activate) and releases
// sessions for members about to activate them (release).
func (n *Node) receiveActivator(c actor.Context) {
	env, ok := c.Message().(*clusterpb.Envelope)
	if !ok {
		return
	}
	sender, respond, ok := n.accept(c, env)
	if !ok {
		return
	}
	switch env.Kind {
	case kindActivate:
		var m clusterpb.ActivateRequest
		if bad := unwrap(env, &m); bad != nil {
			respond(bad)
			return
		}
		go func() {
			ctx, cancel := context.WithDeadline(context.Background(), deadlineOf(env, n.cfg.RequestTimeout))
			defer cancel()
			err := n.activateHere(ctx, m.Session)
			if err == nil && m.Resume && m.Agent != "" {
				err = n.rt.Activate(m.Agent, m.Session)
			}
			if err != nil {
				respond(errorEnvelope(err))
				return
			}
			respond(wrap(kindResult, &clusterpb.ActivateResponse{}, time.Time{}))
		}()
	case kindRelease:
		var m clusterpb.ReleaseRequest
		if bad := unwrap(env, &m); bad != nil {
			respond(bad)
			return
		}
		go func() {
			ctx, cancel := context.WithDeadline(context.Background(), deadlineOf(env, n.cfg.ReleaseTimeout))
			defer cancel()
			n.mu.Lock()
			n.handedOff[m.Session] = n.view.Load().gen
			n.mu.Unlock()
			if err := n.releaseHere(ctx, m.Session); err != nil {
				respond(errorEnvelope(err))
				return
			}
			respond(wrap(kindResult, &clusterpb.ReleaseResponse{}, time.Time{}))
		}()
	default:
		n.cfg.Logger.Warn("refused an envelope of an unknown kind", "kind", env.Kind, "from", sender)
		respond(badMessage(codeUnsupported, "unknown envelope kind %q", env.Kind))
	}
}

// activateHere activates session's grain on this member, once every other
// member has released the session; ErrMoved if this member does not place
// it. Concurrent activations of one session wait for the first.
func (n *Node) activateHere(ctx context.Context, session string) error {
	if n.rt == nil || n.cl == nil {
		return actors.ErrMoved // a gateway, or not started
	}
	for {
		if !n.Places(session) {
			return actors.ErrMoved
		}
		n.mu.Lock()
		if _, ok := n.grains[session]; ok {
			n.mu.Unlock()
			return nil
		}
		wait, busy := n.activating[session]
		if !busy {
			done := make(chan struct{})
			n.activating[session] = done
			n.mu.Unlock()
			err := n.activateOnce(ctx, session)
			n.mu.Lock()
			delete(n.activating, session)
			n.mu.Unlock()
			close(done)
			return err
		}
		n.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (n *Node) activateOnce(ctx context.Context, session string) error {
	n.releaseElsewhere(ctx, session)
	if !n.Places(session) {
		return actors.ErrMoved // the view changed meanwhile
	}
	kind, ok := n.cl.TryGetClusterKind(KindSession)
	if !ok {
		return errors.New("cluster: the session kind is not registered")
	}
	props := protocluster.WithClusterIdentity(kind.Props, protocluster.NewClusterIdentity(session, KindSession))
	p, err := n.system.Root.SpawnNamed(props, grainPrefix+session)
	if err != nil && !errors.Is(err, actor.ErrNameExists) {
		return err
	}
	n.mu.Lock()
	n.grains[session] = p
	n.mu.Unlock()
	return nil
}

// releaseElsewhere asks every other member (leaving ones included, not
// those that stepped down) to release session, in parallel, and waits for
// their answers up to ReleaseTimeout. A member that does not answer is
// logged and passed over: it is unreachable or dead, and the store fences
// it if it still writes.
func (n *Node) releaseElsewhere(ctx context.Context, session string) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ReleaseTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range n.view.Load().all {
		if m.ID == n.self.ID || m.Role != RoleMember || m.Status == gossip.StatusDown {
			continue // a member that stepped down stopped its sessions first (quorum.go)
		}
		wg.Add(1)
		go func(m gossip.Meta) {
			defer wg.Done()
			dl, _ := ctx.Deadline()
			env := wrap(kindRelease, &clusterpb.ReleaseRequest{Session: session, By: n.self.ID}, dl)
			res, err := n.system.Root.RequestFuture(actor.NewPID(m.Address(), activatorName), env, time.Until(dl)).Result()
			if err == nil {
				if renv, ok := res.(*clusterpb.Envelope); ok {
					err = answer(renv, &clusterpb.ReleaseResponse{})
				} else {
					err = errors.New("an answer that is not an envelope")
				}
			}
			if err != nil {
				n.cfg.Logger.Warn("a member did not confirm the release of a session; activating it anyway", "session", session, "member", m.Address(), "err", err)
			}
		}(m)
	}
	wg.Wait()
}

// releaseHere stops session's grain (ending its streams with MOVED) and
// its runtime actors on this member, after their write in flight.
func (n *Node) releaseHere(ctx context.Context, session string) error {
	n.mu.Lock()
	p, ok := n.grains[session]
	delete(n.grains, session)
	n.mu.Unlock()
	if ok {
		_ = n.system.Root.StopFuture(p).Wait()
	}
	if n.rt == nil {
		return nil
	}
	return n.rt.Release(ctx, session)
}

// releaseAll releases sessions, a few at a time, until done closes.
func (n *Node) releaseAll(sessions []string, done <-chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ReleaseTimeout)
	defer cancel()
	if done != nil {
		go func() {
			select {
			case <-done:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	slots := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, s := range sessions {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := n.releaseHere(ctx, s); err != nil {
				n.cfg.Logger.Warn("a session did not stop in time", "session", s, "err", err)
			}
		}()
	}
	wg.Wait()
}

// handOver asks each session's new owner to activate it with its runtime
// actors, so that the work the session had resumes there at once.
func (n *Node) handOver(ctx context.Context, sessions []actors.ActiveSession) {
	if len(sessions) > 0 && len(n.view.Load().hosts) == 0 {
		n.cfg.Logger.Warn("no member is left to take the sessions over; they resume when a member serves them", "sessions", len(sessions))
		return
	}
	slots := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, a := range sessions {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			actx, cancel := context.WithTimeout(ctx, n.cfg.AttemptTimeout)
			defer cancel()
			if err := n.activate(actx, a.Session, a.Agent, true); err != nil {
				n.cfg.Logger.Warn("could not hand a session over; it resumes when next addressed", "session", a.Session, "err", err)
			}
		}()
	}
	wg.Wait()
}

// activate asks the member the current view places session on to activate
// its grain (and, with resume, its runtime actors), retrying while the
// view settles.
func (n *Node) activate(ctx context.Context, session, agent string, resume bool) error {
	req := &clusterpb.ActivateRequest{Session: session, Agent: agent, Resume: resume}
	return n.retry(ctx, session, func(owner gossip.Meta, attempt time.Duration, dl time.Time) (*clusterpb.Envelope, error) {
		return n.ask(actor.NewPID(owner.Address(), activatorName), wrap(kindActivate, req, dl), attempt)
	}, &clusterpb.ActivateResponse{})
}

// hasStreams reports whether this member serves a live stream of session.
func (n *Node) hasStreams(session string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, st := range n.streams {
		if st.session == session {
			return true
		}
	}
	return false
}

// identityLookup is protoactor's IdentityLookup over our placement: the
// grain of an identity is at "session/<id>" on the member the rendezvous
// hash places it on, activated there on demand. Node's own requests do not
// go through it (they carry their caller's deadline, which protoactor's
// lookups do not); it serves protoactor's cluster.Get and Request.
type identityLookup struct{ n *Node }

func (l *identityLookup) Get(ci *protocluster.ClusterIdentity) *actor.PID {
	if ci.Kind != KindSession {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.n.cfg.AttemptTimeout)
	defer cancel()
	if err := l.n.activate(ctx, ci.Identity, "", false); err != nil {
		return nil
	}
	o, ok := l.n.owner(ci.Identity)
	if !ok {
		return nil
	}
	return actor.NewPID(o.Address(), grainPrefix+ci.Identity)
}

func (l *identityLookup) RemovePid(*protocluster.ClusterIdentity, *actor.PID) {}

func (l *identityLookup) Setup(*protocluster.Cluster, []string, bool) {}

func (l *identityLookup) Shutdown() {}
