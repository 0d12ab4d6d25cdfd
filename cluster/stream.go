package cluster

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/actors/sessionpb"
	"github.com/a2-runtime/a2/cluster/clusterpb"
	"github.com/a2-runtime/a2/internal/wire"
	"github.com/a2-runtime/a2/protocol"
)

// Remote live streams.
//
// A node that follows a session (a gateway serving an SSE stream) spawns a
// subscriber actor and asks the session's grain to stream to it: the
// owning member follows the session on its runtime (history from the store,
// then the durable live tail, with no gap and no duplicate) and sends the
// events as StreamBatch messages, in order. The subscriber acknowledges
// every streamAckEvery batches; the owner keeps at most streamWindow
// batches unacknowledged, so a slow subscriber holds the owner's reads back
// instead of filling its memory, and sends an empty batch (a heartbeat)
// after streamHeartbeat without events. A stream until idle (subscribe.idle,
// push.stream) is ended by the owner: its last batch is marked idle.
//
// When the owner changes (the session moved: a StreamEnd with MOVED; the
// view now places the session on another member; or no batch for
// streamStall), the subscriber subscribes again, at the owner of the
// current view, after the last index it delivered: the new owner reads
// what the subscriber missed from the store, then follows the tail. The
// subscriber drops an event at or below that index (a duplicate) and
// subscribes again on a gap, so its consumer sees every event once, in
// order, whatever happened between.

const (
	streamWindow = 16
	// streamAckEvery is how many batches a subscriber takes before it
	// acknowledges them, in one message: half the window, so the owner
	// never waits on an acknowledgement the subscriber holds back, and a
	// turn's stream (about four batches) ends before it needs one.
	streamAckEvery = streamWindow / 2
	streamBatchMax = 256
	// streamBatchBytes bounds a batch's payloads (a batch holds at least one
	// event, whatever its size): a batch of a turn's large chunks stays well
	// under what a member accepts in one message (maxRemoteMessage), with
	// the other messages the endpoint writer sends with it.
	streamBatchBytes = 1 << 20
	streamHeartbeat  = 2 * time.Second
	// streamStall is how long a subscriber waits for a batch (a heartbeat
	// at least) before it subscribes again.
	streamStall = 3 * streamHeartbeat
	// streamAckStall is how long an owner waits for acknowledgements with
	// a full window before it ends the stream.
	streamAckStall = 30 * time.Second
)

var errStreamStalled = errors.New("cluster: the subscriber acknowledged nothing for 30 s")

// ownerStream is a live stream a member serves to a subscriber.
type ownerStream struct {
	n          *Node
	id         string
	agent      string
	session    string
	subscriber *actor.PID
	ctx        context.Context
	stop       context.CancelCauseFunc
	acked      atomic.Uint64
	ackc       chan struct{}

	// A stream that ends once its session is idle (kind subscribe.idle):
	// idleAt is the index the session was seen idle at (0: not yet), asked
	// the durable index the runtime last answered.
	untilIdle bool
	idleAt    uint64
	asked     uint64
}

// cancel ends the stream with cause (the subscriber is told, unless it
// asked or is gone).
func (st *ownerStream) cancel(cause error) { st.stop(cause) }

// errSubscriberEnded ends a stream whose subscriber is done with it.
var errSubscriberEnded = errors.New("cluster: the subscriber ended the stream")

