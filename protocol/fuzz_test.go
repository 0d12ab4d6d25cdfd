package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"testing"
)

// sim drives the pure core with a random sequence of client commands and
// worker events, the way a session actor would: commands are validated,
// decided and appended with their effects; worker events are appended and
// followed by Step. It checks the invariants after every append.
type sim struct {
	log    []Event
	state  *AIState
	policy Policy
	n      int
	gens   int
	frozen map[string][]byte // messages as first seen settled (settledMessages)
	// sizes is kept from fold to fold, as a session actor keeps its
	// prompts' cache from step to step (checkSizes).
	sizes     MessageCache[int64]
	context   ContextCache
	deferrals DeferralCache
}

func newSim() *sim { return &sim{state: NewAIState(), policy: Policy{MaxSteps: 4}} }

// fencedOrSettled reports whether folding ev must leave the state
// unchanged: an event of a fenced owner (a generation interrupted or
// superseded before it), or a tool outcome for a call that already has
// its terminal outcome.
func (s *sim) fencedOrSettled(ev Event) bool {
	var p struct {
		GenerationID string `json:"generationId"`
		ToolCallID   string `json:"toolCallId"`
	}
	switch ev.Type {
	case TypeGenerationProgress, TypeGenerationCompleted, TypeGenerationFailed:
		_ = json.Unmarshal(ev.Payload, &p)
		switch s.state.TerminalGenerations[p.GenerationID] {
		case GenInterrupted, GenSuperseded:
			return true
		}
	case TypeToolExecCompleted:
		_ = json.Unmarshal(ev.Payload, &p)
		t, ok := s.state.Tools[p.ToolCallID]
		return ok && toolTerminal(t.Status) && !t.Running
	}
	return false
}

func (s *sim) append(evs ...Event) error {
	for _, ev := range evs {
		ev.Session = "s1"
		ev.Index = uint64(len(s.log) + 1)
		before, _ := json.Marshal(ev)
		var unchanged []byte
		if s.fencedOrSettled(ev) {
			unchanged, _ = MarshalState(s.state)
		}
		if s.frozen == nil {
			s.frozen = settledMessages(s.state)
		}
		if err := Fold(s.state, ev); err != nil {
			return err
		}
		if err := stillSettled(s.frozen, s.state, ev); err != nil {
			return err
		}
		if err := s.checkSizes(); err != nil {
			return fmt.Errorf("after %s %s: %w", ev.Type, ev.ID, err)
		}
		for id, b := range settledMessages(s.state) {
			if _, ok := s.frozen[id]; !ok {
				s.frozen[id] = b
			}
		}
		if unchanged != nil {
			if now, _ := MarshalState(s.state); !bytes.Equal(now, unchanged) {
				return fmt.Errorf("event %s %s of a fenced owner or a settled call changed the state", ev.Type, ev.ID)
			}
		}
		after, _ := json.Marshal(ev)
		if !bytes.Equal(before, after) {
			return fmt.Errorf("fold mutated event %s", ev.ID)
		}
		s.log = append(s.log, ev)
	}
	return nil
}

func (s *sim) command(c Command, trust Trust) error {
	s.n++
	id := "c" + strconv.Itoa(s.n)
	if c.Message != nil {
		c.Message.ID = id
	}
	ev := Event{ID: id, Type: TypeControlRequested, Payload: mustJSON(c), Session: "s1"}
	if c.Action == ActionSendNow && c.TurnID == nil {
		ev.Payload = append(ev.Payload[:len(ev.Payload)-1], []byte(`,"turnId":null}`)...)
	}
	if _, err := ValidateCommand(ev, trust); err != nil {
		return nil // refused at ingress: nothing is appended
	}
	out, err := s.decide(ev)
	if err != nil {
		return err
	}
	if len(out) == 0 || out[0].Type != TypeControlDecided {
		return fmt.Errorf("command %s: no receipt first in %v", id, out)
	}
	return s.append(append([]Event{ev}, out...)...)
}

