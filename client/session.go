package client

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"github.com/a2-runtime/a2/protocol"
)

// Session is a live session as a chat client holds it: the confirmed state
// (hydrated from the node's state, then kept current by folding the live
// stream with the contract's fold) and the optimistic overlay of the
// commands this client pushed that have no decision yet (protocol.Overlay,
// R-OPT-01): a pending command shows at once, rolls back when its push
// fails and retires on its receipt (R-OPT-09).
//
// The actions (Send, Steer, Stop, ...) mirror useAgent's: each builds its
// commands from the state shown at the moment it is called
// (protocol.Actions, R-CLIENT-18), pushes them and returns a PushResult;
// an action with nothing to address pushes nothing and returns no events
// (R-CLIENT-19). A Session is safe for concurrent use.
type Session struct {
	c  *Client
	id string

	mu        sync.Mutex
	confirmed *protocol.SessionState
	index     uint64
	overlay   protocol.Overlay
	changed   chan struct{}
	waiters   []indexWaiter
	err       error

	cancel context.CancelFunc
	done   chan struct{}
}

type indexWaiter struct {
	index uint64
	ch    chan struct{}
}

// PushResult is the outcome of a push or an action (R-CLIENT-17): the
// persisted events, whose IDs are the commandIds of their receipts, and a
// channel closed once the live stream has delivered them back.
type PushResult struct {
	Events    []protocol.Event
	confirmed chan struct{}
}

// Confirmed is closed when the session's stream has delivered every event
// of the push (at once for an action that pushed nothing).
func (r *PushResult) Confirmed() <-chan struct{} { return r.confirmed }

// Open hydrates a session from the node's state (bounded by ctx) and keeps
// it current from the live stream until Close.
func (c *Client) Open(ctx context.Context, session string) (*Session, error) {
	st, index, err := c.State(ctx, session)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s := &Session{c: c, id: session, confirmed: st, index: index, changed: make(chan struct{}),
		cancel: cancel, done: make(chan struct{})}
	go s.run(runCtx)
	return s, nil
}

// ID is the session's ID.
func (s *Session) ID() string { return s.id }

// Close stops following the session.
func (s *Session) Close() {
	s.cancel()
	<-s.done
}

// run folds the live stream into the confirmed state. A fold error (the
// log does not fold onto the state held, which a correct node never
// causes) re-hydrates from the node's state.
func (s *Session) run(ctx context.Context) {
	defer close(s.done)
	for failures := 1; ; failures++ {
		s.mu.Lock()
		from := s.index
		s.mu.Unlock()
		streamCtx, cancel := context.WithCancel(ctx)
		events, errc := s.c.Stream(streamCtx, s.id, from)
		var foldErr error
		for ev := range events {
			if foldErr = s.observe(ev); foldErr != nil {
				break
			}
		}
		cancel()
		for range events {
		}
		if ctx.Err() != nil {
			return
		}
		if foldErr == nil {
			err := <-errc // the stream ended with a permanent error
			s.setErr(err)
			return
		}
		s.setErr(foldErr)
		if sleep(ctx, s.c.backoff(failures)) != nil {
			return
		}
		st, index, err := s.c.State(ctx, s.id)
		if err != nil {
			continue
		}
		s.mu.Lock()
		s.confirmed, s.index, s.err = st, index, nil
		s.notify()
		s.mu.Unlock()
	}
}

// observe folds one streamed event.
func (s *Session) observe(ev protocol.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.Index <= s.index {
		return nil
	}
	if err := s.c.opts.Contract.Fold(s.confirmed, ev); err != nil {
		return err
	}
	s.index = ev.Index
	s.overlay.Observe(ev)
	s.releaseWaiters()
	s.notify()
	return nil
}

func (s *Session) setErr(err error) {
	s.mu.Lock()
	s.err = err
	s.notify()
	s.mu.Unlock()
}

