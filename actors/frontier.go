// A step's frontier: the session's state and application reducer as of
// the step's start, which resolvers and compaction callbacks read.

package actors

import (
	"context"
	"errors"
	"time"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// frontier is a resolver's view of its session: the state captured when
// the step started (the prompt frontier), never a later one.
type frontier struct {
	index    uint64
	store    persistence.Store
	session  string
	contract *protocol.Contract
	// ask sends to the session actor.
	ask func(any)
}

// frontierRequest asks the session actor for a copy of its state if it is
// still at index: nil on reply when it has moved on.
type frontierRequest struct {
	index uint64
	reply chan *protocol.AIState // buffered: the actor never waits
}

// frontierWait bounds the wait for the session actor's answer; after it,
// State folds the log instead.
const frontierWait = 5 * time.Second

// State returns the session's state at the frontier. The step's own copy
// (AIState.StepCopy) leaves out the maps that grow with the conversation,
// so State asks the session actor for a whole copy while the session is
// still at the frontier (a resolver usually reads at the step's start,
// before anything moves), and otherwise folds the log from the latest
// snapshot (or the start) up to the frontier.
func (f frontier) State(ctx context.Context) (*protocol.AIState, uint64, error) {
	req := &frontierRequest{index: f.index, reply: make(chan *protocol.AIState, 1)}
	f.ask(req)
	wait := time.NewTimer(frontierWait)
	defer wait.Stop()
	select {
	case st := <-req.reply:
		if st != nil {
			return st, f.index, nil
		}
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	case <-wait.C:
	}
	st, at, err := replay(ctx, f.store, f.contract, f.session, f.index, func(string, error) {}, nil)
	if err != nil {
		return nil, 0, err
	}
	return st.AI, at, nil
}

// Reducer folds the log with r up to the frontier, or through (R-CONTRACT-19).
// It replays the log from the start: snapshots hold the contract's
// reducers, not r.
func (f frontier) Reducer(ctx context.Context, r protocol.AppReducer, through uint64) (any, uint64, error) {
	if r == nil {
		return nil, 0, errors.New("actors: Reducer needs a reducer")
	}
	upTo := f.index
	if through != 0 {
		upTo = through
	}
	var state any
	var at uint64
	for at < upTo {
		evs, err := f.store.Read(ctx, f.session, at, int(min(upTo-at, persistence.FollowPage)))
		if err != nil {
			return nil, 0, err
		}
		if len(evs) == 0 {
			break // through is past the end of the log
		}
		if state, err = protocol.Reduce(r, state, evs); err != nil {
			return nil, 0, err
		}
		at = evs[len(evs)-1].Index
	}
	state, err := protocol.Reduce(r, state, nil) // the initial state of an empty read
	return state, at, err
}
