package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/metric"

	"github.com/a2-runtime/a2/actors/sessionpb"
	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/telemetry"
)

// Options configure a Runtime.
type Options struct {
	// SnapshotEvery saves a snapshot after this many events since the last
	// one (default 1000; negative disables snapshots).
	SnapshotEvery int
	// SnapshotBytes saves a snapshot after this many payload bytes since the
	// last one (default 4 MiB). Either way, once a session's state is large
	// the payloads since its last snapshot must also add up to that
	// snapshot's size (docs/storage.md, 2.7).
	SnapshotBytes int
	// PassivateAfter stops a session that has been idle this long, freeing
	// its memory (default 2 minutes).
	PassivateAfter time.Duration
	// RequestTimeout bounds a request to a session (default 30 s).
	RequestTimeout time.Duration
	// SkipRecovery turns off the start-up scan that activates, in the
	// background, every session with work a stop cut short (recover.go;
	// Runtime.Recovered). Without it such work resumes at the session's
	// next request or stream.
	SkipRecovery bool
	// Logger receives the runtime's and protoactor's logs (default: discard).
	Logger *slog.Logger
	// Catalog serves model-metadata lookups (nil: no lookups; entries stay
	// pending).
	Catalog Catalog
	// Place, when set, is called before the runtime activates a session,
	// whoever asks (a request, the start-up scan, a timer); an error
	// refuses the activation and is the request's error (ErrMoved for a
	// session another member serves). A cluster member places a session
	// only where the hash over the live members puts it, and only once
	// every other member has released it, so Place may block for as long
	// as that takes; it must not call back into the runtime. Nil places
	// every session here (a single node).
	Place func(session string) error
	// Lease turns on the member's lease and the sessions' ownership epochs
	// (lease.go) with a store that keeps them: a cluster member's runtime
	// names itself with its member ID.
	Lease LeaseOptions
	// Meter, when set, receives protoactor's own actor metrics (mailbox,
	// spawns, message latency); nil leaves them off. A2's metrics go to
	// the global meter provider either way (package telemetry).
	Meter metric.MeterProvider
}

func (o Options) withDefaults() Options {
	if o.SnapshotEvery == 0 {
		o.SnapshotEvery = 1000
	}
	if o.SnapshotBytes == 0 {
		o.SnapshotBytes = 4 << 20
	}
	if o.PassivateAfter == 0 {
		o.PassivateAfter = 2 * time.Minute
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Lease.Owner != "" {
		o.Lease = o.Lease.withDefaults()
	}
	return o
}

// Errors of the runtime's API. Validation errors are *protocol.ValidationError.
var (
	ErrUnknownAgent          = errors.New("actors: unknown agent")
	ErrClosed                = errors.New("actors: runtime closed")
	ErrPartialDuplicateBatch = persistence.ErrPartialDuplicateBatch
	ErrUnavailable           = errors.New("actors: session unavailable")
	// ErrMoved is a request for a session that this runtime does not place
	// (Options.Place): another member serves it. It is an ErrUnavailable,
	// so that a caller that does not route answers 503.
	ErrMoved = fmt.Errorf("%w: the session is placed on another member", ErrUnavailable)
)

// Runtime runs the session actors of a set of agents over one store, in one
// process. Sessions activate on first use and passivate when idle.
type Runtime struct {
	store  persistence.Store
	agents map[string]*Agent
	opts   Options
	system *actor.ActorSystem

	mu       sync.Mutex
	sessions map[string]*actor.PID
	failures map[string]int // write failures in a row, per session
	// handlerRests counts, per session, the rests of its failing
	// application handlers since one last succeeded (handlers.go).
	handlerRests map[string]int
	// done closes when a session actor (by PID ID) has stopped: a request
	// whose message sat in its mailbox then gets no answer, so it retries
	// on a fresh activation instead of waiting out its timeout.
	done   map[string]chan struct{}
	closed bool
	wg     sync.WaitGroup // session actors alive

	// dispatcher runs the mailboxes of the session actors and their
	// children.
	dispatcher *reuseDispatcher

	// stopRecovery ends the start-up scan (recover.go); recovered closes
	// when it has returned.
	stopRecovery context.CancelFunc
	recovered    chan struct{}

	// member is the member's lease (lease.go; nil when leases are off).
	member *memberLease
}

// New starts a runtime.
func New(store persistence.Store, agents []*Agent, opts Options) (*Runtime, error) {
	opts = opts.withDefaults()
	r := &Runtime{store: store, agents: map[string]*Agent{}, opts: opts, sessions: map[string]*actor.PID{}, failures: map[string]int{}, handlerRests: map[string]int{},
		dispatcher: newReuseDispatcher(mailboxThroughput)}
	for _, a := range agents {
		if _, dup := r.agents[a.Name()]; dup {
			return nil, &protocol.ConfigError{Option: "agents", Message: fmt.Sprintf("two agents are named %q", a.Name())}
		}
		r.agents[a.Name()] = a
	}
	// The member's lease, renewed once before the runtime serves.
	member, err := newMemberLease(r, agents)
	if err != nil {
		return nil, err
	}
	r.member = member
	logger := opts.Logger
	sysOpts := []actor.ConfigOption{actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger })}
	if r.opts.Meter != nil {
		sysOpts = append(sysOpts, actor.WithMetricProviders(r.opts.Meter))
	}
	r.system = actor.NewActorSystem(sysOpts...)
	if r.member != nil {
		go r.member.loop()
	}
	r.recovered = make(chan struct{})
	if opts.SkipRecovery {
		close(r.recovered)
	} else {
		var ctx context.Context
		ctx, r.stopRecovery = context.WithCancel(context.Background())
		go r.recoverSessions(ctx)
	}
	return r, nil
}