// decide is Decide, checked against DecideInPlace on a copy of the state:
// the same events, and the copy as folding them leaves the state.
func (s *sim) decide(ev Event) ([]Event, error) {
	out, err := Decide(s.policy, s.state, ev)
	if err != nil {
		return nil, err
	}
	w := s.state.Clone()
	in, err := DecideInPlace(s.policy, w, ev)
	if err != nil {
		return nil, fmt.Errorf("command %s: DecideInPlace failed where Decide did not: %v", ev.ID, err)
	}
	if !reflect.DeepEqual(in, out) {
		return nil, fmt.Errorf("command %s: DecideInPlace returned %v, Decide %v", ev.ID, in, out)
	}
	return out, s.sameAfter(w, append([]Event{ev}, out...))
}

// sameAfter folds evs into a copy of the state and compares it with want,
// a state the in-place functions left.
func (s *sim) sameAfter(want *AIState, evs []Event) error {
	c := s.state.Clone()
	for _, ev := range evs {
		if err := Fold(c, ev); err != nil {
			return err
		}
	}
	a, _ := MarshalState(c)
	b, _ := MarshalState(want)
	if !bytes.Equal(a, b) {
		return fmt.Errorf("folding the decided events gives\n%s\nthe in-place call left\n%s", a, b)
	}
	return nil
}

// editCommand edits input m.ID (command's own ID differs from the message's).
func (s *sim) editCommand(m *UIMessage) error {
	s.n++
	id := "c" + strconv.Itoa(s.n)
	ev := Event{ID: id, Type: TypeControlRequested, Payload: mustJSON(Command{Action: ActionEdit, Message: m}), Session: "s1"}
	if _, err := ValidateCommand(ev, Trusted); err != nil {
		return nil
	}
	out, err := s.decide(ev)
	if err != nil {
		return err
	}
	return s.append(append([]Event{ev}, out...)...)
}

func (s *sim) worker(ev Event) error {
	s.n++
	ev.ID = "w" + strconv.Itoa(s.n)
	if err := s.append(ev); err != nil {
		return err
	}
	more, err := Step(s.policy, s.state)
	if err != nil {
		return err
	}
	w := s.state.Clone()
	in, err := StepInPlace(s.policy, w)
	if err != nil {
		return fmt.Errorf("StepInPlace failed where Step did not: %v", err)
	}
	if !reflect.DeepEqual(in, more) {
		return fmt.Errorf("StepInPlace returned %v, Step %v", in, more)
	}
	if err := s.sameAfter(w, more); err != nil {
		return err
	}
	return s.append(more...)
}

// pick returns an ID the state knows of, to aim commands at real targets
// most of the time.
func (s *sim) pickInput(r *rand.Rand) string {
	if items := s.state.Inbox.Items; len(items) > 0 && r.IntN(5) > 0 {
		return items[r.IntN(len(items))].ID
	}
	return "c" + strconv.Itoa(r.IntN(s.n+1))
}

func (s *sim) turn(r *rand.Rand) *string {
	if a := s.state.Active; a != nil && r.IntN(4) > 0 {
		t := a.TurnID
		return &t
	}
	if r.IntN(3) == 0 {
		return nil
	}
	t := DeriveID("turn", "s1", "c"+strconv.Itoa(r.IntN(s.n+1)))
	return &t
}