// serveStream opens a live stream of session for a subscriber; an error
// refuses it (an unknown agent, a session another agent owns, a session
// this member does not place). With untilIdle the stream ends once the
// session is idle (ownerStream.endsAt).
func (n *Node) serveStream(session string, m *clusterpb.SubscribeRequest, untilIdle bool) error {
	if err := n.checkSession(m.Agent, session); err != nil {
		return err
	}
	if !n.Places(session) {
		return actors.ErrMoved
	}
	if m.Stream == "" || m.SubscriberAddress == "" || m.SubscriberId == "" {
		return &protocol.ValidationError{Field: "stream", Message: "a stream needs an ID and a subscriber"}
	}
	ctx, stop := context.WithCancelCause(context.Background())
	evs, errc := n.rt.Subscribe(ctx, m.Agent, session, m.After)
	select {
	case err := <-errc:
		stop(nil)
		return err
	default:
	}
	st := &ownerStream{n: n, id: m.Stream, agent: m.Agent, session: session, subscriber: actor.NewPID(m.SubscriberAddress, m.SubscriberId),
		ctx: ctx, stop: stop, ackc: make(chan struct{}, 1), untilIdle: untilIdle, asked: m.After}
	n.mu.Lock()
	if old, ok := n.streams[st.id]; ok {
		old.cancel(errSubscriberEnded)
	}
	n.streams[st.id] = st
	n.mu.Unlock()
	go st.run(evs, errc)
	return nil
}

func (st *ownerStream) run(evs <-chan protocol.Event, errc <-chan error) {
	n := st.n
	defer func() {
		n.mu.Lock()
		if n.streams[st.id] == st {
			delete(n.streams, st.id)
		}
		n.mu.Unlock()
		st.stop(nil)
	}()
	var seq uint64
	send := func(batch []*sessionpb.Event, idle bool) {
		seq++
		n.system.Root.Send(st.subscriber, wrap(kindStreamBatch, &clusterpb.StreamBatch{Stream: st.id, Seq: seq, Events: batch, Idle: idle}, time.Time{}))
	}
	heartbeat := time.NewTicker(streamHeartbeat)
	defer heartbeat.Stop()
	if st.startsIdle() {
		send(nil, true) // idle where the subscriber already is: nothing to send
		return
	}
	sent := false
	var end error
loop:
	for {
		for seq-st.acked.Load() >= streamWindow {
			select {
			case <-st.ackc:
			case <-st.ctx.Done():
				break loop
			case <-time.After(streamAckStall):
				st.stop(errStreamStalled)
				break loop
			}
		}
		select {
		case ev, ok := <-evs:
			if !ok {
				select {
				case end = <-errc:
				default:
				}
				break loop
			}
			batch := []*sessionpb.Event{wire.EventToPB(ev)}
			size := len(ev.Payload)
			idle := st.endsAt(ev)
		drain:
			for !idle && len(batch) < streamBatchMax && size < streamBatchBytes {
				select {
				case ev, ok := <-evs:
					if !ok {
						break drain
					}
					batch = append(batch, wire.EventToPB(ev))
					size += len(ev.Payload)
					idle = st.endsAt(ev)
				default:
					break drain
				}
			}
			send(batch, idle)
			if idle {
				return // the subscriber ends its side on this batch
			}
			sent = true
		case <-heartbeat.C:
			if !sent {
				send(nil, false)
			}
			sent = false
		case <-st.ctx.Done():
			break loop
		}
	}
	if end == nil {
		end = context.Cause(st.ctx)
	}
	if errors.Is(end, errSubscriberEnded) || errors.Is(end, errSubscriberGone) {
		return
	}
	if end == nil || errors.Is(end, context.Canceled) {
		end = actors.ErrMoved
	}
	n.system.Root.Send(st.subscriber, wrap(kindStreamEnd, &clusterpb.StreamEnd{Stream: st.id, Error: wire.ToPBError(end)}, time.Time{}))
}

// endsAt reports whether a stream that ends once its session is idle ends
// with ev, the next event it sends: the session was idle at an index at or
// below ev's. It asks the runtime after each event that can end activity
// (any but progress) past the index it last answered, as the gateway does
// for a single node (gateway.serveStream); the runtime's session actor is
// on this member, so the question crosses no hop.
func (st *ownerStream) endsAt(ev protocol.Event) bool {
	switch {
	case !st.untilIdle:
		return false
	case st.idleAt > 0:
		return ev.Index >= st.idleAt
	case ev.Type == protocol.TypeGenerationProgress || ev.Index <= st.asked:
		return false
	}
	at, idle, err := st.n.rt.Idle(st.ctx, st.agent, st.session)
	if err != nil {
		// The next event asks again; a stream whose session moved ends
		// with MOVED and is opened again at the new owner.
		st.n.cfg.Logger.Debug("a stream cannot tell whether its session is idle", "session", st.session, "err", err)
		return false
	}
	st.asked = at
	if idle {
		st.idleAt = at
		return ev.Index >= at
	}
	return false
}