// Recovered returns a channel that closes when the start-up scan
// (Options.SkipRecovery) has visited every session, or has stopped.
func (r *Runtime) Recovered() <-chan struct{} { return r.recovered }

// Agent returns a registered agent.
func (r *Runtime) Agent(name string) (*Agent, bool) {
	a, ok := r.agents[name]
	return a, ok
}

// Agents lists the names of the runtime's agents, sorted.
func (r *Runtime) Agents() []string {
	names := make([]string, 0, len(r.agents))
	for name := range r.agents {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Store is the runtime's store, which holds the sessions of every agent
// without a store of its own.
func (r *Runtime) Store() persistence.Store { return r.store }

// StoreOf returns the store that holds the sessions of the named agent.
func (r *Runtime) StoreOf(agentName string) (persistence.Store, error) {
	a, err := r.agent(agentName)
	if err != nil {
		return nil, err
	}
	return r.storeOf(a), nil
}

// History returns up to limit durable events of the agent's session with
// an index greater than after, in index order, read from the agent's
// store; ErrSessionOwned if another agent owns the session.
func (r *Runtime) History(ctx context.Context, agentName, session string, after uint64, limit int) ([]protocol.Event, error) {
	store, err := r.StoreOf(agentName)
	if err != nil {
		return nil, err
	}
	if _, err := checkOwner(ctx, store, agentName, session); err != nil {
		return nil, err
	}
	return store.Read(ctx, session, after, limit)
}

func (r *Runtime) storeOf(a *Agent) persistence.Store {
	if a.opts.Store != nil {
		return a.opts.Store
	}
	return r.store
}

func key(agent, session string) string { return agent + "\x00" + session }

// pid returns the session actor, activating it when needed.
func (r *Runtime) pid(agent *Agent, session string) (*actor.PID, error) {
	p, _, err := r.spawn(agent, session)
	return p, err
}

// spawn returns the session's actor, activating it if it is not active;
// spawned reports whether this call activated it.
func (r *Runtime) spawn(agent *Agent, session string) (p *actor.PID, spawned bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, false, ErrClosed
	}
	k := key(agent.Name(), session)
	if p, ok := r.sessions[k]; ok {
		return p, false, nil
	}
	if err := r.member.serving(); err != nil {
		return nil, false, err // the member's lease lapsed, or it stepped down
	}
	if r.opts.Place != nil {
		// Outside the lock: placing may wait on other members.
		r.mu.Unlock()
		err := r.opts.Place(session)
		r.mu.Lock()
		if err != nil {
			return nil, false, err
		}
		if r.closed {
			return nil, false, ErrClosed
		}
		if p, ok := r.sessions[k]; ok {
			return p, false, nil // activated meanwhile
		}
		if err := r.member.serving(); err != nil {
			return nil, false, err
		}
	}
	s := &sessionActor{rt: r, agent: agent, id: session, store: r.storeOf(agent)}
	props := actor.PropsFromProducer(func() actor.Actor { return s }, actor.WithDispatcher(r.dispatcher),
		actor.WithSupervisor(actor.NewOneForOneStrategy(0, 0, func(any) actor.Directive { return actor.StopDirective })))
	r.wg.Add(1)
	p = r.system.Root.Spawn(props)
	r.sessions[k] = p
	if r.done == nil {
		r.done = map[string]chan struct{}{}
	}
	r.done[p.Id] = make(chan struct{})
	return p, true, nil
}

// doneOf returns the channel that closes when the actor p has stopped.
func (r *Runtime) doneOf(p *actor.PID) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch, ok := r.done[p.Id]; ok {
		return ch
	}
	ch := make(chan struct{})
	close(ch) // stopped already
	return ch
}

