package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// Seeded schedules of the real session actor (docs/reliability.md).
//
// The timing transcripts' harness (transcript_test.go) owns everything a
// session waits on: the store's writes (held until acknowledged, or
// failed), the clock, and the model's steps and chunks. A schedule is a
// seeded random sequence of what may happen next: a client's push (a
// message, a passive note, a steer, pause, resume, stop, an identical
// resubmission or a conflicting reuse of an ID), a write acknowledged or
// failed, a step starting, a chunk, a step's end, the clock moving, or the
// node crashing (its held writes lost, the runtime closed and opened again
// on what the store holds). After every step the actor has handled what
// the step caused (settle), and the checks run:
//   - the actor's state, when it is not writing, is the fold of the log;
//   - every command has at most one receipt in the log;
//   - every push answered without an error is in the log, at the indexes
//     it was answered with (an acknowledged event survives crashes);
//   - a resubmission is answered with the stored events, a conflicting
//     reuse is refused;
// and at the end, with the clients gone, the session settles: every write
// acknowledged, every step ended, nothing left running, every push
// answered.
//
// A failing seed prints itself; replay it with A2_SEED=<n>. A2_SIM_SESSIONS
// sets how many seeds run (the default keeps the test to seconds).

type simulation struct {
	tr     *transcript
	r      *rand.Rand
	n      int
	pushes []*simPush
	// stream state of the running step: its text part is open, finished.
	textOpen, finished bool
	log                []string
	// compared counts the checks that compared the actor's state with the
	// fold of the log (the others met a write in flight).
	compared int
	tools    *simTools
	// folded is the fold of the log's first foldedN events (the last of
	// them lastID), kept between checks: each check folds only the events
	// since, and folds again from the start when the log is not the one
	// folded (a crash took back what was not synced).
	folded  *protocol.AIState
	foldedN uint64
	lastID  string
	stream  *simStream // the client's live stream (simstream_test.go)
	// the session's member, how many there were, those it moved from
	// (simmove_test.go)
	owner   string
	members int
	fenced  []*Runtime
}

type simPush struct {
	ev     protocol.Event
	result chan pushResult
	done   *pushResult
	expect string // "new", "replay" (of the push at replayOf) or "conflict"
	of     *simPush
}

func (sm *simulation) logf(format string, args ...any) {
	sm.log = append(sm.log, fmt.Sprintf(format, args...))
}

func (sm *simulation) push(ev protocol.Event, expect string, of *simPush) {
	p := &simPush{ev: ev, result: make(chan pushResult, 1), expect: expect, of: of}
	sm.pushes = append(sm.pushes, p)
	rt, session := sm.tr.f.rt, sm.tr.session
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), transcriptWait)
		defer cancel()
		evs, err := rt.Push(ctx, "assistant", session, []protocol.Event{ev}, false)
		p.result <- pushResult{evs, err}
	}()
	// The actor looks a fresh activation's pushes up first: once it has,
	// the push is in its mailbox, before what the schedule does next.
	select {
	case <-sm.tr.store.lookedUp(ev.ID):
	case r := <-p.result:
		p.done = &r
	case <-time.After(transcriptWait):
		sm.tr.t.Fatalf("push %s never reached the session", ev.ID)
	}
}

// answered collects the pushes' answers that have arrived.
func (sm *simulation) answered() {
	for _, p := range sm.pushes {
		if p.done == nil {
			select {
			case r := <-p.result:
				p.done = &r
			default:
			}
		}
	}
}

// ask sends the session's actor a frontierRequest at index and returns its
// answer, asking the next activation when the actor stops first (after a
// failed write, or a crash).
func (sm *simulation) ask(index uint64) *protocol.AIState {
	tr := sm.tr
	deadline := time.After(transcriptWait)
	for {
		pid, err := tr.f.rt.pid(tr.f.agent, tr.session)
		if err != nil {
			tr.t.Fatalf("the session's actor: %v", err)
		}
		reply := make(chan *protocol.AIState, 1)
		tr.f.rt.system.Root.Send(pid, &frontierRequest{index: index, reply: reply})
		select {
		case st := <-reply:
			return st
		case <-tr.f.rt.doneOf(pid):
		case <-deadline:
			tr.t.Fatal("the session did not answer")
		}
	}
}

