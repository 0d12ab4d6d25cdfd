package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// Timing transcripts: the session actor's write batching, driven by hand.
// The test owns the three things the actor waits on, so that every step is
// decided by the transcript and nothing by the machine's speed:
//   - the store: each write the actor starts is held (and printed) until
//     the transcript acknowledges it with `ack`;
//   - the clock (clock.go): its holds and progress delay fire only when the
//     transcript advances it with `tick`;
//   - the model: each step's chunks come when the transcript sends them.
// After each command the harness waits for the actor to have handled what
// the command caused (a request to the actor after its mailbox's earlier
// messages, twice, since a write's end and a lane's report re-enter the
// mailbox once), then prints what happened: writes started, timers armed.
//
// Commands (testdata/transcripts/*.txt, cockroachdb/datadriven):
//   push id=ID [passive]   a user message (passive: no turn); the push waits in the background
//   answer id=ID           wait for that push's answer; prints its event count
//   ack                    the oldest held write becomes durable
//   step                   the next model step starts (its lane was waiting for this)
//   send TYPE [text=...]   the running step streams a chunk (start, text-start, text-delta, text-end, finish)
//   end                    the running step's stream ends
//   tick d=DURATION        the clock moves on; due timers fire
// The output lists, in order, `write N: TYPE...` for each write the actor
// started (progress events with their chunk count), and `timer +D` for
// each timer armed (D from the clock's now).

// handClock is a clock the transcript moves.
type handClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []handTimer
	armed  []time.Duration // since the last report
}

type handTimer struct {
	at time.Time
	f  func()
}

func (c *handClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *handClock) AfterFunc(d time.Duration, f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timers = append(c.timers, handTimer{at: c.now.Add(d), f: f})
	c.armed = append(c.armed, d)
}

// advance moves the clock by d and runs the timers due, in time order.
func (c *handClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
	var due []func()
	for len(c.timers) > 0 && !c.timers[0].at.After(c.now) {
		due = append(due, c.timers[0].f)
		c.timers = c.timers[1:]
	}
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

func (c *handClock) takeArmed() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.armed
	c.armed = nil
	return out
}

// heldStore holds every write the actor starts until the transcript
// acknowledges it; it then writes it to the store beneath and answers.
type heldStore struct {
	persistence.Store
	mu      sync.Mutex
	held    []*heldWrite
	started []string // writes started since the last report, described
	n       int
	lookups map[string]chan struct{}
	// appended lists the writes the store took (not replays), in order:
	// the first index and the lease's epoch of each.
	appended []appendedWrite
}

type appendedWrite struct {
	first, epoch uint64
}

type heldWrite struct {
	session  string
	expected uint64
	events   []protocol.Event
	opts     persistence.AppendOptions
	done     func([]protocol.Event, error)
}

// lookedUp is closed once the actor looked id up (what it does first with
// a push).
func (h *heldStore) lookedUp(id string) <-chan struct{} { return h.lookupChan(id) }

func (h *heldStore) lookupChan(id string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lookups == nil {
		h.lookups = map[string]chan struct{}{}
	}
	ch, ok := h.lookups[id]
	if !ok {
		ch = make(chan struct{})
		h.lookups[id] = ch
	}
	return ch
}

func (h *heldStore) Lookup(ctx context.Context, ids []string) ([]protocol.Event, error) {
	evs, err := h.Store.Lookup(ctx, ids)
	for _, id := range ids {
		ch := h.lookupChan(id)
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
	return evs, err
}

func (h *heldStore) Append(ctx context.Context, session string, expected uint64, events []protocol.Event, opts ...persistence.AppendOption) ([]protocol.Event, error) {
	o := persistence.OptionsOf(opts)
	if o.Done == nil {
		return h.Store.Append(ctx, session, expected, events, opts...)
	}
	done := o.Done
	o.Done = nil
	h.mu.Lock()
	h.n++
	h.held = append(h.held, &heldWrite{session: session, expected: expected, events: events, opts: o, done: done})
	h.started = append(h.started, fmt.Sprintf("write %d: %s", h.n, describe(events)))
	h.mu.Unlock()
	return nil, nil
}

// ack writes the oldest held write and answers it (the actor learns of it
// by a message, as from the store's committer).
func (h *heldStore) ack() error {
	h.mu.Lock()
	if len(h.held) == 0 {
		h.mu.Unlock()
		return fmt.Errorf("no write is held")
	}
	w := h.held[0]
	h.held = h.held[1:]
	h.mu.Unlock()
	last, _ := h.Store.LastIndex(context.Background(), w.session)
	stored, err := h.Store.Append(context.Background(), w.session, w.expected, w.events, w.opts.Options()...)
	if err == nil && len(stored) > 0 && stored[0].Index > last {
		h.mu.Lock()
		h.appended = append(h.appended, appendedWrite{first: stored[0].Index, epoch: w.opts.Epoch})
		h.mu.Unlock()
	}
	w.done(stored, err)
	return err
}

func (h *heldStore) takeStarted() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.started
	h.started = nil
	return out
}