// stopped records that a session actor has stopped.
func (r *Runtime) stopped(p *actor.PID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch, ok := r.done[p.Id]; ok {
		close(ch)
		delete(r.done, p.Id)
	}
}

// forget removes a stopped session actor from the registry.
func (r *Runtime) forget(agent, session string, p *actor.PID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := key(agent, session)
	if cur, ok := r.sessions[k]; ok && cur.Equal(p) {
		delete(r.sessions, k)
	}
}

func (r *Runtime) agent(name string) (*Agent, error) {
	a, ok := r.agents[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownAgent, name)
	}
	return a, nil
}

// request sends a message to a session actor and waits for its answer. A
// session that stopped before answering (passivated, or restarted after a
// write failure) is activated again, up to three attempts in all; one that
// is alive but does not answer in time is ErrUnavailable.
func (r *Runtime) request(ctx context.Context, agent *Agent, session string, msg any) (any, error) {
	for attempt := 0; attempt < 3; attempt++ {
		p, err := r.pid(agent, session)
		if err != nil {
			return nil, err
		}
		// The future is bounded by the caller's deadline when that comes
		// first. A deadline already past ends the request here: a future
		// with a negative timeout has no timer at all (it would wait for
		// ever).
		timeout, byCaller := r.opts.RequestTimeout, false
		if d, ok := ctx.Deadline(); ok {
			left := time.Until(d)
			if left <= 0 {
				return nil, context.DeadlineExceeded
			}
			if left < timeout {
				timeout, byCaller = left, true
			}
		}
		res, err := r.await(r.system.Root.RequestFuture(p, msg, timeout), r.doneOf(p))
		if err == nil {
			if _, stopping := res.(*stoppingReply); !stopping {
				return res, nil
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, actor.ErrTimeout) {
			if byCaller {
				// The caller's deadline, on the future's timer, which can
				// fire a moment before the context's own.
				return nil, context.DeadlineExceeded
			}
			// The session is alive but did not answer in time (a write that
			// hangs, say). Activating it again would make a second actor,
			// a second writer, beside the one still running, which Close
			// would never stop: the caller is told to retry instead.
			return nil, fmt.Errorf("%w: no answer within %s", ErrUnavailable, timeout)
		}
		r.forget(agent.Name(), session, p)
	}
	return nil, ErrUnavailable
}

// errActorStopped is a request whose session actor stopped before it
// answered.
var errActorStopped = errors.New("actors: the session stopped before answering")

// await waits for a future's answer, or for its target's stop.
func (r *Runtime) await(f *actor.Future, done <-chan struct{}) (any, error) {
	type result struct {
		res any
		err error
	}
	ch := make(chan result, 1)
	go func() {
		res, err := f.Result()
		ch <- result{res, err}
	}()
	select {
	case out := <-ch:
		return out.res, out.err
	case <-done:
		// An answer sent just before the stop still wins.
		select {
		case out := <-ch:
			return out.res, out.err
		case <-time.After(10 * time.Millisecond):
			return nil, errActorStopped
		}
	}
}

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
		req.Events = append(req.Events, toPB(ev))
	}
	res, err := r.request(ctx, a, session, req)
	if err != nil {
		return nil, err
	}
	resp := res.(*sessionpb.PushResponse)
	if resp.Error != nil {
		return nil, fromPBError(resp.Error)
	}
	return fromPBs(resp.Events), nil
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
// session is idle asks after each event, at the cost of a message to the
// session, where State marshals the whole state. A session nobody wrote to
// is idle at index 0.
func (r *Runtime) Idle(ctx context.Context, agentName, session string) (uint64, bool, error) {
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
		return nil, nil, 0, fromPBError(resp.Error)
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

// Close stops every session (writes in flight finish first), releases the
// member's lease (lease.go), and stops the actor system. It does not close
// the store.
func (r *Runtime) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	if r.stopRecovery != nil {
		r.stopRecovery()
	}
	<-r.recovered // it activates nothing more: the runtime is closed
	r.mu.Lock()
	pids := make([]*actor.PID, 0, len(r.sessions))
	for _, p := range r.sessions {
		pids = append(pids, p)
	}
	r.mu.Unlock()
	for _, p := range pids {
		r.release(p)
	}
	for _, p := range pids {
		<-r.doneOf(p)
	}
	r.wg.Wait()
	if r.member != nil {
		// The sessions have released their ownership: the member's lease
		// goes too (best effort).
		r.member.close()
	}
	r.system.Shutdown()
	r.dispatcher.close()
}