// settle is transcript.settle for an actor that may stop meanwhile.
func (sm *simulation) settle() {
	for range 2 {
		sm.ask(^uint64(0))
	}
}

// frontier is the actor's state when it is not writing and is at the
// store's last index (nil otherwise), with that index.
func (sm *simulation) frontier() (*protocol.AIState, uint64) {
	last, err := sm.tr.store.Store.LastIndex(context.Background(), sm.tr.session)
	if err != nil {
		sm.tr.t.Fatal(err)
	}
	return sm.ask(last), last
}

func (sm *simulation) storedLog() []protocol.Event {
	evs, err := sm.tr.store.Store.Read(context.Background(), sm.tr.session, 0, 1<<20)
	if err != nil {
		sm.tr.t.Fatal(err)
	}
	return evs
}

// check runs the invariants that hold after every step.
func (sm *simulation) check() error {
	sm.answered()
	if twice := sm.tools.twice(); twice != "" {
		return fmt.Errorf("a report tool ran again: %s", twice)
	}
	evs := sm.storedLog()
	if err := oneOutcomePerCall(evs); err != nil {
		return err
	}
	if err := sm.readStream(evs); err != nil {
		return err
	}
	if err := sm.epochsRise(); err != nil {
		return err
	}
	byID := map[string]protocol.Event{}
	receipts := map[string]int{}
	for _, ev := range evs {
		byID[ev.ID] = ev
		if ev.Type == protocol.TypeControlDecided {
			var d protocol.Decided
			if err := json.Unmarshal(ev.Payload, &d); err != nil {
				return err
			}
			if receipts[d.CommandID]++; receipts[d.CommandID] > 1 {
				return fmt.Errorf("command %s has %d receipts", d.CommandID, receipts[d.CommandID])
			}
		}
	}
	for _, p := range sm.pushes {
		if p.done == nil {
			continue
		}
		switch {
		case p.expect == "conflict":
			if p.done.err == nil {
				return fmt.Errorf("the conflicting reuse of %s was accepted: %+v", p.ev.ID, p.done.events)
			}
		case p.done.err != nil:
			// Refused or lost in a crash: allowed, and then not in the log
			// unless a resubmission or the first push wrote it.
		default:
			for _, got := range p.done.events {
				st, ok := byID[got.ID]
				if !ok || st.Index != got.Index {
					return fmt.Errorf("push %s was answered at %d, the log has it %v at %d", got.ID, got.Index, ok, st.Index)
				}
			}
			if p.expect == "replay" && p.of.done != nil && p.of.done.err == nil &&
				(len(p.done.events) != 1 || p.done.events[0].Index != p.of.done.events[0].Index) {
				return fmt.Errorf("the resubmission of %s answered %+v, the first push %+v", p.ev.ID, p.done.events, p.of.done.events)
			}
		}
	}
	st, at := sm.frontier()
	if st == nil {
		return nil // writing: the state is ahead of the log
	}
	if sm.folded == nil || at < sm.foldedN || (sm.foldedN > 0 && evs[sm.foldedN-1].ID != sm.lastID) {
		sm.folded, sm.foldedN = protocol.NewAIState(), 0
	}
	for _, ev := range evs[sm.foldedN:at] {
		if err := protocol.Fold(sm.folded, ev); err != nil {
			return fmt.Errorf("refold of event %d: %w", ev.Index, err)
		}
	}
	if sm.foldedN = at; at > 0 {
		sm.lastID = evs[at-1].ID
	}
	// A tool that needs approval runs only once the user approved its
	// call (R-APPROVAL-01): the log has the approval before the run's claim.
	approved := approvedCalls(sm.storedLog())
	for _, call := range sm.tools.ranCalls("guard") {
		if !approved[call] {
			return fmt.Errorf("the guard call %s ran without an approval applied in the log", call)
		}
	}
	sm.compared++
	a, _ := protocol.MarshalState(st)
	b, _ := protocol.MarshalState(sm.folded)
	if !bytes.Equal(a, b) {
		return fmt.Errorf("the actor's state differs from the fold of the log at %d:\n%s\n%s", at, a, b)
	}
	return nil
}