func (s *sim) step(r *rand.Rand) error {
	st := s.state
	text := func() *UIMessage {
		role := RoleUser
		if r.IntN(8) == 0 {
			role = []string{RoleSystem, RoleAssistant}[r.IntN(2)]
		}
		return &UIMessage{Role: role, Parts: []Part{{Type: PartText, Text: "x"}}}
	}
	last := func() *int64 {
		if r.IntN(2) == 0 {
			return nil
		}
		v := int64(r.IntN(12) - 1)
		return &v
	}
	g := st.ActiveGeneration
	switch r.IntN(24) {
	case 0, 1, 2:
		f := r.IntN(4) > 0
		return s.command(Command{Action: ActionSend, Message: text(), Generate: &f}, Trust(r.IntN(2)))
	case 3:
		return s.command(Command{Action: ActionSteer, Message: text(), TurnID: s.turn(r), LastSeenIndex: last()}, Untrusted)
	case 4:
		m := text()
		m.ID = s.pickInput(r)
		return s.editCommand(m)
	case 5:
		var before *string
		if r.IntN(2) == 0 {
			b := s.pickInput(r)
			before = &b
		}
		return s.command(Command{Action: ActionMove, InputID: s.pickInput(r), BeforeID: before}, Untrusted)
	case 6:
		return s.command(Command{Action: ActionRemove, InputID: s.pickInput(r)}, Untrusted)
	case 7:
		return s.command(Command{Action: ActionSendNow, InputID: s.pickInput(r), TurnID: s.turn(r), LastSeenIndex: last()}, Untrusted)
	case 8:
		t := s.turn(r)
		if t == nil {
			x := "none"
			t = &x
		}
		return s.command(Command{Action: ActionStop, TurnID: t, LastSeenIndex: last()}, Untrusted)
	case 9:
		return s.command(Command{Action: ActionPause, When: []string{PauseNow, PauseAfterTurn}[r.IntN(2)]}, Untrusted)
	case 10:
		return s.command(Command{Action: ActionResume}, Untrusted)
	case 11:
		resp := "nope"
		if a := st.Active; a != nil {
			resp = a.ResponseMessageID
		}
		return s.command(Command{Action: ActionRetry, MessageID: "m", ResponseMessageID: resp, RetryID: strconv.Itoa(s.n)}, Untrusted)
	case 12:
		for id, pa := range st.PendingApprovals {
			ok := r.IntN(2) == 0
			return s.command(Command{Action: ActionApproval, ApprovalID: id, Approved: &ok, RequestID: pa.RequestID, GenerationID: pa.GenerationID}, Untrusted)
		}
		return nil
	case 13:
		c := Command{Action: ActionInterrupt, MessageID: "x", RequestID: st.ActiveRequestID}
		if a := st.Active; a != nil {
			c.MessageID = a.ResponseMessageID
		}
		if g != nil && r.IntN(2) == 0 {
			c.RequestID, c.GenerationID = "", g.GenerationID
		}
		if c.RequestID == "" && c.GenerationID == "" {
			c.RequestID = "r"
		}
		return s.command(c, Untrusted)
	case 14, 15:
		if st.ActiveRequestID == "" || r.IntN(6) == 0 {
			return nil
		}
		s.gens++
		return s.worker(Event{Type: TypeGenerationStarted, Payload: mustJSON(GenerationStarted{
			GenerationID: "g" + strconv.Itoa(s.gens), RequestID: st.ActiveRequestID, Attempt: 1})})
	case 16, 17:
		gen := "g" + strconv.Itoa(r.IntN(s.gens+1))
		from := 0
		if pr := st.ActiveProjection; pr != nil && pr.GenerationID == gen {
			from = pr.Chunks - r.IntN(2)
			if from < 0 {
				from = 0
			}
		}
		n := s.n
		chunks := []UIMessageChunk{{Type: ChunkTextStart, ID: "t"}, {Type: ChunkTextDelta, ID: "t", Delta: "hi"}}
		switch r.IntN(4) {
		case 0:
			chunks = append(chunks, UIMessageChunk{Type: ChunkToolInputAvailable, ToolCallID: "call" + strconv.Itoa(n), ToolName: "search", Input: json.RawMessage(`{}`)})
		case 1:
			chunks = append(chunks, UIMessageChunk{Type: ChunkToolInputAvailable, ToolCallID: "call" + strconv.Itoa(n), ToolName: "deploy", Input: json.RawMessage(`{}`)},
				UIMessageChunk{Type: ChunkToolApproval, ToolCallID: "call" + strconv.Itoa(n), ApprovalID: "ap" + strconv.Itoa(n)})
		case 2:
			chunks = append(chunks, UIMessageChunk{Type: ChunkToolInputStart, ToolCallID: "call" + strconv.Itoa(n), ToolName: "w"},
				UIMessageChunk{Type: ChunkToolInputDelta, ToolCallID: "call" + strconv.Itoa(n), InputTextDelta: `{"a":`})
		}
		return s.worker(Event{Type: TypeGenerationProgress, Payload: mustJSON(GenerationProgress{GenerationID: gen, FromIndex: from, Chunks: chunks})})
	case 18:
		if g == nil || g.State != "streaming" {
			return nil
		}
		return s.worker(Event{Type: TypeGenerationCompleted, Payload: mustJSON(GenerationCompleted{GenerationID: g.GenerationID})})
	case 19:
		if g == nil {
			return nil
		}
		if r.IntN(2) == 0 {
			return s.worker(Event{Type: TypeGenerationFailed, Payload: mustJSON(GenerationFailed{GenerationID: g.GenerationID, Message: "boom"})})
		}
		return s.worker(Event{Type: TypeGenerationSuperseded, Payload: mustJSON(GenerationSuperseded{GenerationID: g.GenerationID, RequestID: g.RequestID, Attempt: 1})})
	case 20:
		for id, t := range st.Tools {
			if r.IntN(2) == 0 {
				continue
			}
			return s.worker(Event{Type: TypeToolExecCompleted, Payload: mustJSON(ToolExecutionCompleted{ToolCallID: id, GenerationID: t.GenerationID, Version: t.Version, Output: json.RawMessage(`1`)})})
		}
		if a := st.Active; a != nil && len(a.Settling) > 0 {
			return s.worker(Event{Type: TypeGenerationSuperseded, Payload: mustJSON(GenerationSuperseded{GenerationID: a.Settling[0]})})
		}
		return nil
	case 22:
		// A compaction before the step: its part in the response, running.
		if g == nil || g.State != "streaming" || st.Active == nil {
			return nil
		}
		return s.worker(Event{Type: TypeCompactionRequested, Payload: mustJSON(CompactionRequested{
			GenerationID: g.GenerationID, ResponseMessageID: st.Active.ResponseMessageID})})
	case 23:
		// The summary: what precedes the part leaves the model context.
		if g == nil {
			return nil
		}
		return s.worker(Event{Type: TypeCompactionCompleted, Payload: mustJSON(CompactionCompleted{
			GenerationID: g.GenerationID, Summary: "summary " + strconv.Itoa(s.n)})})
	case 21:
		if r.IntN(40) == 0 {
			return s.worker(Event{Type: TypeSessionClosed, Payload: json.RawMessage(`{}`)})
		}
		return nil
	}
	return nil
}