// startsIdle asks, once, whether a stream that ends once its session is
// idle starts at or past the index the session is idle at: then it ends at
// once, which it otherwise would only after the session's next event (a
// stream opened again at a new owner after the last event of a turn, or
// after the session went idle). Otherwise the answer is where endsAt goes
// on from, so the stream's first event asks nothing.
func (st *ownerStream) startsIdle() bool {
	if !st.untilIdle {
		return false
	}
	at, idle, err := st.n.rt.Idle(st.ctx, st.agent, st.session)
	if err != nil {
		return false // the first event asks again
	}
	start := st.asked
	st.asked = at
	if !idle {
		return false
	}
	st.idleAt = at
	return at <= start
}

// ackStream records a subscriber's acknowledgement.
func (n *Node) ackStream(id string, seq uint64) {
	n.mu.Lock()
	st := n.streams[id]
	n.mu.Unlock()
	if st == nil {
		return
	}
	for {
		cur := st.acked.Load()
		if seq <= cur || st.acked.CompareAndSwap(cur, seq) {
			break
		}
	}
	select {
	case st.ackc <- struct{}{}:
	default:
	}
}

// endStream ends a stream its subscriber is done with.
func (n *Node) endStream(id string) {
	n.mu.Lock()
	st := n.streams[id]
	n.mu.Unlock()
	if st != nil {
		st.cancel(errSubscriberEnded)
	}
}

// endStreams ends the streams of session this member serves, with cause.
func (n *Node) endStreams(session string, cause error) {
	n.mu.Lock()
	var sts []*ownerStream
	for _, st := range n.streams {
		if st.session == session {
			sts = append(sts, st)
		}
	}
	n.mu.Unlock()
	for _, st := range sts {
		st.cancel(cause)
	}
}

// subscription is a live stream this node follows, for one consumer.
type subscription struct {
	n       *Node
	agent   string
	session string
	ctx     context.Context
	cancel  context.CancelFunc
	out     chan protocol.Event
	errc    chan error
	in      chan *clusterpb.Envelope
	self    *actor.PID // the subscriber actor
	last    uint64     // the last index delivered

	untilIdle bool // the owner ends the stream once the session is idle

	stream string      // the current stream's ID
	grain  *actor.PID  // the current owner's grain
	owner  string      // the current owner's member ID
	acked  uint64      // the last batch of the current stream acknowledged
	closed atomic.Bool // stop was called (the node stops)
}

// subscribe opens a stream of session after an index; the channels are
// those of gateway.Router.Subscribe. With untilIdle the stream ends once
// the session is idle: the event channel closes after the event it was
// idle at, with io.EOF on the error channel.
func (n *Node) subscribe(ctx context.Context, agent, session string, after uint64, untilIdle bool) (<-chan protocol.Event, <-chan error, error) {
	s := n.newSubscription(ctx, agent, session, after, untilIdle)
	if err := s.open(); err != nil {
		s.abandon()
		return nil, nil, err
	}
	go s.run(nil)
	return s.out, s.errc, nil
}