// lanePending reports whether the state owes a model step the transcript
// has not started.
func (sm *simulation) lanePending() bool {
	st, _ := sm.frontier()
	if st == nil || sm.tr.stream != nil {
		return false
	}
	for _, w := range protocol.Pending(protocol.WorkPolicy{}, st) {
		if w.Kind == protocol.WorkGeneration {
			return true
		}
	}
	return false
}

func (sm *simulation) send(c protocol.UIMessageChunk) {
	tr := sm.tr
	if tr.stream == nil {
		return
	}
	select {
	case tr.stream.chunks <- c:
		tr.awaitNextOrEnd()
	case <-tr.stream.ctx.Done():
		tr.stream = nil // the step was cancelled (a stop, a crash)
	case <-time.After(transcriptWait):
		tr.t.Fatal("the lane did not take the chunk")
	}
}

// awaitNextOrEnd is awaitNext for a lane that may be cancelled meanwhile.
func (tr *transcript) awaitNextOrEnd() {
	select {
	case <-tr.stream.waiting:
	case <-tr.stream.ctx.Done():
		tr.stream = nil
	case <-time.After(transcriptWait):
		tr.t.Fatal("the lane did not ask for the next chunk")
	}
}

// crash loses the held writes (their callers learn nothing), closes the
// runtime and opens another on what the store holds.
func (sm *simulation) crash() {
	tr := sm.tr
	lose := sm.loseHeld
	tr.stream = nil
	// Close waits for the writes in flight, and a session that stops may
	// start another: every write is lost until the runtime has closed.
	closed := make(chan struct{})
	go func() { tr.f.rt.Close(); sm.closeFenced(); close(closed) }()
	deadline := time.After(transcriptWait)
	for done := false; !done; {
		lose()
		select {
		case <-closed:
			done = true
		case <-time.After(time.Millisecond):
		case <-deadline:
			tr.t.Fatal("the crashed runtime did not close")
		}
	}
	lose()
	tr.f.rt = sm.member()
	sm.textOpen, sm.finished = false, false
}