// describe names a batch's events: their types, without the "ai." prefix,
// a progress event with its chunks.
func describe(events []protocol.Event) string {
	parts := make([]string, len(events))
	for i, ev := range events {
		name := strings.TrimPrefix(ev.Type, "ai.")
		if ev.Type == protocol.TypeGenerationProgress {
			var p struct {
				Chunks []json.RawMessage `json:"chunks"`
			}
			_ = json.Unmarshal(ev.Payload, &p)
			name = fmt.Sprintf("%s(%d)", name, len(p.Chunks))
		}
		parts[i] = name
	}
	return strings.Join(parts, " ")
}

// handModel streams what the transcript sends; each Stream is a step. A
// step starts only when the transcript says so (`step`): its lane waits in
// the instructions' resolver, which runs before the lane reports its start.
type handModel struct {
	steps chan *handStream
	begin chan struct{}
}

func (m *handModel) instructions(ctx context.Context, _ harness.ResolverContext) (string, error) {
	select {
	case <-m.begin:
		return "", nil
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
}

func (m *handModel) Stream(ctx context.Context, _ harness.Request) (harness.Stream, error) {
	s := &handStream{ctx: ctx, chunks: make(chan protocol.UIMessageChunk), waiting: make(chan struct{}, 1), closed: make(chan struct{})}
	m.steps <- s
	return s, nil
}

type handStream struct {
	ctx     context.Context
	chunks  chan protocol.UIMessageChunk // closed: the stream ends
	waiting chan struct{}                // the lane asks for the next chunk
	closed  chan struct{}
	once    sync.Once
}

func (s *handStream) Next() (protocol.UIMessageChunk, error) {
	select {
	case s.waiting <- struct{}{}:
	default:
	}
	select {
	case c, ok := <-s.chunks:
		if !ok {
			return protocol.UIMessageChunk{}, io.EOF
		}
		return c, nil
	case <-s.ctx.Done():
		return protocol.UIMessageChunk{}, context.Cause(s.ctx)
	}
}

func (s *handStream) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

// transcript is one transcript's session.
type transcript struct {
	t       *testing.T
	f       *fixture
	clock   *handClock
	store   *heldStore
	model   *handModel
	stream  *handStream
	pushes  map[string]chan pushResult
	session string
}

type pushResult struct {
	events []protocol.Event
	err    error
}

const transcriptWait = 10 * time.Second

func newTranscript(t *testing.T, progress protocol.ProgressOptions) *transcript {
	return newTranscriptWith(t, progress, nil)
}

// newTranscriptWith is newTranscript whose agent has toolset.
func newTranscriptWith(t *testing.T, progress protocol.ProgressOptions, toolset []tools.Tool) *transcript {
	tr := &transcript{t: t, clock: &handClock{now: time.Unix(1_700_000_000, 0)}, model: &handModel{steps: make(chan *handStream, 4), begin: make(chan struct{})},
		pushes: map[string]chan pushResult{}, session: "s1"}
	tr.f = newFixture(t, `{"default":{"text":"unused"}}`, func(o *AgentOptions) {
		o.Models = func(string) (harness.Model, error) { return tr.model, nil }
		o.Instructions = harness.InstructionsFunc(tr.model.instructions)
		o.Progress = progress
		o.Tools = toolset
	})
	tr.f.recovered()
	tr.f.rt.clock = tr.clock
	// The transcript sees a push reach the session by its lookup: every
	// push is looked up (pushcheck.go).
	tr.f.rt.opts.LookupPushesFor = 1 << 62
	tr.store = &heldStore{Store: tr.f.store}
	tr.f.rt.store = tr.store // before the session's activation, which takes its store
	t.Cleanup(func() {
		// Let the runtime's Close finish the writes it waits for.
		for tr.store.ack() == nil {
		}
	})
	return tr
}

// settle returns once the actor has handled what is in its mailbox, and
// what that queued behind itself (a write's end or a lane's report
// re-enters the mailbox once: flushNow). The question is one the actor
// answers at once, writing or not.
func (tr *transcript) settle() {
	tr.t.Helper()
	pid, err := tr.f.rt.pid(tr.f.agent, tr.session)
	if err != nil {
		tr.t.Fatalf("the session's actor: %v", err)
	}
	for range 2 {
		reply := make(chan *protocol.AIState, 1)
		tr.f.rt.system.Root.Send(pid, &frontierRequest{index: ^uint64(0), reply: reply})
		select {
		case <-reply:
		case <-time.After(transcriptWait):
			tr.t.Fatal("the session did not answer")
		}
	}
}

func (tr *transcript) report() string {
	var b strings.Builder
	for _, w := range tr.store.takeStarted() {
		b.WriteString(w + "\n")
	}
	for _, d := range tr.clock.takeArmed() {
		fmt.Fprintf(&b, "timer +%s\n", d)
	}
	if b.Len() == 0 {
		return "nothing\n"
	}
	return b.String()
}

func (tr *transcript) run(d *datadriven.TestData) string {
	t := tr.t
	arg := func(key string) string {
		for _, a := range d.CmdArgs {
			if a.Key == key && len(a.Vals) > 0 {
				return a.Vals[0]
			}
		}
		return ""
	}
	has := func(key string) bool { return d.HasArg(key) }
	switch d.Cmd {
	case "push":
		id := arg("id")
		var ev protocol.Event
		if has("passive") {
			passive := false
			ev = protocol.Inputs.Message(protocol.UIMessage{ID: id, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: id}}},
				protocol.MessageOptions{Generate: &passive})
		} else {
			ev = protocol.Inputs.Text(id, id)
		}
		ch := make(chan pushResult, 1)
		tr.pushes[id] = ch
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), transcriptWait)
			defer cancel()
			evs, err := tr.f.rt.Push(ctx, "assistant", tr.session, []protocol.Event{ev}, false)
			ch <- pushResult{evs, err}
		}()
		// The actor is handling the push (it looks its IDs up first), so
		// the questions settle asks come after it.
		select {
		case <-tr.store.lookedUp(id):
		case <-time.After(transcriptWait):
			t.Fatalf("push %s never reached the session", id)
		}
	case "answer":
		id := arg("id")
		select {
		case r := <-tr.pushes[id]:
			if r.err != nil {
				return fmt.Sprintf("push %s: %v\n", id, r.err)
			}
			return fmt.Sprintf("push %s answered: %d events\n", id, len(r.events))
		case <-time.After(transcriptWait):
			t.Fatalf("push %s was not answered", id)
		}
	case "ack":
		if err := tr.store.ack(); err != nil {
			return err.Error() + "\n"
		}
	case "step":
		select {
		case tr.model.begin <- struct{}{}:
		case <-time.After(transcriptWait):
			t.Fatal("no step is waiting to start")
		}
		select {
		case tr.stream = <-tr.model.steps:
		case <-time.After(transcriptWait):
			t.Fatal("no step started")
		}
		tr.awaitNext()
	case "send":
		c := protocol.UIMessageChunk{Type: d.CmdArgs[0].Key}
		switch c.Type {
		case protocol.ChunkTextStart, protocol.ChunkTextEnd:
			c.ID = "t0"
		case protocol.ChunkTextDelta:
			c.ID, c.Delta = "t0", arg("text")
		case protocol.ChunkFinish:
			c.FinishReason = "stop"
		}
		select {
		case tr.stream.chunks <- c:
		case <-time.After(transcriptWait):
			t.Fatal("the lane did not take the chunk")
		}
		tr.awaitNext()
	case "end":
		close(tr.stream.chunks)
		select {
		case <-tr.stream.closed: // after the lane reported its end
		case <-time.After(transcriptWait):
			t.Fatal("the lane did not end")
		}
	case "tick":
		dur, err := time.ParseDuration(arg("d"))
		if err != nil {
			t.Fatal(err)
		}
		tr.clock.advance(dur)
	default:
		t.Fatalf("unknown command %q", d.Cmd)
	}
	tr.settle()
	return tr.report()
}

// awaitNext returns once the lane asks for the next chunk: what it had is
// in the session's mailbox.
func (tr *transcript) awaitNext() {
	select {
	case <-tr.stream.waiting:
	case <-time.After(transcriptWait):
		tr.t.Fatal("the lane did not ask for the next chunk")
	}
}

func TestTimingTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/transcripts", func(t *testing.T, path string) {
		var tr *transcript
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "session" {
				var p protocol.ProgressOptions
				for _, a := range d.CmdArgs {
					switch a.Key {
					case "max-delay-ms":
						fmt.Sscan(a.Vals[0], &p.MaxDelayMs)
					case "max-chunks":
						fmt.Sscan(a.Vals[0], &p.MaxChunks)
					}
				}
				tr = newTranscript(t, p)
				return "ok\n"
			}
			tr.t = t
			return tr.run(d)
		})
	})
}