// notify wakes everyone waiting on Changed; s.mu is held.
func (s *Session) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// releaseWaiters closes the confirmations the stream has reached; s.mu is
// held.
func (s *Session) releaseWaiters() {
	s.waiters = slices.DeleteFunc(s.waiters, func(w indexWaiter) bool {
		if w.index <= s.index {
			close(w.ch)
			return true
		}
		return false
	})
}

// Changed returns a channel closed at the next change of the session (a
// streamed event, a push, a rollback or an error). Take it before reading
// the state, so that no change is missed.
func (s *Session) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Err is the error that stopped the session's stream (the node refused
// it), or nil.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// View is the state to show: the confirmed state with the pending commands
// overlaid (R-OPT-01..R-OPT-08, R-OPT-12). It is the caller's to keep.
func (s *Session) View() (*protocol.SessionState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.opts.Contract.View(s.confirmed, &s.overlay)
}

// State is the AI state to show (View's AIState).
func (s *Session) State() *protocol.AIState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.overlay.View(s.confirmed.AI)
}

// Indicator is what to show about activity (protocol.Indicator of State).
func (s *Session) Indicator() string { return protocol.Indicator(s.State()) }

// Confirmed returns a copy of the confirmed AI state (server truth, without
// optimistic entries) and the log index it is at.
func (s *Session) Confirmed() (*protocol.AIState, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.confirmed.AI.Clone(), s.index
}

// Pending lists this client's commands that have no decision yet.
func (s *Session) Pending() []protocol.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.overlay.Pending()
}