func (sm *simulation) step() {
	tr, r := sm.tr, sm.r
	sm.n++
	id := func(kind string) string { return kind + strconv.Itoa(sm.n) }
	held := func() int {
		tr.store.mu.Lock()
		defer tr.store.mu.Unlock()
		return len(tr.store.held)
	}
	switch k := r.IntN(20); {
	case k < 3:
		sm.logf("push text")
		sm.push(protocol.Inputs.Text(id("m"), "hello"), "new", nil)
	case k == 3:
		sm.logf("push passive")
		passive := false
		sm.push(protocol.Inputs.Message(protocol.UIMessage{ID: id("p"), Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: "fyi"}}},
			protocol.MessageOptions{Generate: &passive}), "new", nil)
	case k == 4:
		sm.logf("push a control")
		var ev protocol.Event
		switch n := r.IntN(11); n {
		case 10:
			// The user retries a failed response, or one that did not fail.
			if ev = sm.retry(id("r")); ev.Type == "" {
				return
			}
		case 6, 7, 8, 9:
			// The user edits, moves, removes or sends now a queued input.
			ev = sm.queueCommand(n-6, id("e"))
			if ev.Type == "" {
				return
			}
		case 4, 5:
			// The user answers a pending approval of a guard call, or
			// answers again one already answered.
			ev = sm.approval(r.IntN(3) > 0)
			if ev.ID == "" {
				return
			}
		case 0:
			ev = protocol.Inputs.Pause([]string{protocol.PauseNow, protocol.PauseAfterTurn}[r.IntN(2)])
		case 1:
			ev = protocol.Inputs.Resume()
		case 2:
			turn := "t"
			if st, _ := sm.frontier(); st != nil && st.Active != nil {
				turn = st.Active.TurnID
			}
			ev = protocol.Inputs.Stop(turn, sm.seenIndex())
		case 3:
			var turn *string
			if st, _ := sm.frontier(); st != nil && st.Active != nil {
				turn = &st.Active.TurnID
			}
			ev = protocol.Inputs.Steer(turn, protocol.UIMessage{ID: id("s"), Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: "steer"}}}, nil)
		}
		if ev.ID == "" {
			ev.ID = id("c")
		}
		sm.push(ev, "new", nil)
	case k == 5 && len(sm.pushes) > 0:
		p := sm.pushes[r.IntN(len(sm.pushes))]
		if p.done == nil || p.done.err != nil || p.expect != "new" {
			return
		}
		if r.IntN(2) == 0 {
			sm.logf("resubmit %s", p.ev.ID)
			sm.push(p.ev, "replay", p)
		} else {
			sm.logf("reuse %s", p.ev.ID)
			ev := protocol.Inputs.Text(p.ev.ID, "other content")
			if bytes.Equal(ev.Payload, p.ev.Payload) && ev.Type == p.ev.Type {
				return
			}
			sm.push(ev, "conflict", p)
		}
	case k < 10 && held() > 0:
		sm.logf("ack")
		if err := tr.store.ack(); err != nil && !errors.Is(err, persistence.ErrIndexConflict) {
			sm.logf("ack: %v", err)
		}
	case k == 10 && held() > 0:
		sm.logf("fail a write")
		tr.store.mu.Lock()
		w := tr.store.held[0]
		tr.store.held = tr.store.held[1:]
		tr.store.mu.Unlock()
		w.done(nil, fmt.Errorf("%w: the disk said no", persistence.ErrFailed))
	case k < 13 && sm.lanePending():
		if !sm.startStep() {
			return
		}
		sm.logf("step")
	case k < 16 && tr.stream != nil && !sm.finished && sm.textOpen && r.IntN(2) == 0:
		// The step calls a tool and ends its text and the step with it.
		name := []string{"probe", "calc", "guard"}[r.IntN(3)]
		sm.logf("send a %s call", name)
		sm.send(protocol.UIMessageChunk{Type: protocol.ChunkTextEnd, ID: "t0"})
		sm.send(protocol.UIMessageChunk{Type: protocol.ChunkToolInputAvailable, ToolCallID: id("call"), ToolName: name, Input: json.RawMessage(`{}`)})
		sm.send(protocol.UIMessageChunk{Type: protocol.ChunkFinish, FinishReason: "tool-calls"})
		sm.finished = true
	case k < 16 && tr.stream != nil && !sm.finished:
		c := protocol.UIMessageChunk{Type: protocol.ChunkTextDelta, ID: "t0", Delta: "word "}
		switch {
		case r.IntN(16) == 0:
			// The provider fails the step: the response fails and awaits
			// a retry (or a stop).
			c = protocol.UIMessageChunk{Type: protocol.ChunkError, ErrorText: "the provider failed"}
			sm.finished = true
		case !sm.textOpen:
			c = protocol.UIMessageChunk{Type: protocol.ChunkTextStart, ID: "t0"}
			sm.textOpen = true
		case r.IntN(4) == 0:
			c = protocol.UIMessageChunk{Type: protocol.ChunkTextEnd, ID: "t0"}
			sm.send(c)
			sm.logf("send %s", c.Type)
			c = protocol.UIMessageChunk{Type: protocol.ChunkFinish, FinishReason: "stop"}
			sm.finished = true
		}
		sm.logf("send %s", c.Type)
		sm.send(c)
	case k < 17 && tr.stream != nil && sm.finished:
		sm.logf("end")
		sm.endStream()
	case k == 17 && r.IntN(2) == 0:
		if !sm.tools.end(simToolEnd{out: json.RawMessage(`{"ok":true}`)}) {
			return
		}
		sm.logf("tool done")
	case k == 17:
		if !sm.tools.end(simToolEnd{err: errors.New("the tool failed")}) {
			return
		}
		sm.logf("tool failed")
	case k < 19:
		d := time.Duration(1+r.IntN(20)) * time.Millisecond
		sm.logf("tick %s", d)
		tr.clock.advance(d)
	case k == 19 && r.IntN(4) == 0:
		sm.logf("crash")
		sm.crash()
	case k == 19 && r.IntN(3) == 0:
		sm.reconnect()
	case k == 19 && r.IntN(2) == 0:
		sm.move()
	default:
		return
	}
	sm.settle()
}