// check verifies the invariants of the fuzz target: the fold equals a fresh
// fold of the log, snapshots round-trip, checkState holds, and no work is
// pending for a closed session.
func (s *sim) check() error {
	fresh := NewAIState()
	for _, ev := range s.log {
		if err := Fold(fresh, ev); err != nil {
			return fmt.Errorf("refold: %w", err)
		}
	}
	a, _ := MarshalState(s.state)
	b, _ := MarshalState(fresh)
	if !bytes.Equal(a, b) {
		return fmt.Errorf("incremental fold differs from a fresh fold:\n%s\n%s", a, b)
	}
	if err := checkState(s.log, s.state); err != nil {
		return err
	}
	if s.state.Session.Status == SessionStatusClosed && (s.state.Active != nil || len(Pending(WorkPolicy{}, s.state)) > 0) {
		return fmt.Errorf("closed session has an active turn or pending work")
	}
	// AppendPending keeps what dst holds and writes over its spare room only
	// (the actor reuses one slice for every reconcile).
	pending := Pending(WorkPolicy{}, s.state)
	used := make([]Work, 1, 8)
	used[0] = Work{Kind: "kept"}
	for i := 1; i < cap(used); i++ {
		used[:cap(used)][i] = Work{Kind: "stale", EventID: "stale"}
	}
	if got, want := AppendPending(used, WorkPolicy{}, s.state), append([]Work{{Kind: "kept"}}, pending...); !reflect.DeepEqual(got, want) {
		return fmt.Errorf("AppendPending onto one work item = %+v, want %+v", got, want)
	}
	if got := AppendPending(used[:0], WorkPolicy{}, s.state); !reflect.DeepEqual(got, pending) && len(got)+len(pending) > 0 {
		return fmt.Errorf("AppendPending onto a reused slice = %+v, want %+v", got, pending)
	}
	// R-GEN-05: every generation request names its response, and a
	// continuation its source generation.
	for _, ev := range s.log {
		if ev.Type != TypeGenerationRequested {
			continue
		}
		var p GenerationRequested
		if err := json.Unmarshal(ev.Payload, &p); err != nil || p.ResponseMessageID == "" ||
			(p.Reason == RequestContinue && p.SourceGenerationID == "") {
			return fmt.Errorf("generation request %s lacks responseMessageId or sourceGenerationId: %s", ev.ID, ev.Payload)
		}
	}
	return nil
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

func runSim(seed uint64, steps int) error {
	r := newRand(seed)
	s := newSim()
	for i := 0; i < steps; i++ {
		if err := s.step(r); err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
		if i%50 == 49 || i == steps-1 {
			if err := s.check(); err != nil {
				return fmt.Errorf("after step %d: %w", i, err)
			}
		}
	}
	return nil
}

// TestRandomSessions folds many seeded random command sequences and checks
// the invariants: at most one active turn, every input exactly one of
// pending, admitted or removed, exactly one receipt per command, a fold
// equal to a fresh fold, and no panic. Set A2_SEED to replay one seed.
func TestRandomSessions(t *testing.T) {
	if v := os.Getenv("A2_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if err := runSim(seed, 400); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		return
	}
	n := 300
	if testing.Short() {
		n = 30
	}
	// The mutation run (docs/contributing.md) sets fewer seeds.
	if v, err := strconv.Atoi(os.Getenv("A2_RANDOM_SESSIONS")); err == nil && v > 0 {
		n = v
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		if err := runSim(seed, 200); err != nil {
			t.Fatalf("seed %d (replay with A2_SEED=%d): %v", seed, seed, err)
		}
	}
}

// FuzzSession is the same simulation driven by the fuzzer's bytes.
func FuzzSession(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3, 42, 1000} {
		f.Add(seed, uint16(300))
	}
	f.Fuzz(func(t *testing.T, seed uint64, steps uint16) {
		if err := runSim(seed, int(steps%1000)); err != nil {
			t.Fatalf("seed %d steps %d: %v", seed, steps, err)
		}
	})
}

