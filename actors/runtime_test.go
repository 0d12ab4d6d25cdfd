package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/internal/testutil"
	"github.com/a2-runtime/a2/persistence"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
)

// countingStore is the real Pebble store with a count of its appends: each
// append is one synced write.
type countingStore struct {
	persistence.Store
	appends atomic.Int64
	loads   atomic.Int64 // LoadSnapshot calls: one per session activation
	mu      sync.Mutex
	batches [][]string // the event types of each append, in order
	written [][]protocol.Event
	// countOnly keeps neither: a benchmark's store, whose live heap must
	// not grow with the run (it would make each garbage collection dearer).
	countOnly bool
}

// Append counts the append and hands it to the store underneath with its
// options, so that the runtime takes the path it takes without the
// wrapper. A session's first write and its ownership claim (Preceded) count
// as the one write the Pebble store makes of them, as two on another store.
func (c *countingStore) Append(ctx context.Context, session string, expected uint64, events []protocol.Event, opts ...persistence.AppendOption) ([]protocol.Event, error) {
	if o := persistence.OptionsOf(opts); o.Preceding != nil {
		if _, one := c.Store.(*pebblestore.Store); !one {
			c.count(o.Preceding.Events)
		}
	}
	c.count(events)
	return c.Store.Append(ctx, session, expected, events, opts...)
}

func (c *countingStore) count(events []protocol.Event) {
	c.appends.Add(1)
	if c.countOnly {
		return
	}
	types := make([]string, len(events))
	for i, ev := range events {
		types[i] = ev.Type
	}
	c.mu.Lock()
	c.batches = append(c.batches, types)
	c.written = append(c.written, append([]protocol.Event(nil), events...))
	c.mu.Unlock()
}

// batchOf returns the events of the append that held the event for which
// match is true.
func (c *countingStore) batchOf(match func(protocol.Event) bool) []protocol.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.written {
		for _, ev := range b {
			if match(ev) {
				return b
			}
		}
	}
	return nil
}

func (c *countingStore) LoadSnapshot(ctx context.Context, session, reducer string) (persistence.Snapshot, bool, error) {
	c.loads.Add(1)
	return c.Store.LoadSnapshot(ctx, session, reducer)
}

// Follow passes the store's own Tail through, so that the runtime's
// subscribers use it as they would on the bare store. (crashStore does not:
// its subscribers read and wait, the path of stores without Follow.)
func (c *countingStore) Follow(session string, after uint64) (persistence.Tail, error) {
	return persistence.Follow(c.Store, session, after)
}

type fixture struct {
	t     *testing.T
	fs    vfs.FS
	store *countingStore
	rt    *Runtime
	model *script.Model
	agent *Agent
	// opts are the runtime's options at the next open.
	opts Options
}

func newFixture(t *testing.T, s string, mod func(*AgentOptions)) *fixture {
	t.Helper()
	sc, err := script.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, fs: vfs.NewMem(), model: script.New(sc)}
	f.open(mod)
	return f
}

func (f *fixture) open(mod func(*AgentOptions)) {
	st, err := pebblestore.Open("data", pebblestore.Options{FS: f.fs, Logger: quietPebble{}})
	if err != nil {
		f.t.Fatal(err)
	}
	f.store = &countingStore{Store: st}
	opts := AgentOptions{Name: "assistant", Model: harness.ModelID("script/test"),
		Models: func(string) (harness.Model, error) { return f.model, nil }}
	if mod != nil {
		mod(&opts)
	}
	a, err := NewAgent(opts)
	if err != nil {
		f.t.Fatal(err)
	}
	f.agent = a
	f.rt, err = New(f.store, []*Agent{a}, f.opts)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(f.close)
}

// recovered waits (bounded: 10 s) for the runtime's start-up scan to end.
func (f *fixture) recovered() {
	f.t.Helper()
	select {
	case <-f.rt.Recovered():
	case <-time.After(10 * time.Second):
		f.t.Fatal("the start-up scan did not end")
	}
}

func (f *fixture) close() {
	if f.rt != nil {
		f.rt.Close()
		f.rt = nil
		_ = f.store.Close()
	}
}

func (f *fixture) push(session string, evs ...protocol.Event) []protocol.Event {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := f.rt.Push(ctx, "assistant", session, evs, false)
	if err != nil {
		f.t.Fatalf("push: %v", err)
	}
	return out
}