// pushSubscribe pushes (push, of session) and opens the stream until idle
// from just before its first stored event, in one request to the owner
// (kind push.stream); the answers are the push's stored events and the
// channels of subscribe with untilIdle. A push that stored nothing opens
// no stream (nil channels). The owner's stream starts after the stored
// events (after_pushed): the subscription delivers them from the answer
// first, so they cross the hop once.
func (n *Node) pushSubscribe(ctx context.Context, session string, push *sessionpb.PushRequest) ([]protocol.Event, <-chan protocol.Event, <-chan error, error) {
	s := n.newSubscription(ctx, push.Agent, session, 0, true)
	var res sessionpb.PushResponse
	err := s.request(kindPushStream, func(sub *clusterpb.SubscribeRequest) proto.Message {
		return &clusterpb.PushStreamRequest{Push: push, Subscribe: sub, AfterPushed: true}
	}, &res)
	if err != nil || len(res.Events) == 0 {
		s.abandon()
		return nil, nil, nil, err
	}
	stored := wire.EventsFromPB(res.Events)
	s.last = stored[0].Index - 1
	go s.run(stored)
	return stored, s.out, s.errc, nil
}

// newSubscription makes a subscription and its subscriber actor, not yet
// subscribed anywhere.
func (n *Node) newSubscription(ctx context.Context, agent, session string, after uint64, untilIdle bool) *subscription {
	ctx, cancel := context.WithCancel(ctx)
	s := &subscription{n: n, agent: agent, session: session, ctx: ctx, cancel: cancel, last: after, untilIdle: untilIdle,
		out: make(chan protocol.Event, 16), errc: make(chan error, 1), in: make(chan *clusterpb.Envelope, 3*streamWindow+4)}
	s.self, _ = n.system.ProcessRegistry.Add(subscriberProcess{s}, "stream"+n.system.ProcessRegistry.NextId())
	return s
}

// subscriberProcess is a subscription's address: a process, not an actor,
// so that a batch goes from the remote's reader straight to the
// subscription's queue, without a mailbox and a goroutine scheduled for
// each (protoactor's futures are processes the same way). It never
// blocks the reader, which serves every stream from the owner: the owner
// keeps at most streamWindow batches unacknowledged per stream and the
// queue holds three times that (the streams of a subscription replaced
// after a move included), so only a misbehaving sender fills it; what does not fit is
// dropped, and the gap or the stall makes the subscription subscribe
// again.
type subscriberProcess struct{ s *subscription }

func (p subscriberProcess) SendUserMessage(_ *actor.PID, message any) {
	if m, ok := message.(*actor.MessageEnvelope); ok {
		message = m.Message
	}
	env, ok := message.(*clusterpb.Envelope)
	if !ok {
		return
	}
	select {
	case p.s.in <- env:
	default:
	}
}

func (subscriberProcess) SendSystemMessage(*actor.PID, any) {}

func (p subscriberProcess) Stop(pid *actor.PID) { p.s.n.system.ProcessRegistry.Remove(pid) }

// abandon ends a subscription whose first request failed (run never
// started).
func (s *subscription) abandon() {
	s.endCurrent()
	s.n.mu.Lock()
	delete(s.n.subs, s.stream)
	s.n.mu.Unlock()
	s.n.system.Root.Stop(s.self)
	s.cancel()
}

// open subscribes at the owner of the current view after s.last.
func (s *subscription) open() error {
	kind := kindSubscribe
	if s.untilIdle {
		kind = kindSubscribeIdle
	}
	return s.request(kind, func(sub *clusterpb.SubscribeRequest) proto.Message { return sub }, &clusterpb.SubscribeResponse{})
}

// request sends the owner a request that opens a new stream of this
// subscription (after s.last), made by body from the stream's
// SubscribeRequest, and makes the owner that answered the stream's.
func (s *subscription) request(kind string, body func(*clusterpb.SubscribeRequest) proto.Message, res proto.Message) error {
	n := s.n
	id := n.self.ID + "-" + strconv.FormatUint(n.streamSeq.Add(1), 10)
	n.mu.Lock()
	delete(n.subs, s.stream)
	n.subs[id] = s
	n.mu.Unlock()
	s.stream = id
	s.acked = 0
	req := &clusterpb.SubscribeRequest{Agent: s.agent, Session: s.session, After: s.last, Stream: id,
		SubscriberAddress: s.self.Address, SubscriberId: s.self.Id}
	owner, err := n.request(s.ctx, s.session, kind, body(req), res)
	if err != nil {
		return err
	}
	s.grain = actor.NewPID(owner.Address(), grainPrefix+s.session)
	s.owner = owner.ID
	return nil
}

