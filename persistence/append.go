package persistence

import (
	"context"

	"github.com/a2-runtime/a2/protocol"
)

// AppendOption is an option of Store.Append.
type AppendOption func(*AppendOptions)

// AppendOptions are an append's options, as a store reads them
// (OptionsOf). The zero value is a plain, synchronous append.
type AppendOptions struct {
	// Work, when set, marks whether the session has work once the batch is
	// folded, in the store's work index (WorkIndexer), in the same atomic
	// write as the batch. A store without a work index ignores it.
	Work *bool
	// Epoch, when not 0, fences the append by the session's lease
	// (Leaser): it is refused with ErrLeaseLost, and nothing is written,
	// unless the session's lease is at this epoch. An identical
	// resubmission still replays. A store without leases ignores it: the
	// expected index alone fences the writer.
	Epoch uint64
	// Preceding, when set, is appended before the batch, durable no later
	// than it (Preceded).
	Preceding *Preceding
	// Done, when set, makes the append asynchronous (Async).
	Done func([]protocol.Event, error)
}

// WithWork marks whether the session has work once the batch is folded
// (AppendOptions.Work).
func WithWork(work bool) AppendOption {
	return func(o *AppendOptions) { o.Work = &work }
}

// WithEpoch fences the append by the session's lease at epoch
// (AppendOptions.Epoch).
func WithEpoch(epoch uint64) AppendOption {
	return func(o *AppendOptions) { o.Epoch = epoch }
}

// Preceded appends pre before the batch: in the same atomic, synced write
// when both are new and the store can (the Pebble store); else pre first,
// then, once pre.Check lets it, the batch. When pre ends without writing
// (an identical resubmission, a conflict), pre.Check decides the batch's
// fate. Work and Epoch apply to the batch, not to pre.
func Preceded(pre Preceding) AppendOption {
	return func(o *AppendOptions) { o.Preceding = &pre }
}

// Async makes the append answer without its caller waiting: Append
// returns nil, nil at once and calls done once with what it would have
// returned, when the batch is durable or the append has failed. done may
// run on the caller's goroutine (an append that fails before its commit)
// or on one of the store's; it must not block nor call the store. The
// session actor appends so, to save a goroutine and a wake-up per write.
func Async(done func([]protocol.Event, error)) AppendOption {
	return func(o *AppendOptions) { o.Done = done }
}

// OptionsOf applies opts to the zero AppendOptions.
func OptionsOf(opts []AppendOption) AppendOptions {
	var o AppendOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Options returns the options that make o (OptionsOf(o.Options()) == o),
// for a store that wraps another.
func (o AppendOptions) Options() []AppendOption {
	var opts []AppendOption
	if o.Work != nil {
		opts = append(opts, WithWork(*o.Work))
	}
	if o.Epoch != 0 {
		opts = append(opts, WithEpoch(o.Epoch))
	}
	if o.Preceding != nil {
		opts = append(opts, Preceded(*o.Preceding))
	}
	if o.Done != nil {
		opts = append(opts, Async(o.Done))
	}
	return opts
}

// Preceding is an append to another log that must be durable no later than
// the batch it precedes: a session's ownership claim before the session's
// first batch (actors, owner.go).
type Preceding struct {
	Session  string
	Expected uint64
	Events   []protocol.Event
	// Check turns the preceding append's result, when it ends without
	// writing (an identical resubmission, a conflict), into the batch's
	// fate: nil lets the batch be written, an error is the batch's error
	// and nothing of the batch is written. It runs on the caller's
	// goroutine and may read the store.
	Check func(stored []protocol.Event, err error) error
}

// AppendInTurn is Append with opts for a store that writes one append at a
// time: pre (Preceded) with one, pre.Check, then the batch with the rest of
// the options, on a goroutine of its own when the append is Async. one is
// the store's synchronous append of a single batch.
func AppendInTurn(ctx context.Context, one func(ctx context.Context, session string, expected uint64, events []protocol.Event, o AppendOptions) ([]protocol.Event, error),
	session string, expected uint64, events []protocol.Event, o AppendOptions) ([]protocol.Event, error) {
	pre, done := o.Preceding, o.Done
	o.Preceding, o.Done = nil, nil
	run := func() ([]protocol.Event, error) {
		if pre != nil {
			if err := pre.Check(one(ctx, pre.Session, pre.Expected, pre.Events, AppendOptions{})); err != nil {
				return nil, err
			}
		}
		return one(ctx, session, expected, events, o)
	}
	if done == nil {
		return run()
	}
	go func() { done(run()) }()
	return nil, nil
}

// Await runs an asynchronous append and waits for its answer: start is
// given the done function to pass on (Async).
func Await(start func(done func([]protocol.Event, error))) ([]protocol.Event, error) {
	type result struct {
		evs []protocol.Event
		err error
	}
	ch := make(chan result, 1)
	start(func(evs []protocol.Event, err error) { ch <- result{evs, err} })
	r := <-ch
	return r.evs, r.err
}
