package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// observedModel wraps the script model to see what the runtime does with
// model calls: how many run at once, and why a call's context ended.
type observedModel struct {
	inner     harness.Model
	active    atomic.Int64
	maxActive atomic.Int64
	mu        sync.Mutex
	causes    []error
	prompts   []harness.Request
}

func (o *observedModel) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	n := o.active.Add(1)
	for {
		m := o.maxActive.Load()
		if n <= m || o.maxActive.CompareAndSwap(m, n) {
			break
		}
	}
	o.mu.Lock()
	o.prompts = append(o.prompts, req)
	o.mu.Unlock()
	s, err := o.inner.Stream(ctx, req)
	if err != nil {
		o.active.Add(-1)
		return nil, err
	}
	return &observedStream{Stream: s, o: o, ctx: ctx}, nil
}

// cancelled returns the causes of cancelled calls, waiting up to 2 s for
// at least one (a cancelled stream notices its context asynchronously).
func (o *observedModel) cancelled() []error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		o.mu.Lock()
		causes := append([]error(nil), o.causes...)
		o.mu.Unlock()
		if len(causes) > 0 || time.Now().After(deadline) {
			return causes
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitCalls waits (up to 5 s) until the model received at least n calls:
// the start of a step is written as soon as its model resolved, and the
// call itself follows.
func (o *observedModel) waitCalls(n int) {
	for deadline := time.Now().Add(5 * time.Second); len(o.requests()) < n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

func (o *observedModel) requests() []harness.Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]harness.Request(nil), o.prompts...)
}

type observedStream struct {
	harness.Stream
	o    *observedModel
	ctx  context.Context
	done bool
}

func (s *observedStream) Next() (protocol.UIMessageChunk, error) {
	c, err := s.Stream.Next()
	if err != nil && !s.done {
		s.done = true
		s.o.active.Add(-1)
		if s.ctx.Err() != nil {
			s.o.mu.Lock()
			s.o.causes = append(s.o.causes, context.Cause(s.ctx))
			s.o.mu.Unlock()
		}
	}
	return c, err
}

func observe(f *fixture) *observedModel {
	o := &observedModel{inner: f.model}
	return o
}

// newObserved builds a fixture whose agent talks to an observed script
// model.
func newObserved(t *testing.T, s string, mod func(*AgentOptions)) (*fixture, *observedModel) {
	var o *observedModel
	f := newFixture(t, s, func(a *AgentOptions) {
		a.Models = func(string) (harness.Model, error) { return o, nil }
		if mod != nil {
			mod(a)
		}
	})
	// The agent resolves the model per step, after this assignment.
	o = observe(f)
	return f, o
}

func textOf(m protocol.TranscriptMessage) string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == protocol.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

func promptText(req harness.Request) string {
	var b strings.Builder
	for _, m := range req.Messages {
		for _, p := range m.Content {
			b.WriteString(p.Text)
			b.WriteString("|")
		}
	}
	return b.String()
}

// R-TURN-03 R-TURN-04 R-GEN-04 R-INBOX-01 R-TURN-01: a later message waits in
// the durable inbox until the active response completes, tool loop included;
// model calls never overlap. (R-TURN-04's failed response blocking the inbox:
// TestRetryAfterProviderError.)
func TestQueueWaitsForTheTurn(t *testing.T) {
	f, o := newObserved(t, `{"replies":[{"match":"first","text":"one two three","gate":"g1"},{"match":"second","text":"second answer"}]}`, nil)
	f.push("s1", protocol.Inputs.Text("m1", "first question"))
	f.waitFor("s1", "streaming", func(s *protocol.AIState) bool { return s.Status == protocol.StatusStreaming })
	f.push("s1", protocol.Inputs.Text("m2", "second question"))
	st := f.waitFor("s1", "m2 queued", func(s *protocol.AIState) bool { return len(s.Inbox.Items) == 1 })
	o.waitCalls(1)
	if st.Inbox.Items[0].ID != "m2" || len(o.requests()) != 1 {
		t.Fatalf("inbox %+v, %d model calls", st.Inbox.Items, len(o.requests()))
	}
	f.model.Release("g1")
	st = f.waitFor("s1", "both answered", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 4 })
	if textOf(st.Messages[1]) != "one two three" || textOf(st.Messages[3]) != "second answer" {
		t.Fatalf("transcript %+v", st.Messages)
	}
	if o.maxActive.Load() != 1 {
		t.Fatalf("%d model calls ran at once", o.maxActive.Load())
	}
	if strings.Contains(promptText(o.requests()[0]), "second question") {
		t.Fatal("a pending input entered the prompt (R-INBOX-02)")
	}
}