// endCurrent tells the current owner that this node is done with the
// current stream.
func (s *subscription) endCurrent() {
	if s.grain != nil {
		s.n.system.Root.Send(s.grain, wrap(kindStreamEnd, &clusterpb.StreamEnd{Stream: s.stream}, time.Time{}))
	}
}

// stop ends the subscription (the node stops): its consumer sees
// actors.ErrClosed.
func (s *subscription) stop() {
	s.closed.Store(true)
	s.cancel()
}

// run delivers first (the events of a push the owner's stream starts
// after, in index order from s.last+1), then the stream's events.
func (s *subscription) run(first []protocol.Event) {
	n := s.n
	defer func() {
		s.endCurrent()
		n.mu.Lock()
		delete(n.subs, s.stream)
		n.mu.Unlock()
		n.system.Root.Stop(s.self)
		s.cancel()
		close(s.out)
	}()
	fail := func(err error) {
		if s.ctx.Err() == nil || s.closed.Load() {
			if s.closed.Load() {
				err = actors.ErrClosed
			}
			s.errc <- err
		}
	}
	for _, e := range first {
		if e.Index != s.last+1 {
			break // not reached: a push's events are one batch
		}
		select {
		case s.out <- e:
			s.last = e.Index
		case <-s.ctx.Done():
			fail(s.ctx.Err())
			return
		}
	}
	stall := time.NewTimer(streamStall)
	defer stall.Stop()
	for {
		v := n.view.Load()
		resubscribe := false
		select {
		case env := <-s.in:
			switch env.Kind {
			case kindStreamBatch:
				var m clusterpb.StreamBatch
				if unwrap(env, &m) != nil || m.Stream != s.stream {
					continue
				}
				stall.Reset(streamStall)
				for _, e := range m.Events {
					if e.Index <= s.last {
						n.streamDuplicates.Add(1)
						continue // a duplicate
					}
					if e.Index != s.last+1 {
						resubscribe = true // a gap: read it again
						break
					}
					select {
					case s.out <- wire.EventFromPB(e):
						s.last = e.Index
					case <-s.ctx.Done():
						fail(s.ctx.Err())
						return
					}
				}
				if !resubscribe && m.Idle {
					// The owner ended the stream with this batch.
					s.grain = nil
					s.errc <- io.EOF
					return
				}
				if !resubscribe && m.Seq-s.acked >= streamAckEvery {
					s.acked = m.Seq
					n.system.Root.Send(s.grain, wrap(kindStreamAck, &clusterpb.StreamAck{Stream: s.stream, Seq: m.Seq}, time.Time{}))
				}
			case kindStreamEnd:
				var m clusterpb.StreamEnd
				if unwrap(env, &m) != nil || m.Stream != s.stream {
					continue
				}
				err := wire.FromPBError(m.Error)
				if m.Error == nil || !errors.Is(err, actors.ErrUnavailable) && !errors.Is(err, actors.ErrClosed) {
					if m.Error == nil {
						err = actors.ErrMoved
					} else {
						fail(err)
						return
					}
				}
				s.grain = nil // it ended the stream itself
				resubscribe = true
			}
		case <-v.changed:
			if o, ok := n.owner(s.session); !ok || o.ID != s.owner {
				resubscribe = true
			}
		case <-stall.C:
			resubscribe = true
		case <-s.ctx.Done():
			if s.closed.Load() {
				fail(actors.ErrClosed)
			}
			return
		}
		if !resubscribe {
			continue
		}
		s.endCurrent()
		if err := s.open(); err != nil {
			fail(err)
			return
		}
		stall.Reset(streamStall)
	}
}