// FuzzFoldBytes folds arbitrary payloads under every built-in type: a fold
// returns an error or succeeds, never panics.
func FuzzFoldBytes(f *testing.F) {
	f.Add(uint8(0), []byte(`{"action":"send","message":{"id":"m","role":"user","parts":[]}}`))
	f.Add(uint8(1), []byte(`{"commandId":"m","outcome":"applied"}`))
	f.Add(uint8(6), []byte(`{"generationId":"g","fromIndex":0,"chunks":[{"type":"text-delta","id":"x"}]}`))
	f.Fuzz(func(t *testing.T, typ uint8, payload []byte) {
		s := NewAIState()
		for i, ty := range BuiltinTypes {
			_ = Fold(s, Event{ID: "e" + strconv.Itoa(i), Type: BuiltinTypes[int(typ)%len(BuiltinTypes)], Payload: payload})
			_ = Fold(s, Event{ID: "f" + strconv.Itoa(i), Type: ty, Payload: payload})
		}
		if _, err := MarshalState(s); err != nil {
			t.Fatal(err)
		}
	})
}

// checkSizes checks that the estimate of a step's prompt made with the
// cache of earlier steps (MessageCache, which keeps what settled messages
// measured) equals the whole computation, on the model context of the
// state as the writer reads it when a step starts; that a step's copy of
// the state (AIState.StepCopy) says what the state says of unsettled tool
// work and of the active response; and that a step's copy of its context
// (StepMessages) shares no parts the folds change.
func (s *sim) checkSizes() error {
	if err := checkIndex(s.state); err != nil {
		return err
	}
	snap := s.state.StepCopy()
	if got, want := snap.unsettledWork(), s.state.unsettledWork(); got != want {
		return fmt.Errorf("a step's copy names %q as unsettled tool work, the state %q", got, want)
	}
	if snap.Messages != nil {
		return fmt.Errorf("a step's copy holds %d messages: the transcript is the writer's", len(snap.Messages))
	}
	for _, v := range []bool{false, true} {
		if got, want := s.deferrals.Deferral(s.state, v), CompactionDeferral(s.state, v); got != want {
			return fmt.Errorf("the cached deferral is %q, the whole computation %q", got, want)
		}
	}
	for _, m := range s.state.Messages {
		if snap.IsActiveResponse(m.ID) != s.state.IsActiveResponse(m.ID) {
			return fmt.Errorf("a step's copy and the state disagree on whether %s is the active response", m.ID)
		}
	}
	step := StepMessages(s.state, s.state.Messages)
	for i, m := range s.state.Messages {
		if step[i].ID != m.ID || len(step[i].Parts) != len(m.Parts) {
			return fmt.Errorf("a step's copy of message %d is %s with %d parts, the state's %s with %d", i, step[i].ID, len(step[i].Parts), m.ID, len(m.Parts))
		}
		// Folds change the active response's parts in place: the copy has
		// its own.
		if s.state.IsActiveResponse(m.ID) && len(m.Parts) > 0 && &step[i].Parts[0] == &m.Parts[0] {
			return fmt.Errorf("a step's copy shares the parts of the active response %s with the state", m.ID)
		}
	}
	summary, after := ModelContext(s.state.Messages)
	settled := func(id string) bool { return !s.state.IsActiveResponse(id) }
	cs, cafter := s.context.ModelContext(s.state.Messages, settled)
	if cs != summary || !sameContext(cafter, after) {
		return fmt.Errorf("the cached model context is %q and %d messages, the whole computation %q and %d", cs, len(cafter), summary, len(after))
	}
	err := s.sizes.Update(after, settled, func(m *TranscriptMessage) (int64, error) { return MessageBytes(*m), nil })
	if err != nil {
		return err
	}
	var cached int64
	for i := 0; i < s.sizes.Len(); i++ {
		cached += s.sizes.At(i)
	}
	if full := EstimateBytes(after, nil, ""); cached != full {
		return fmt.Errorf("the cached estimate is %d bytes, the whole computation %d", cached, full)
	}
	return nil
}

