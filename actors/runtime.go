package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/metric"

	"github.com/a2-runtime/a2/actors/sessionpb"
	"github.com/a2-runtime/a2/internal/wire"
	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
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
	// MaxSessionBytes, when positive, bounds a session's log: an untrusted
	// push that would take it past this many bytes (its events' IDs,
	// types, causes and payloads, A2's own events counted too) is refused
	// with ErrQuota, and nothing is appended; the session's own work (its
	// model steps, tools and handlers, and trusted appends) goes on. 0: no
	// bound. docs/security.md, "Limits".
	MaxSessionBytes int64
	// PassivateAfter stops a session that has been idle this long, freeing
	// its memory (default 2 minutes).
	PassivateAfter time.Duration
	// RequestTimeout bounds a request to a session (default 30 s).
	RequestTimeout time.Duration
	// LookupPushesFor is how long after its activation a session looks
	// every push's IDs up in the store before admitting it (default 10 s;
	// negative: never). Later, only a push that may be a resubmission is
	// looked up, and the store's append refuses the stored IDs of the
	// others (pushcheck.go).
	LookupPushesFor time.Duration
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
	if o.LookupPushesFor == 0 {
		o.LookupPushesFor = 10 * time.Second
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
	ErrUnknownAgent          = wire.ErrUnknownAgent
	ErrClosed                = wire.ErrClosed
	ErrPartialDuplicateBatch = persistence.ErrPartialDuplicateBatch
	ErrUnavailable           = wire.ErrUnavailable
	// ErrMoved is a request for a session that this runtime does not place
	// (Options.Place): another member serves it. It is an ErrUnavailable,
	// so that a caller that does not route answers 503.
	ErrMoved = wire.ErrMoved
)

// Runtime runs the session actors of a set of agents over one store, in one
// process. Sessions activate on first use and passivate when idle.
type Runtime struct {
	store  persistence.Store
	agents map[string]*Agent
	opts   Options
	system *actor.ActorSystem

	// statuses holds, by session key, what each active session actor last
	// published of its durable index and idleness (sessionStatus), which
	// Idle answers without a message to the actor.
	statuses sync.Map

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

	// clock times the sessions' write batching (clock.go).
	clock clock
}

// New starts a runtime.
func New(store persistence.Store, agents []*Agent, opts Options) (*Runtime, error) {
	opts = opts.withDefaults()
	r := &Runtime{store: store, agents: map[string]*Agent{}, opts: opts, sessions: map[string]*actor.PID{}, failures: map[string]int{}, handlerRests: map[string]int{}, clock: systemClock{},
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
		if push, ok := msg.(*sessionpb.PushRequest); ok && attempt > 0 {
			// The session stopped before answering: perhaps because the
			// push was admitted unchecked and is a resubmission
			// (pushcheck.go). The next activation looks its IDs up.
			msg = &verifiedPush{push}
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
	owners.forget(r.store)
	for _, a := range r.agents {
		owners.forget(a.opts.Store)
	}
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