// Wait blocks until cond holds for the confirmed AI state, ctx ends or the
// session's stream stops. cond runs with the session locked, after each
// change: it must not call the Session's methods.
func (s *Session) Wait(ctx context.Context, cond func(*protocol.AIState) bool) error {
	for {
		s.mu.Lock()
		ok, err, ch := cond(s.confirmed.AI), s.err, s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Push pushes events: they show in the optimistic view at once, are
// retried with the same IDs on transport failures (Client.Push) and roll
// back when the push fails for good (R-OPT-09).
func (s *Session) Push(ctx context.Context, events ...protocol.Event) (*PushResult, error) {
	if len(events) == 0 {
		ch := make(chan struct{})
		close(ch)
		return &PushResult{Events: []protocol.Event{}, confirmed: ch}, nil
	}
	events = s.c.assignIDs(events)
	s.mu.Lock()
	for _, ev := range events {
		s.overlay.Push(ev)
	}
	s.notify()
	s.mu.Unlock()

	stored, err := s.c.Push(ctx, s.id, events...)

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		for _, ev := range events {
			s.overlay.Fail(ev.ID)
		}
		s.notify()
		return nil, err
	}
	res := &PushResult{Events: stored, confirmed: make(chan struct{})}
	var top uint64
	for _, ev := range stored {
		top = max(top, ev.Index)
		if ev.Index <= s.index && !s.awaitsDecision(ev.ID) {
			// A replay of something the stream already brought back and
			// decided: nothing more will retire it.
			s.overlay.Fail(ev.ID)
		}
	}
	s.waiters = append(s.waiters, indexWaiter{index: top, ch: res.confirmed})
	s.releaseWaiters()
	return res, nil
}

// awaitsDecision reports whether the confirmed state holds command id
// without its decision; s.mu is held.
func (s *Session) awaitsDecision(id string) bool {
	for _, pc := range s.confirmed.AI.PendingQueueCommands {
		if pc.ID == id {
			return true
		}
	}
	return false
}

// act builds an action's commands from the state shown now and pushes them.
func (s *Session) act(ctx context.Context, build func(protocol.Actions) []protocol.Event) (*PushResult, error) {
	a := protocol.Actions{View: s.State(), NewID: s.c.opts.NewID}
	return s.Push(ctx, build(a)...)
}

// Send queues text as a user message (R-CLIENT-11): it starts a turn when
// the session is idle and waits in the inbox otherwise.
func (s *Session) Send(ctx context.Context, text string) (*PushResult, error) {
	return s.act(ctx, func(a protocol.Actions) []protocol.Event { return a.SendMessage(text, nil) })
}

// SendMessage queues a full message; generate false sends passive context
// (R-INPUT-02). A message without an ID gets a fresh one.
func (s *Session) SendMessage(ctx context.Context, m protocol.UIMessage, generate *bool) (*PushResult, error) {
	return s.act(ctx, func(a protocol.Actions) []protocol.Event { return a.Send(m, generate) })
}

// Steer steers the shown turn after its current step, or sends when none
// is shown (R-CLIENT-12).
func (s *Session) Steer(ctx context.Context, text string) (*PushResult, error) {
	return s.act(ctx, func(a protocol.Actions) []protocol.Event { return a.Steer(text) })
}

// Stop stops the shown turn at the frontier shown (R-CLIENT-13); with no
// turn shown it pushes nothing (R-STOP-03).
func (s *Session) Stop(ctx context.Context) (*PushResult, error) {
	return s.act(ctx, protocol.Actions.Stop)
}

// Approve approves a pending tool approval (R-CLIENT-14); nothing when it
// is not pending.
func (s *Session) Approve(ctx context.Context, approvalID string) (*PushResult, error) {
	return s.act(ctx, func(a protocol.Actions) []protocol.Event { return a.Approve(approvalID) })
}

// Deny denies a pending tool approval with an optional reason.
func (s *Session) Deny(ctx context.Context, approvalID, reason string) (*PushResult, error) {
	return s.act(ctx, func(a protocol.Actions) []protocol.Event { return a.Deny(approvalID, reason) })
}

// Respond answers a pending application input with a JSON value.
func (s *Session) Respond(ctx context.Context, inputID string, value json.RawMessage) (*PushResult, error) {
	return s.act(ctx, func(a protocol.Actions) []protocol.Event { return a.Respond(inputID, value) })
}

// Retry retries the failed response with a fresh retryId (R-CLIENT-15,
// R-RETRY-05); nothing when no response failed.
func (s *Session) Retry(ctx context.Context) (*PushResult, error) {
	return s.act(ctx, protocol.Actions.Retry)
}

// Pause pauses now (protocol.PauseNow) or after the turn
// (protocol.PauseAfterTurn).
func (s *Session) Pause(ctx context.Context, when string) (*PushResult, error) {
	if when != protocol.PauseNow && when != protocol.PauseAfterTurn {
		return nil, errors.New(`client: pause when must be "now" or "after-turn"`)
	}
	return s.act(ctx, func(a protocol.Actions) []protocol.Event { return a.Pause(when) })
}

// Resume resumes retained work, then admission.
func (s *Session) Resume(ctx context.Context) (*PushResult, error) {
	return s.act(ctx, protocol.Actions.Resume)
}

// QueueEdit replaces a pending input's content; its ID (m.ID) stays.
func (s *Session) QueueEdit(ctx context.Context, m protocol.UIMessage) (*PushResult, error) {
	return s.act(ctx, func(a protocol.Actions) []protocol.Event { return a.QueueEdit(m) })
}

// QueueMove moves a pending input before beforeID (nil: the end).
func (s *Session) QueueMove(ctx context.Context, inputID string, beforeID *string) (*PushResult, error) {
	return s.act(ctx, func(a protocol.Actions) []protocol.Event { return a.QueueMove(inputID, beforeID) })
}

// QueueRemove removes a pending input; its submission stays in the log.
func (s *Session) QueueRemove(ctx context.Context, inputID string) (*PushResult, error) {
	return s.act(ctx, func(a protocol.Actions) []protocol.Event { return a.QueueRemove(inputID) })
}

// QueueSendNow promotes a queued input for a handoff after the shown
// turn's current step (R-CLIENT-16).
func (s *Session) QueueSendNow(ctx context.Context, inputID string) (*PushResult, error) {
	return s.act(ctx, func(a protocol.Actions) []protocol.Event { return a.QueueSendNow(inputID) })
}