// waitFor polls the session state until cond holds (bounded: 10 s).
func (f *fixture) waitFor(session string, what string, cond func(*protocol.AIState) bool) *protocol.AIState {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(time.Second)) // a state read that hangs fails too
	defer cancel()
	for {
		st, _, err := f.rt.State(ctx, "assistant", session)
		if err != nil {
			f.t.Fatalf("waiting for %s: %v", what, err)
		}
		if cond(st.AI) {
			return st.AI
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(st.AI)
			if len(b) > 3000 {
				b = append(b[:3000], "..."...)
			}
			f.t.Fatalf("timed out waiting for %s; state: %s", what, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func lastText(s *protocol.AIState) string {
	if len(s.Messages) == 0 {
		return ""
	}
	var b strings.Builder
	for _, p := range s.Messages[len(s.Messages)-1].Parts {
		if p.Type == protocol.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

func idle(s *protocol.AIState) bool { return s.Active == nil && len(s.Inbox.Items) == 0 }

// R-TURN-01 R-GEN-01 R-GEN-02 R-PROGRESS-04 R-DELIVERY-02: a simple text
// turn: the send is admitted, one model step streams, the response
// completes, and it costs 2 synced writes: the send with its decision,
// admission and request; the start with the streamed chunks and the
// completion (startHold). How chunks fall between writes depends on
// scheduling (a loaded machine can split a stream over more writes), so
// the bound of 4 is checked on the mean of 20 turns, and the worst turn is
// reported.
func TestSimpleTurn(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"Hello there, how can I help?"}}`, nil)
	const turns = 20
	total, worst := int64(0), int64(0)
	for i := 0; i < turns; i++ {
		session := fmt.Sprintf("s%d", i)
		before := f.store.appends.Load()
		out := f.push(session, protocol.Inputs.Text("m"+session, "Hi"))
		if len(out) != 1 || out[0].ID != "m"+session || out[0].Index == 0 {
			t.Fatalf("push returned %+v", out)
		}
		st := f.waitFor(session, "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
		if got := lastText(st); got != "Hello there, how can I help?" {
			t.Fatalf("answer %q", got)
		}
		writes := f.store.appends.Load() - before
		total += writes
		worst = max(worst, writes)
	}
	mean := float64(total) / turns
	t.Logf("a simple text turn took %.2f synced writes on average (worst %d)", mean, worst)
	if mean > 4 {
		f.store.mu.Lock()
		defer f.store.mu.Unlock()
		t.Fatalf("a simple text turn took %.2f synced writes on average, want at most 4: %v", mean, f.store.batches)
	}
	if n := len(f.model.Calls()); n != turns {
		t.Fatalf("%d model calls for %d turns", n, turns)
	}
}

// lateEndModel streams its script's answer and then waits before the
// stream's end: until release is closed, or for wait.
type lateEndModel struct {
	answer  *script.Model
	wait    time.Duration
	release chan struct{}
}

func (m *lateEndModel) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	s, err := m.answer.Stream(ctx, req)
	if err != nil {
		return nil, err
	}
	return &lateEnd{ReadyStream: s.(harness.ReadyStream), m: m, ctx: ctx}, nil
}

type lateEnd struct {
	harness.ReadyStream
	m   *lateEndModel
	ctx context.Context
}

func (s *lateEnd) Next() (protocol.UIMessageChunk, error) {
	c, err := s.ReadyStream.Next()
	if err == io.EOF {
		select {
		case <-s.m.release:
		case <-time.After(s.m.wait):
		case <-s.ctx.Done():
			return c, context.Cause(s.ctx)
		}
	}
	return c, err
}

// A step's last chunks wait for its end (startHold after its finish
// chunk), so that they and the completion are one write: a model whose
// stream ends a millisecond after its finish chunk writes its last
// progress with its completion. Scheduling on a loaded machine can delay
// the lane past the hold, so most turns, not all, must show it; without
// the hold none does (the actor writes the finish chunk at once).
func TestAStepsLastChunksWaitForItsEnd(t *testing.T) {
	sc, _ := script.Parse([]byte(`{"default":{"text":"a short answer"}}`))
	m := &lateEndModel{answer: script.New(sc), wait: time.Millisecond, release: make(chan struct{})}
	f := newFixture(t, `{}`, func(o *AgentOptions) {
		o.Models = func(string) (harness.Model, error) { return m, nil }
	})
	const turns = 10
	together := 0
	for i := 0; i < turns; i++ {
		session := fmt.Sprintf("s%d", i)
		f.push(session, protocol.Inputs.Text("m"+session, "Hi"))
		f.waitFor(session, "the answer", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "a short answer" })
		batch := f.store.batchOf(func(ev protocol.Event) bool {
			return ev.Type == protocol.TypeGenerationCompleted && ev.Session == session
		})
		for _, ev := range batch {
			if ev.Type == protocol.TypeGenerationProgress {
				together++
				break
			}
		}
	}
	if together*2 <= turns {
		f.store.mu.Lock()
		defer f.store.mu.Unlock()
		t.Fatalf("%d of %d turns wrote their last progress with their completion, want most: %v", together, turns, f.store.batches)
	}
}

// The hold after a finish chunk is bounded: a stream that does not end
// after its finish still has its last chunks written, the finish chunk
// visible while the model holds the stream open.
func TestAFinishedStepsChunksAreWrittenWhileItsStreamStaysOpen(t *testing.T) {
	sc, _ := script.Parse([]byte(`{"default":{"text":"an answer"}}`))
	m := &lateEndModel{answer: script.New(sc), wait: time.Hour, release: make(chan struct{})}
	defer close(m.release)
	f := newFixture(t, `{}`, func(o *AgentOptions) {
		o.Models = func(string) (harness.Model, error) { return m, nil }
	})
	f.push("s1", protocol.Inputs.Text("m1", "Hi"))
	hasFinish := func(ev protocol.Event) bool {
		if ev.Type != protocol.TypeGenerationProgress {
			return false
		}
		var p protocol.GenerationProgress
		if json.Unmarshal(ev.Payload, &p) != nil {
			return false
		}
		for _, c := range p.Chunks {
			if c.Type == protocol.ChunkFinish {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.store.batchOf(hasFinish) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the finish chunk of a step whose stream stays open was not written within 10 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if f.store.batchOf(func(ev protocol.Event) bool { return ev.Type == protocol.TypeGenerationCompleted }) != nil {
		t.Fatal("the step completed before its stream ended")
	}
}

// quietPebble keeps Pebble's informational lines out of the test output.
type quietPebble = testutil.QuietPebble