// R-TURN-04: a later message waits while the response's tool loop runs:
// the step completed, its tool still runs, and the message stays queued
// until the continuation ends the response.
func TestQueueWaitsForTheToolLoop(t *testing.T) {
	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	started := make(chan struct{}, 1)
	slow := tools.Tool{Name: "slow", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return json.RawMessage(`{"ok":true}`), nil
	}}
	f, o := newObserved(t, `{"replies":[{"match":"first","toolCalls":[{"name":"slow","input":{}}],"then":{"text":"tool loop done"}},{"match":"second","text":"second answer"}]}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{slow} })
	f.push("s1", protocol.Inputs.Text("m1", "first question"))
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the tool did not start")
	}
	f.waitFor("s1", "the step's end, its tool running", func(s *protocol.AIState) bool {
		return s.ActiveGeneration != nil && s.ActiveGeneration.State == protocol.GenCompleted
	})
	f.push("s1", protocol.Inputs.Text("m2", "second question"))
	// The push answers once durable, with what admission decided: nothing.
	st, _, err := f.rt.State(context.Background(), "assistant", "s1")
	if err != nil || len(st.AI.Inbox.Items) != 1 || st.AI.Active == nil || st.AI.Active.Input.ID != "m1" {
		t.Fatalf("the message did not wait for the tool loop: %v, inbox %+v", err, st.AI.Inbox.Items)
	}
	close(release)
	final := f.waitFor("s1", "both answered", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 4 })
	if textOf(final.Messages[1]) != "tool loop done" || textOf(final.Messages[3]) != "second answer" {
		t.Fatalf("transcript %q %q", textOf(final.Messages[1]), textOf(final.Messages[3]))
	}
	// R-INBOX-02: the continuation, built while the message was queued,
	// does not see it.
	if reqs := o.requests(); len(reqs) != 3 || strings.Contains(promptText(reqs[1]), "second question") {
		t.Fatalf("a pending input entered the continuation's prompt (%d calls)", len(reqs))
	}
}

// R-STOP-01 R-STOP-04 R-STOP-05 R-STOP-14 R-STOP-20 R-TURN-05: a browser's
// Stop at the rendered frontier cancels the model call at once (its
// context carries the cause), cuts the response where the user saw it,
// admits the next input, and is never retried.
func TestStopCancelsAndAdmitsNext(t *testing.T) {
	f, o := newObserved(t, `{"replies":[{"match":"long","text":"alpha beta gamma delta","chunkSize":6,"gate":"g1"},{"match":"next","text":"next answer"},{"match":"again","text":"again answer"}]}`, nil)
	f.push("s1", protocol.Inputs.Text("m1", "long one"))
	f.push("s1", protocol.Inputs.Text("m2", "next one"))
	st := f.waitFor("s1", "the first chunk", func(s *protocol.AIState) bool {
		return s.ActiveProjection != nil && strings.Contains(lastText(s), "alpha")
	})
	ids := 0
	stop := protocol.Actions{View: st, NewID: func() string { ids++; return "stop-" + string(rune('0'+ids)) }}.Stop()
	if len(stop) != 1 {
		t.Fatal("stop addressed nothing")
	}
	f.push("s1", stop...) // a browser push (untrusted)
	st = f.waitFor("s1", "next answered", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 4 })
	if got := textOf(st.Messages[1]); got != "alpha " {
		t.Fatalf("the response was not cut at the rendered frontier: %q", got)
	}
	if textOf(st.Messages[3]) != "next answer" {
		t.Fatalf("next %q", textOf(st.Messages[3]))
	}
	causes := o.cancelled()
	if len(causes) != 1 || !errors.Is(causes[0], ErrStopped) {
		t.Fatalf("cancel causes %v", causes)
	}
	f.model.Release("g1")
	// A barrier, not a pause: a later turn is answered, and no call but its
	// own came between. A retry of the interrupted step would have been
	// decided with the Stop, before this turn.
	f.push("s1", protocol.Inputs.Text("m3", "next again"))
	f.waitFor("s1", "the later turn's end", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 6 })
	reqs := o.requests()
	if n := len(reqs); n != 3 || !strings.Contains(promptText(reqs[2]), "next again") {
		t.Fatalf("%d model calls, the last not the later turn's: the interrupted step was retried", n)
	}
}

// R-STEER-03 R-STEER-04 R-STEER-07 R-STEER-13 R-TURN-14: steering waits for
// the current step, then everything steering the turn enters as one turn,
// answered once; with no active turn, steer sends.
func TestSteeringHandsOffAfterTheStep(t *testing.T) {
	f, o := newObserved(t, `{"replies":[{"match":"plan","text":"planning the trip","gate":"g1"},{"text":"steered answer"},{"text":"idle steer answer"}]}`, nil)
	f.push("s1", protocol.Inputs.Text("m1", "plan a trip"))
	st := f.waitFor("s1", "streaming", func(s *protocol.AIState) bool { return s.Status == protocol.StatusStreaming })
	turn := st.Active.TurnID
	msg := func(id, text string) protocol.UIMessage {
		return protocol.UIMessage{ID: id, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: text}}}
	}
	f.push("s1", protocol.Inputs.Steer(&turn, msg("s1a", "prefer trains"), nil))
	f.push("s1", protocol.Inputs.Steer(&turn, msg("s1b", "and no flights"), nil))
	o.waitCalls(1)
	if n := len(o.requests()); n != 1 {
		t.Fatalf("steering started a model call before the step ended (%d calls)", n)
	}
	f.model.Release("g1")
	st = f.waitFor("s1", "the steered turn", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 5 })
	if textOf(st.Messages[1]) != "planning the trip" || textOf(st.Messages[4]) != "steered answer" {
		t.Fatalf("transcript %v", st.Messages)
	}
	reqs := o.requests()
	if len(reqs) != 2 || !strings.Contains(promptText(reqs[1]), "prefer trains") || !strings.Contains(promptText(reqs[1]), "and no flights") {
		t.Fatalf("the steering run was not answered once with both inputs: %d calls", len(reqs))
	}
	// A non-user steer is refused at ingress (R-STEER-13).
	_, err := f.rt.Push(context.Background(), "assistant", "s1", []protocol.Event{protocol.Inputs.Steer(nil, protocol.UIMessage{ID: "sx", Role: protocol.RoleSystem, Parts: []protocol.Part{{Type: protocol.PartText, Text: "obey"}}}, nil)}, true)
	var ve *protocol.ValidationError
	if !errors.As(err, &ve) || !strings.HasSuffix(ve.Field, "payload.message.role") {
		t.Fatalf("non-user steer: %v, want a refusal of its role", err)
	}
	f.push("s1", protocol.Inputs.Steer(nil, msg("s2", "idle steer"), nil))
	st = f.waitFor("s1", "idle steer answered", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 7 })
	if textOf(st.Messages[6]) != "idle steer answer" {
		t.Fatalf("idle steer: %q", textOf(st.Messages[6]))
	}
}

// R-STEER-09: the steer decision commits in one write (the command with its
// decision), and so does the later handoff: the interruption of the old
// turn, the admission of the steering run and its request are one append
// to the store, not only one Decide.
func TestSteeringCommitsAtomically(t *testing.T) {
	// The step calls a tool, so that the turn goes on after it and the
	// steer hands off at its boundary.
	lookup := tools.Tool{Name: "lookup", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{}`), nil }}
	f, _ := newObserved(t, `{"replies":[{"match":"plan","text":"planning the trip","gate":"g1","toolCalls":[{"name":"lookup","input":{}}]},{"text":"steered answer"}]}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{lookup} })
	f.push("s1", protocol.Inputs.Text("m1", "plan a trip"))
	st := f.waitFor("s1", "streaming", func(s *protocol.AIState) bool { return s.Status == protocol.StatusStreaming })
	turn := st.Active.TurnID
	steer := protocol.UIMessage{ID: "st1", Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: "prefer trains"}}}
	f.push("s1", protocol.Inputs.Steer(&turn, steer, nil))
	decision := f.store.batchOf(func(ev protocol.Event) bool { return ev.ID == "st1" })
	decided := false
	for _, ev := range decision {
		decided = decided || (ev.Type == protocol.TypeControlDecided && strings.Contains(string(ev.Payload), `"commandId":"st1"`))
	}
	if !decided {
		t.Fatalf("the steer and its decision are not one append: %v", types(decision))
	}
	f.model.Release("g1")
	f.waitFor("s1", "the steered turn's end", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 4 })
	handoff := f.store.batchOf(func(ev protocol.Event) bool {
		return ev.Type == protocol.TypeMessageInterrupted && strings.Contains(string(ev.Payload), protocol.ReasonSteeredAfterStep)
	})
	var admitted, requested bool
	for _, ev := range handoff {
		admitted = admitted || (ev.Type == protocol.TypeMessageCreated && strings.Contains(string(ev.Payload), `"messageId":"st1"`))
		requested = requested || ev.Type == protocol.TypeGenerationRequested
	}
	if !admitted || !requested {
		t.Fatalf("the handoff, the steering run's admission and its request are not one append: %v", types(handoff))
	}
}

func types(evs []protocol.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

// R-PAUSE-01 R-PAUSE-02 R-PAUSE-06 R-PAUSE-07 R-TURN-12 R-DELIVERY-11
// R-DELIVERY-12: Pause now cancels the model call (cause ErrPaused), holds
// no claim while paused, and Resume starts a fresh request before admitting
// the queue; after-turn pause lets the turn finish.
func TestPauseNowAndResume(t *testing.T) {
	f, o := newObserved(t, `{"replies":[{"match":"essay","text":"first draft","gate":"g1"},{"match":"essay","text":"fresh draft"},{"match":"later","text":"later answer"}]}`, nil)
	f.push("s1", protocol.Inputs.Text("m1", "write an essay"))
	f.waitFor("s1", "streaming", func(s *protocol.AIState) bool { return s.Status == protocol.StatusStreaming })
	f.push("s1", protocol.Inputs.Text("m2", "later question"))
	f.push("s1", withID(protocol.Inputs.Pause(protocol.PauseNow), "pause-1"))
	st := f.waitFor("s1", "paused", func(s *protocol.AIState) bool { return s.Active != nil && s.Active.Phase == protocol.PhasePaused })
	if st.ActiveGeneration != nil || st.ActiveRequestID != "" || o.active.Load() != 0 {
		t.Fatalf("a paused turn holds a model claim: %+v", st.ActiveGeneration)
	}
	if c := o.cancelled(); len(c) != 1 || !errors.Is(c[0], ErrPaused) {
		t.Fatalf("cancel causes %v", c)
	}
	f.push("s1", withID(protocol.Inputs.Resume(), "resume-1"))
	st = f.waitFor("s1", "resumed and done", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 4 })
	if textOf(st.Messages[1]) != "fresh draft" || textOf(st.Messages[3]) != "later answer" {
		t.Fatalf("transcript: %q %q", textOf(st.Messages[1]), textOf(st.Messages[3]))
	}
	reqs := o.requests()
	if len(reqs) != 3 || reqs[0].GenerationID == reqs[1].GenerationID {
		t.Fatalf("resume must make a fresh request: %d calls", len(reqs))
	}
	// ... in a fresh execution version: the resume request raises it.
	evs, err := f.store.Read(context.Background(), "s1", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	resumed := false
	for _, ev := range evs {
		var p protocol.GenerationRequested
		if ev.Type == protocol.TypeGenerationRequested && json.Unmarshal(ev.Payload, &p) == nil && p.Reason == "resume" {
			resumed = true
			if p.Version < 1 {
				t.Fatalf("the resume request keeps execution version %d, want a fresh one", p.Version)
			}
		}
	}
	if !resumed {
		t.Fatal("no resume request in the log")
	}

	// After-turn pause: the turn finishes; the queue waits for Resume.
	f.model.Release("g2")
	f2, _ := newObserved(t, `{"replies":[{"text":"a","gate":"g"},{"text":"b"}]}`, nil)
	f2.push("s2", protocol.Inputs.Text("x1", "one"))
	f2.waitFor("s2", "streaming", func(s *protocol.AIState) bool { return s.Status == protocol.StatusStreaming })
	f2.push("s2", protocol.Inputs.Text("x2", "two"))
	f2.push("s2", withID(protocol.Inputs.Pause(protocol.PauseAfterTurn), "p2"))
	f2.model.Release("g")
	st = f2.waitFor("s2", "turn done, queue held", func(s *protocol.AIState) bool { return s.Active == nil && len(s.Messages) == 2 })
	if len(st.Inbox.Items) != 1 || st.Status != protocol.StatusPaused {
		t.Fatalf("after-turn pause: %+v %s", st.Inbox.Items, st.Status)
	}
	f2.push("s2", withID(protocol.Inputs.Resume(), "r2"))
	f2.waitFor("s2", "queue admitted", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 4 })
}

// R-PAUSE-10 R-STEER-12: a turn paused now keeps its steering until Resume,
// which hands off to it; the paused turn's own work does not resume.
func TestPauseNowThenSteerResumeHandsOff(t *testing.T) {
	f, o := newObserved(t, `{"replies":[{"match":"task","text":"working","gate":"g1"},{"match":"instead","text":"steered"}]}`, nil)
	f.push("s1", protocol.Inputs.Text("m1", "big task"))
	st := f.waitFor("s1", "streaming", func(s *protocol.AIState) bool { return s.Status == protocol.StatusStreaming })
	turn := st.Active.TurnID
	f.push("s1", withID(protocol.Inputs.Pause(protocol.PauseNow), "p1"))
	f.waitFor("s1", "paused", func(s *protocol.AIState) bool { return s.Active != nil && s.Active.Phase == protocol.PhasePaused })
	f.push("s1", protocol.Inputs.Steer(&turn, protocol.UIMessage{ID: "st1", Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: "do this instead"}}}, nil))
	o.waitCalls(1)
	// The steer is durable once its push answers, and whatever the control
	// lane decided with it is in the same write: no request, still paused.
	if st, _, err := f.rt.State(context.Background(), "assistant", "s1"); err != nil || st.AI.ActiveRequestID != "" ||
		st.AI.Active == nil || st.AI.Active.Phase != protocol.PhasePaused {
		t.Fatalf("steering resumed a paused turn: %v %+v", err, st.AI.Active)
	}
	f.push("s1", withID(protocol.Inputs.Resume(), "r1"))
	st = f.waitFor("s1", "handed off", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 4 })
	if textOf(st.Messages[3]) != "steered" {
		t.Fatalf("transcript %q", textOf(st.Messages[3]))
	}
	if n := len(o.requests()); n != 2 {
		t.Fatalf("the paused turn's work resumed: %d calls", n)
	}
}

// R-RETRY-02 R-RETRY-07 R-RETRY-08 R-RETRY-11 R-GEN-16 R-DELIVERY-09: a
// provider error fails the turn once and blocks the queue; a browser's
// retry reruns the step in a new request with a fresh projection.
func TestRetryAfterProviderError(t *testing.T) {
	f, o := newObserved(t, `{"replies":[{"match":"hi","text":"partial","error":"overloaded"},{"match":"hi","text":"recovered"},{"match":"queued","text":"queued answer"}]}`, nil)
	f.push("s1", protocol.Inputs.Text("m1", "hi"))
	st := f.waitFor("s1", "failure", func(s *protocol.AIState) bool { return s.Status == protocol.StatusFailed })
	if st.Error == nil || !strings.Contains(st.Error.Message, "overloaded") {
		t.Fatalf("error %+v", st.Error)
	}
	f.push("s1", protocol.Inputs.Text("m2", "queued"))
	o.waitCalls(1)
	// The queued message's push answers once durable, with the control
	// lane's decisions: the failed turn stays failed, with no new request.
	if st, _, err := f.rt.State(context.Background(), "assistant", "s1"); err != nil || st.AI.ActiveRequestID != "" || st.AI.Status != protocol.StatusFailed {
		t.Fatalf("a failed turn must block admission and not retry by itself: %v, request %q, status %s", err, st.AI.ActiveRequestID, st.AI.Status)
	}
	st = f.waitFor("s1", "queued", func(s *protocol.AIState) bool { return len(s.Inbox.Items) == 1 })
	retry := protocol.Actions{View: st, NewID: func() string { return "retry-1" }}.Retry()
	f.push("s1", retry...)
	st = f.waitFor("s1", "retried and queue done", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 4 })
	if textOf(st.Messages[1]) != "recovered" {
		t.Fatalf("retried response %q", textOf(st.Messages[1]))
	}
}

// R-GEN-12 R-GEN-15 R-GEN-16 R-RETRY-06 R-GEN-19 R-DELIVERY-08: a model
// resolver that throws fails the turn once (the start omits the model);
// retry runs it again with the state at the new snapshot; the generation
// resolver runs once per attempt.
func TestResolverFailureAndRetry(t *testing.T) {
	type plan struct {
		Plan string `json:"plan"`
	}
	c, err := protocol.AgentContract(protocol.ContractOptions{Name: "assistant",
		Events: map[string]protocol.Schema{"plan.changed": nil},
		Reducer: protocol.NewReducer("plan.v1", plan{Plan: "free"}, func(p plan, ev protocol.Event) plan {
			if ev.Type == "plan.changed" {
				_ = json.Unmarshal(ev.Payload, &p)
			}
			return p
		})})
	if err != nil {
		t.Fatal(err)
	}
	var genCalls atomic.Int64
	f, o := newObserved(t, `{"replies":[{"text":"pro answer"}]}`, func(a *AgentOptions) {
		a.Name, a.Contract = "", c
		a.Model = harness.ModelFunc(func(_ context.Context, rc harness.ResolverContext) (harness.ModelSettings, error) {
			if rc.State.(plan).Plan != "pro" {
				return harness.ModelSettings{}, errors.New("plan unknown")
			}
			return harness.ModelSettings{Model: "openai/gpt-5.6-terra"}, nil
		})
		a.Harness.GenerationFunc = func(context.Context, harness.ResolverContext) (harness.GenerationSettings, error) {
			genCalls.Add(1)
			return harness.GenerationSettings{}, nil
		}
	})
	f.push("s1", protocol.Inputs.Text("m1", "hello"))
	st := f.waitFor("s1", "failure", func(s *protocol.AIState) bool { return s.Status == protocol.StatusFailed })
	if st.Error.Message != "plan unknown" || st.ActiveGeneration == nil || st.ActiveGeneration.Model != "" {
		t.Fatalf("error %+v generation %+v", st.Error, st.ActiveGeneration)
	}
	if len(o.requests()) != 0 || genCalls.Load() != 0 {
		t.Fatal("the step ran after its model resolver failed")
	}
	if _, err := f.rt.Push(context.Background(), "assistant", "s1", []protocol.Event{{ID: "plan-1", Type: "plan.changed", Payload: json.RawMessage(`{"plan":"pro"}`)}}, true); err != nil {
		t.Fatal(err)
	}
	f.push("s1", protocol.Actions{View: st, NewID: func() string { return "r1" }}.Retry()...)
	st = f.waitFor("s1", "answered", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	if textOf(st.Messages[1]) != "pro answer" || genCalls.Load() != 1 {
		t.Fatalf("answer %q, generation resolver calls %d", textOf(st.Messages[1]), genCalls.Load())
	}
	if reqs := o.requests(); len(reqs) != 1 || reqs[0].Model != "openai/gpt-5.6-terra" {
		t.Fatalf("requests %+v", reqs)
	}
}

// R-LOG-09 R-LOG-10 R-DELIVERY-03: an identical resubmission replays the
// stored events without new work; a conflicting reuse is rejected before
// append.
func TestReplayAndConflict(t *testing.T) {
	f := newFixture(t, `{"replies":[{"text":"once"}]}`, nil)
	first := f.push("s1", protocol.Inputs.Text("m1", "Hello"))
	f.waitFor("s1", "answered", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	last, _ := f.store.LastIndex(context.Background(), "s1")
	again := f.push("s1", protocol.Inputs.Text("m1", "Hello"))
	if len(again) != 1 || again[0].Index != first[0].Index {
		t.Fatalf("replay %+v vs %+v", again, first)
	}
	if now, _ := f.store.LastIndex(context.Background(), "s1"); now != last {
		t.Fatal("a replay appended events")
	}
	_, err := f.rt.Push(context.Background(), "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m1", "Hello!")}, false)
	if !errors.Is(err, ErrPartialDuplicateBatch) {
		t.Fatalf("conflicting reuse: %v", err)
	}
	_, err = f.rt.Push(context.Background(), "assistant", "s2", []protocol.Event{protocol.Inputs.Text("m1", "Hello")}, false)
	if !errors.Is(err, ErrPartialDuplicateBatch) {
		t.Fatalf("reuse in another session: %v", err)
	}
}

// R-GEN-09 R-CONTRACT-16: the runtime serves pushes, state reads with their
// index, and a live stream of durable events with no gap or duplicate from
// any starting index.
func TestSubscribeFromAnyIndex(t *testing.T) {
	f := newFixture(t, `{"replies":[{"text":"streamed answer with several words"}]}`, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	live, _ := f.rt.Subscribe(ctx, "assistant", "s1", 0)
	f.push("s1", protocol.Inputs.Text("m1", "go"))
	st := f.waitFor("s1", "done", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	_, index, err := f.rt.State(ctx, "assistant", "s1")
	if err != nil || index == 0 {
		t.Fatal(index, err)
	}
	var got []protocol.Event
	for len(got) < int(index) {
		select {
		case ev := <-live:
			got = append(got, ev)
		case <-time.After(5 * time.Second):
			t.Fatalf("live stream stalled at %d of %d", len(got), index)
		}
	}
	for i, ev := range got {
		if ev.Index != uint64(i+1) {
			t.Fatalf("event %d has index %d", i, ev.Index)
		}
	}
	// A late subscriber from the middle sees the rest, exactly once.
	late, _ := f.rt.Subscribe(ctx, "assistant", "s1", index/2)
	for i := index/2 + 1; i <= index; i++ {
		ev := <-late
		if ev.Index != i {
			t.Fatalf("late subscriber got %d, want %d", ev.Index, i)
		}
	}
	msgs, err := protocol.DeriveUIMessages(got)
	if err != nil || len(msgs) != 2 || textOf(msgs[1]) != textOf(st.Messages[1]) {
		t.Fatalf("the streamed events do not fold to the state's transcript: %v", err)
	}
}

func withID(ev protocol.Event, id string) protocol.Event { ev.ID = id; return ev }

// R-PROGRESS-02 R-DELIVERY-01: the live state of a session, folded from
// progress events built from the lanes' recycled chunk batches (chunkBufs),
// is the state a fresh fold of its stored log gives, with many sessions
// streaming at once so that batches pass from one session to another.
func TestLiveStateIsTheFoldOfTheLog(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"`+strings.Repeat("alpha beta gamma delta ", 60)+`","chunkSize":3,"delayMs":1}}`, nil)
	const sessions, turns = 12, 2
	var wg sync.WaitGroup
	for s := 0; s < sessions; s++ {
		wg.Add(1)
		go func(session string) {
			defer wg.Done()
			for i := 0; i < turns; i++ {
				id := fmt.Sprintf("m%s-%d", session, i)
				if _, err := f.rt.Push(context.Background(), "assistant", session, []protocol.Event{protocol.Inputs.Text(id, "go")}, false); err != nil {
					t.Error(err)
					return
				}
			}
		}(fmt.Sprintf("s%d", s))
	}
	wg.Wait()
	for s := 0; s < sessions; s++ {
		session := fmt.Sprintf("s%d", s)
		live := f.waitFor(session, "both answers", func(a *protocol.AIState) bool { return idle(a) && len(a.Messages) == 2*turns })
		log, err := f.store.Read(context.Background(), session, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		folded := f.agent.contract.NewState()
		progress := 0
		for _, ev := range log {
			if ev.Type == protocol.TypeGenerationProgress {
				progress++
			}
			if err := f.agent.contract.Fold(folded, ev); err != nil {
				t.Fatalf("%s: fold %s: %v", session, ev.ID, err)
			}
		}
		if progress < 2*turns {
			t.Fatalf("%s: %d progress events; the test streams nothing", session, progress)
		}
		a, _ := json.Marshal(live)
		b, _ := json.Marshal(folded.AI)
		if !bytes.Equal(a, b) {
			t.Fatalf("%s: the live state\n%s\nis not the fold of the log\n%s", session, a, b)
		}
	}
}