// startStep starts the step the state owes, if its lane asks within a
// moment (a lane can also wait on the clock first: a retry's backoff).
func (sm *simulation) startStep() bool {
	tr := sm.tr
	select {
	case tr.model.begin <- struct{}{}:
	case <-time.After(20 * time.Millisecond):
		return false
	}
	select {
	case tr.stream = <-tr.model.steps:
	case <-time.After(transcriptWait):
		tr.t.Fatal("a step began but never streamed")
	}
	sm.textOpen, sm.finished = false, false
	tr.awaitNextOrEnd()
	return true
}

func (sm *simulation) endStream() {
	tr := sm.tr
	if tr.stream == nil {
		return
	}
	close(tr.stream.chunks)
	select {
	case <-tr.stream.closed:
	case <-time.After(transcriptWait):
		tr.t.Fatal("the lane did not end")
	}
	tr.stream = nil
}

// drain lets the session settle with no client: every write acknowledged,
// every step streamed to its end, the clock moved past every hold.
func (sm *simulation) drain() error {
	tr := sm.tr
	// 20 s of the clock (past every backoff of the runtime's clock), and
	// 10 s of the machine's at least: work the runtime hands to goroutines
	// of its own (a tool's run starting) can lag the clock on a loaded
	// machine.
	start := time.Now()
	for i := 0; i < 2000 || time.Since(start) < 10*time.Second; i++ {
		progressed := false
		for tr.store.ack() == nil {
			progressed = true
		}
		for sm.tools.end(simToolEnd{out: json.RawMessage(`{"ok":true}`)}) {
			progressed = true
		}
		if tr.stream != nil {
			if !sm.finished {
				if sm.textOpen {
					sm.send(protocol.UIMessageChunk{Type: protocol.ChunkTextEnd, ID: "t0"})
				}
				if tr.stream != nil {
					sm.send(protocol.UIMessageChunk{Type: protocol.ChunkFinish, FinishReason: "stop"})
				}
				sm.finished = true
			}
			sm.endStream()
			progressed = true
		} else if ev := sm.approval(true); ev.ID != "" {
			// The clients answer every approval still pending.
			sm.push(ev, "new", nil)
			sm.settle()
			continue
		} else if sm.lanePending() {
			// A paused session owes a step it will not start: resume it.
			if st, _ := sm.frontier(); st != nil && (st.Inbox.Paused || (st.Active != nil && st.Active.Phase == protocol.PhasePaused)) {
				ev := protocol.Inputs.Resume()
				sm.n++
				ev.ID = "drain-resume" + strconv.Itoa(sm.n)
				sm.push(ev, "new", nil)
				sm.settle()
				continue
			}
			progressed = sm.startStep()
		}
		tr.clock.advance(10 * time.Millisecond)
		sm.settle()
		if err := sm.check(); err != nil {
			return err
		}
		if !progressed {
			st, _ := sm.frontier()
			if st != nil && len(protocol.Pending(protocol.WorkPolicy{}, st)) == 0 {
				return sm.allAnswered()
			}
			if i >= 2000 {
				time.Sleep(time.Millisecond) // past the clock's 20 s: wait for the machine
			}
		}
	}
	for tr.store.ack() == nil {
	}
	sm.settle()
	st, _ := sm.frontier()
	if st == nil {
		return errors.New("the session did not settle: a write is always in flight")
	}
	b, _ := json.Marshal(st)
	return fmt.Errorf("the session did not settle: pending %+v, state %s", protocol.Pending(protocol.WorkPolicy{}, st), b)
}