// sameContext reports whether two model contexts hold the same messages
// with the same parts.
func sameContext(a, b []TranscriptMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || len(a[i].Parts) != len(b[i].Parts) || (len(a[i].Parts) > 0 && &a[i].Parts[0] != &b[i].Parts[0]) {
			return false
		}
	}
	return true
}

// settledMessages encodes every message but the active response. Once a
// message is not the active response, no later fold changes it in place,
// whatever becomes active (StepMessages and the step caches rely on it): the simulation
// keeps each message as first seen settled (sim.frozen) and compares it
// after every fold.
func settledMessages(s *AIState) map[string][]byte {
	out := map[string][]byte{}
	for _, m := range s.Messages {
		if !s.isActiveResponse(m.ID) {
			out[m.ID], _ = json.Marshal(m)
		}
	}
	return out
}

// stillSettled checks that the settled messages are unchanged after ev.
func stillSettled(before map[string][]byte, s *AIState, ev Event) error {
	for _, m := range s.Messages {
		b, ok := before[m.ID]
		if !ok {
			continue
		}
		if now, _ := json.Marshal(m); !bytes.Equal(now, b) {
			return fmt.Errorf("event %s %s changed message %s, which is not the active response:\n%s\n->\n%s", ev.Type, ev.ID, m.ID, b, now)
		}
	}
	return nil
}

// The package's states keep an index from their first message or tool
// call (stateindex.go), so that the random sessions check it.
func init() { indexFrom = 1 }

// checkIndex checks that the writer's index of s (stateIndex) says what a
// scan of its messages and tool calls says.
func checkIndex(s *AIState) error {
	x := s.index()
	if x == nil {
		if len(s.Messages) > 0 || len(s.Tools) > 0 {
			return fmt.Errorf("a state of %d messages and %d tool calls keeps no index", len(s.Messages), len(s.Tools))
		}
		return nil
	}
	messages := map[string]int{}
	for i, m := range s.Messages {
		messages[m.ID] = i
	}
	gens, open, unsettled := map[string]int{}, map[string]struct{}{}, map[string]struct{}{}
	for id, t := range s.Tools {
		gens[t.GenerationID]++
		if !toolTerminal(t.Status) {
			open[id] = struct{}{}
		}
		if toolWorkUnsettled(t) {
			unsettled[id] = struct{}{}
		}
	}
	switch {
	case !reflect.DeepEqual(x.messages, messages):
		return fmt.Errorf("the index places messages at %v, the transcript at %v", x.messages, messages)
	case !reflect.DeepEqual(x.toolGens, gens):
		return fmt.Errorf("the index counts tool calls by generation %v, the state %v", x.toolGens, gens)
	case !reflect.DeepEqual(x.open, open):
		return fmt.Errorf("the index holds %v as open tool calls, the state %v", x.open, open)
	case !reflect.DeepEqual(x.unsettled, unsettled):
		return fmt.Errorf("the index holds %v as unsettled tool work, the state %v", x.unsettled, unsettled)
	}
	return nil
}