// release asks a session actor to stop once its write in flight, if any,
// is durable (releaseSession).
func (r *Runtime) release(p *actor.PID) { r.system.Root.Send(p, &releaseSession{}) }

// Release stops the session's actors (of every agent) on this runtime, each
// once its write in flight is durable, and returns when they have stopped
// or ctx ends. Requests that reach them meanwhile are answered as for a
// stopped session: the runtime retries them on a fresh activation, which
// Options.Place then refuses with ErrMoved on a member that handed the
// session off. A cluster member releases a session before another member
// activates it, so that the session never runs on two members at once.
func (r *Runtime) Release(ctx context.Context, session string) error {
	r.mu.Lock()
	var pids []*actor.PID
	for name := range r.agents {
		if p, ok := r.sessions[key(name, session)]; ok {
			pids = append(pids, p)
		}
	}
	r.mu.Unlock()
	for _, p := range pids {
		r.release(p)
	}
	for _, p := range pids {
		select {
		case <-r.doneOf(p):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// ActiveSession is a session with an active actor.
type ActiveSession struct {
	Agent, Session string
}

// Active lists the sessions with an active actor, in no order.
func (r *Runtime) Active() []ActiveSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ActiveSession, 0, len(r.sessions))
	for k := range r.sessions {
		agent, session, _ := strings.Cut(k, "\x00")
		out = append(out, ActiveSession{Agent: agent, Session: session})
	}
	return out
}

// IsActive reports whether the session has an active actor, of any agent.
func (r *Runtime) IsActive(session string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range r.agents {
		if _, ok := r.sessions[key(name, session)]; ok {
			return true
		}
	}
	return false
}

// Activate activates the agent's session, so that its pending work runs
// without waiting for a request (a cluster member that takes a session
// over from one that left); the error of Options.Place if it refuses.
func (r *Runtime) Activate(agentName, session string) error {
	a, err := r.agent(agentName)
	if err != nil {
		return err
	}
	_, err = r.pid(a, session)
	return err
}

// mailboxThroughput is how many messages a mailbox run processes before it
// yields its goroutine (protoactor's default).
const mailboxThroughput = 300

// PassivateIdle asks every active session to passivate now if it is idle
// (no write, no queued event, no running child), freeing its memory, as the
// idle timeout would. Busy sessions are left alone.
func (r *Runtime) PassivateIdle() {
	r.mu.Lock()
	pids := make([]*actor.PID, 0, len(r.sessions))
	for _, p := range r.sessions {
		pids = append(pids, p)
	}
	r.mu.Unlock()
	for _, p := range pids {
		r.system.Root.Send(p, &passivateIdle{})
	}
}

// count adds one to the session's count in counts (a map of r's, guarded
// by r.mu) and returns the count before.
func (r *Runtime) count(counts map[string]int, agent *Agent, session string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := key(agent.Name(), session)
	n := counts[k]
	counts[k] = n + 1
	return n
}

// reactivateLater activates a session again after a short pause, once its
// actor stopped on a write failure: the durable work it had (a model step,
// a tool call) goes on from the store.
//
// The pause doubles with each failure in a row, from 50 ms up to 30 s, so
// that a session that keeps failing (a broken disk, a bug) does not spin;
// a durable write resets it.
func (r *Runtime) reactivateLater(agent *Agent, session string) {
	n := r.count(r.failures, agent, session)
	delay := 50 * time.Millisecond << min(n, 10)
	if delay > 30*time.Second {
		delay = 30 * time.Second
	}
	r.opts.Logger.Warn("reactivating a session after a write failure", "session", session, "in", delay, "failures", n+1)
	// pid activates nothing once the runtime is closed (ErrClosed).
	time.AfterFunc(delay, func() { _, _ = r.pid(agent, session) })
}

// wakeHandlersLater asks the session, after a rest, to run its resting
// handlers again, activating it if it passivated meanwhile (its resting
// handlers are still owed in its state, so the activation runs them). The
// rest is handlerRest, doubled at each rest of the session's handlers
// since one last succeeded, up to handlerMaxRest, and logged.
func (r *Runtime) wakeHandlersLater(agent *Agent, session string) {
	n := r.count(r.handlerRests, agent, session)
	delay := handlerRestAfter(n)
	r.opts.Logger.Info("a session's failing application handler rests", "session", session, "for", delay, "rests", n+1)
	time.AfterFunc(delay, func() {
		ctx, cancel := context.WithTimeout(context.Background(), r.opts.RequestTimeout)
		defer cancel()
		if _, err := r.request(ctx, agent, session, &wakeHandlers{}); err != nil && !errors.Is(err, ErrClosed) {
			// The next activation (a request, or the start-up scan) runs
			// them.
			r.opts.Logger.Warn("could not wake a session's resting handlers", "session", session, "err", err)
		}
	})
}

// handlerRestAfter is the rest after n earlier ones: handlerRest doubled n
// times, at most handlerMaxRest.
func handlerRestAfter(n int) time.Duration {
	if n >= 16 {
		return handlerMaxRest
	}
	return min(handlerRest<<n, handlerMaxRest)
}

// handlerSucceeded ends a session's run of handler rests.
func (r *Runtime) handlerSucceeded(agent *Agent, session string) {
	r.mu.Lock()
	delete(r.handlerRests, key(agent.Name(), session))
	r.mu.Unlock()
}

// wrote records a durable write of a session, ending a run of failures.
func (r *Runtime) wrote(agent, session string) {
	r.mu.Lock()
	delete(r.failures, key(agent, session))
	r.mu.Unlock()
}

// active reports whether the session's actor is running.
func (r *Runtime) active(a *Agent, session string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.sessions[key(a.Name(), session)]
	return ok
}

// ActiveSessions is the number of activated sessions.
func (r *Runtime) ActiveSessions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

// EventToPB is the wire form of an event.
func EventToPB(ev protocol.Event) *sessionpb.Event { return toPB(ev) }

// EventsFromPB are the events of their wire form.
func EventsFromPB(es []*sessionpb.Event) []protocol.Event { return fromPBs(es) }

func toPB(ev protocol.Event) *sessionpb.Event {
	return &sessionpb.Event{Id: ev.ID, Type: ev.Type, Payload: ev.Payload, Index: ev.Index, Session: ev.Session, Time: ev.Time, Cause: ev.Cause}
}

func fromPB(e *sessionpb.Event) protocol.Event {
	return protocol.Event{ID: e.Id, Type: e.Type, Payload: e.Payload, Index: e.Index, Session: e.Session, Time: e.Time, Cause: e.Cause}
}

func fromPBs(es []*sessionpb.Event) []protocol.Event {
	out := make([]protocol.Event, len(es))
	for i, e := range es {
		out[i] = fromPB(e)
	}
	return out
}

// Error codes carried by sessionpb.Error.
const (
	CodeInvalid          = "INVALID"
	CodePartialDuplicate = "PARTIAL_DUPLICATE_BATCH"
	CodeUnavailable      = "UNAVAILABLE"
	CodeSessionOwned     = "SESSION_OWNED"
	CodeMoved            = "MOVED"
	CodeLeaseHeld        = "LEASE_HELD"
	CodeUnknownAgent     = "UNKNOWN_AGENT"
	CodeClosed           = "CLOSED"
	CodeTimeout          = "TIMEOUT"
	CodeInternal         = "INTERNAL"
)

func toPBError(err error) *sessionpb.Error {
	if err == nil {
		return nil
	}
	var ve *protocol.ValidationError
	switch {
	case errors.As(err, &ve):
		return &sessionpb.Error{Code: CodeInvalid, Message: ve.Message, Field: ve.Field}
	case errors.Is(err, persistence.ErrPartialDuplicateBatch):
		return &sessionpb.Error{Code: CodePartialDuplicate, Message: err.Error()}
	case errors.Is(err, ErrMoved):
		return &sessionpb.Error{Code: CodeMoved, Message: err.Error()}
	case errors.Is(err, ErrNotServing):
		// A member that stepped down or whose lease lapsed places no
		// session: across a hop, its sessions are elsewhere (retried).
		return &sessionpb.Error{Code: CodeMoved, Message: err.Error()}
	case errors.Is(err, ErrLeaseHeld):
		return &sessionpb.Error{Code: CodeLeaseHeld, Message: err.Error()}
	case errors.Is(err, ErrUnknownAgent):
		return &sessionpb.Error{Code: CodeUnknownAgent, Message: err.Error()}
	case errors.Is(err, ErrClosed):
		return &sessionpb.Error{Code: CodeClosed, Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &sessionpb.Error{Code: CodeTimeout, Message: err.Error()}
	case errors.Is(err, ErrUnavailable):
		return &sessionpb.Error{Code: CodeUnavailable, Message: err.Error()}
	case errors.Is(err, ErrSessionOwned):
		return &sessionpb.Error{Code: CodeSessionOwned, Message: err.Error()}
	}
	return &sessionpb.Error{Code: CodeInternal, Message: err.Error()}
}

// ToPBError is the wire form of an error of the runtime's API (the codes
// above), for a node that answers another.
func ToPBError(err error) *sessionpb.Error { return toPBError(err) }

// FromPBError is the error of the runtime's API that a wire error stands
// for: errors.Is and errors.As see the same sentinels and
// *protocol.ValidationError as on the node that sent it.
func FromPBError(e *sessionpb.Error) error { return fromPBError(e) }

func fromPBError(e *sessionpb.Error) error {
	switch e.Code {
	case CodeMoved:
		return ErrMoved
	case CodeLeaseHeld:
		return fmt.Errorf("%w: %s", ErrLeaseHeld, strings.TrimPrefix(e.Message, ErrLeaseHeld.Error()+": "))
	case CodeUnknownAgent:
		return fmt.Errorf("%w%s", ErrUnknownAgent, strings.TrimPrefix(e.Message, ErrUnknownAgent.Error()))
	case CodeClosed:
		return ErrClosed
	case CodeTimeout:
		return fmt.Errorf("%w: %s", context.DeadlineExceeded, e.Message)
	case CodeInvalid:
		return &protocol.ValidationError{Field: e.Field, Message: e.Message}
	case CodePartialDuplicate:
		return fmt.Errorf("%w: %s", persistence.ErrPartialDuplicateBatch, e.Message)
	case CodeUnavailable:
		return fmt.Errorf("%w: %s", ErrUnavailable, strings.TrimPrefix(e.Message, ErrUnavailable.Error()+": "))
	case CodeSessionOwned:
		return fmt.Errorf("%w: %s", ErrSessionOwned, strings.TrimPrefix(e.Message, ErrSessionOwned.Error()+": "))
	}
	return errors.New(e.Message)
}

// CodeOf is the wire code of an error of the runtime's API ("" for nil):
// what telemetry records as error.type.
func CodeOf(err error) string {
	if err == nil {
		return ""
	}
	return toPBError(err).Code
}