func runSimulation(t *testing.T, seed uint64, steps int) {
	st := newSimTools()
	guard := st.tool("guard", "rerun")
	guard.NeedsApproval = func(json.RawMessage) bool { return true }
	tr := newTranscriptWith(t, protocol.ProgressOptions{}, []tools.Tool{st.tool("probe", "report"), st.tool("calc", "rerun"), guard})
	sm := &simulation{tr: tr, r: rand.New(rand.NewPCG(seed, seed^0x5bd1e995)), tools: st}
	tr.f.rt.Close()
	tr.f.rt = sm.member()
	t.Cleanup(func() {
		if t.Failed() {
			tail := sm.log
			if len(tail) > 30 {
				tail = tail[len(tail)-30:]
			}
			t.Logf("seed %d (replay with A2_SEED=%d go test ./actors -run TestSimulatedSchedules); last steps: %v", seed, seed, tail)
		}
	})
	fail := func(err error) {
		t.Helper()
		tail := sm.log
		if len(tail) > 60 {
			tail = tail[len(tail)-60:]
		}
		// The log's last events, for the failing seed's story.
		evs := sm.storedLog()
		if len(evs) > 60 {
			evs = evs[len(evs)-60:]
		}
		for _, ev := range evs {
			payload := string(ev.Payload)
			if len(payload) > 160 {
				payload = payload[:160] + "..."
			}
			t.Logf("  event %d %s %s %s", ev.Index, ev.Type, ev.ID, payload)
		}
		t.Fatalf("seed %d (replay with A2_SEED=%d go test ./actors -run TestSimulatedSchedules): %v\nlast steps: %v", seed, seed, err, tail)
	}
	for i := 0; i < steps; i++ {
		sm.step()
		if err := sm.check(); err != nil {
			fail(err)
		}
	}
	if err := sm.drain(); err != nil {
		fail(err)
	}
	if err := sm.streamCaughtUp(); err != nil {
		fail(err)
	}
	sm.closeFenced()
	kinds := map[string]int{}
	for _, l := range sm.log {
		kinds[strings.SplitN(l, " ", 2)[0]]++
	}
	last, _ := tr.store.Store.LastIndex(context.Background(), tr.session)
	st.mu.Lock()
	runs := len(st.runs)
	st.mu.Unlock()
	streamed := 0
	if sm.stream != nil {
		streamed = sm.stream.got
	}
	t.Logf("seed %d: %d steps %v; commands applied %v; %d tool calls run; %d states compared with the log; %d events, %d streamed",
		seed, len(sm.log), kinds, appliedCommands(sm.storedLog()), runs, sm.compared, last, streamed)
}

// TestSimulatedSchedules runs seeded schedules of the real session actor
// (see above).
func TestSimulatedSchedules(t *testing.T) {
	if v := os.Getenv("A2_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		runSimulation(t, seed, 120)
		return
	}
	n := 200
	if v, err := strconv.Atoi(os.Getenv("A2_SIM_SESSIONS")); err == nil && v > 0 {
		n = v
	}
	// A2_SIM_WORKERS schedules run side by side (default GOMAXPROCS), each
	// worker's one after the other: a worker holds one schedule's runtime
	// and store at a time, so the process's memory stays flat however many
	// run (t.Parallel would start every subtest at once).
	first := uint64(1) // A2_SIM_FIRST: the first seed (runs in batches)
	if v, err := strconv.ParseUint(os.Getenv("A2_SIM_FIRST"), 10, 64); err == nil && v > 0 {
		first = v
	}
	workers := runtime.GOMAXPROCS(0)
	if v, err := strconv.Atoi(os.Getenv("A2_SIM_WORKERS")); err == nil && v > 0 {
		workers = v
	}
	var next atomic.Uint64
	next.Store(first)
	end := first + uint64(n)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				seed := next.Add(1) - 1
				if seed >= end || t.Failed() {
					return
				}
				t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) { runSimulation(t, seed, 120) })
			}
		})
	}
	wg.Wait()
}
