package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/persistence"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// R-LOG-14 R-LOG-16 R-TURN-09: two turns, each a model step that calls a
// tool and a continuation: every ai.message.created is the control lane's
// admission of a user input (model output is only progress, so no response
// starts a turn), and a 600 KB tool output and a 300 KB answer are stored
// and folded whole, not truncated.
func TestModelOutputNeverStartsATurnAndNothingIsTruncated(t *testing.T) {
	big := strings.Repeat("x", 600<<10)
	answer := strings.Repeat("word ", 60<<10) // 300 KB
	bigTool := tools.Tool{Name: "fetch", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"body":"` + big + `"}`), nil
	}}
	f := newFixture(t, `{"default":{"toolCalls":[{"name":"fetch","input":{}}],"then":{"text":"`+answer+`","chunkSize":5000}}}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{bigTool} })
	for i, id := range []string{"m1", "m2"} {
		f.push("s1", protocol.Inputs.Text(id, "fetch it"))
		f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2*(i+1) })
	}
	st, _, err := f.rt.State(context.Background(), "assistant", "s1")
	if err != nil {
		t.Fatal(err)
	}
	log, err := f.store.Read(context.Background(), "s1", 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var created []string
	var bigOutputs int
	for _, ev := range log {
		switch ev.Type {
		case protocol.TypeMessageCreated:
			var p protocol.MessageCreated
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				t.Fatal(err)
			}
			created = append(created, p.MessageID)
		case protocol.TypeToolExecCompleted:
			if bytes.Contains(ev.Payload, []byte(big)) {
				bigOutputs++
			}
		}
	}
	if strings.Join(created, " ") != "m1 m2" {
		t.Fatalf("messages created %v, want only the two user inputs", created)
	}
	if bigOutputs != 2 {
		t.Fatalf("%d stored tool results hold the whole 600 KB output, want 2", bigOutputs)
	}
	for _, i := range []int{1, 3} {
		m := st.AI.Messages[i]
		if m.Role != protocol.RoleAssistant || textOf(m) != answer {
			t.Fatalf("message %d: role %s, %d bytes of text, want the whole %d-byte answer", i, m.Role, len(textOf(m)), len(answer))
		}
		var output []byte
		for _, p := range m.Parts {
			if p.IsToolPart() {
				output = p.Output
			}
		}
		if !bytes.Contains(output, []byte(big)) {
			t.Fatalf("message %d: the tool part's output has %d bytes, want the whole output", i, len(output))
		}
	}
}

// R-INPUT-31 R-DELIVERY-09: a rejected command is a normal result: the push
// succeeds with the command stored, its decision is recorded once as
// rejected with the reason, the session's writer goes on (no failure, no
// retry of the decision), and the next command is decided as usual.
func TestARejectionIsANormalResult(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, nil)
	stop := withID(protocol.Inputs.Stop("no-such-turn", nil), "stop-1")
	out := f.push("s1", stop)
	if len(out) != 1 || out[0].ID != "stop-1" || out[0].Index == 0 {
		t.Fatalf("push of a stale stop returned %+v", out)
	}
	f.push("s1", protocol.Inputs.Text("m1", "hi"))
	f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	log, err := f.store.Read(context.Background(), "s1", 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var decisions []protocol.Decided
	for _, ev := range log {
		if ev.Type == protocol.TypeControlDecided {
			var d protocol.Decided
			if err := json.Unmarshal(ev.Payload, &d); err != nil {
				t.Fatal(err)
			}
			decisions = append(decisions, d)
		}
	}
	if len(decisions) != 2 || decisions[0].CommandID != "stop-1" || decisions[0].Outcome != protocol.OutcomeRejected ||
		decisions[0].Reason != protocol.ReasonStaleTurn || decisions[1].Outcome != protocol.OutcomeApplied {
		t.Fatalf("decisions %+v, want the stop rejected as stale-turn once, then the send applied", decisions)
	}
	if n := f.store.loads.Load(); n != 1 {
		t.Fatalf("the session was activated %d times; a rejection must not restart its writer", n)
	}
}

// An agent's Store option: two agents of one runtime, one with a store of
// its own, run sessions of the same ID side by side; each store holds only
// its agent's log, and reads, subscriptions and history go to the agent's
// store. Without the option an agent uses the runtime's store.
func TestAgentsWithTheirOwnStores(t *testing.T) {
	shared, err := pebblestore.Open("shared", pebblestore.Options{FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	own, err := pebblestore.Open("own", pebblestore.Options{FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shared.Close(); _ = own.Close() }()
	rt, err := New(shared, []*Agent{answering(t, "support", "from support", nil), answering(t, "sales", "from sales", own)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx := context.Background()
	for _, name := range []string{"support", "sales"} {
		if _, err := rt.Push(ctx, name, "s1", []protocol.Event{protocol.Inputs.Text("m-"+name, "hi")}, false); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{"support": "from support", "sales": "from sales"} {
		waitAnswers(t, rt, name, "s1", 2, want)
	}
	for store, wantInput := range map[persistence.Store]string{shared: "m-support", own: "m-sales"} {
		log, err := store.Read(ctx, "s1", 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(log) > 0 && log[0].Type == protocol.TypeSessionCreated {
			log = log[1:] // the runtime creates the session in its first write
		}
		if len(log) == 0 || log[0].ID != wantInput {
			t.Fatalf("the log of s1 in a store starts with %+v, want %s's input", log[:min(1, len(log))], wantInput)
		}
		for _, ev := range log {
			if strings.HasPrefix(ev.ID, "m-") && ev.ID != wantInput {
				t.Fatalf("input %s landed in the other agent's store", ev.ID)
			}
		}
	}
	if s, err := rt.StoreOf("sales"); err != nil || s != own {
		t.Fatalf("StoreOf(sales) = %v, %v", s, err)
	}
	if _, err := rt.StoreOf("nobody"); err == nil {
		t.Fatal("StoreOf an unknown agent succeeded")
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	live, _ := rt.Subscribe(sctx, "sales", "s1", 0)
	first := <-live
	if first.Type == protocol.TypeSessionCreated {
		first = <-live
	}
	if first.ID != "m-sales" {
		t.Fatalf("a subscription to sales/s1 began with %s", first.ID)
	}
	_, errc := rt.Subscribe(sctx, "nobody", "s1", 0)
	if err := <-errc; err == nil {
		t.Fatal("a subscription for an unknown agent did not fail")
	}
}

// answering is an agent whose script model answers every turn with answer,
// in store (nil: the runtime's).
func answering(t *testing.T, name, answer string, store persistence.Store) *Agent {
	t.Helper()
	sc, err := script.Parse([]byte(`{"default":{"text":"` + answer + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	m := script.New(sc)
	a, err := NewAgent(AgentOptions{Name: name, Model: harness.ModelID("script"), Store: store,
		Models: func(string) (harness.Model, error) { return m, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// waitAnswers waits (bounded) until agent's session is idle with messages
// messages, the last answering want.
func waitAnswers(t *testing.T, rt *Runtime, agent, session string, messages int, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _, err := rt.State(context.Background(), agent, session)
		if err != nil {
			t.Fatal(err)
		}
		if idle(st.AI) && len(st.AI.Messages) == messages {
			if got := lastText(st.AI); got != want {
				t.Fatalf("%s/%s answered %q, want %q", agent, session, got, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s: no answer (%d messages)", agent, session, len(st.AI.Messages))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// R-DELIVERY-05: a turn cut short by a restart resumes when a client
// follows the session again: a subscription activates the session's actor,
// which supersedes the lapsed attempt and runs the step again, with no
// other request (a client that reconnects its stream after the node
// restarted sees its answer).
func TestSubscriptionResumesAnInterruptedTurn(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"the answer after the restart","gate":"g1"}}`, nil)
	f.push("s1", protocol.Inputs.Text("m1", "hi"))
	f.waitFor("s1", "the step streaming", func(s *protocol.AIState) bool { return s.Active != nil && s.ActiveGeneration != nil })
	f.close()                  // the node stops with the step held at its gate
	f.opts.SkipRecovery = true // the stream alone must wake the session
	f.open(nil)
	f.model.Release("g1")
	last, err := f.store.LastIndex(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if f.rt.ActiveSessions() != 0 {
		t.Fatal("a session is active before anything asked for it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	live, errc := f.rt.Subscribe(ctx, "assistant", "s1", last)
	for ev := range live {
		if ev.Type == protocol.TypeGenerationCompleted {
			st := f.waitFor("s1", "the resumed turn idle", idle)
			if got := lastText(st); got != "the answer after the restart" {
				t.Fatalf("resumed answer %q", got)
			}
			return
		}
	}
	select {
	case err = <-errc:
	default: // the subscription's context ended
		err = ctx.Err()
	}
	t.Fatalf("the interrupted turn did not resume for a subscriber (%v)", err)
}

// R-DELIVERY-05: when a runtime starts, it resumes the work a stop cut
// short without any request: the start-up scan activates every session,
// the one whose step was held at a gate supersedes it and runs it again
// to completion, and one with nothing to do passivates at once.
func TestStartupRecoveryResumesCutShortWork(t *testing.T) {
	f := newFixture(t, `{"replies":[{"match":"quick","text":"quick answer"}],"default":{"text":"finished after the restart","gate":"g1"}}`, nil)
	f.push("idle", protocol.Inputs.Text("m0", "quick"))
	f.waitFor("idle", "the quick turn done", idle)
	f.push("s1", protocol.Inputs.Text("m1", "hold"))
	f.waitFor("s1", "the step streaming", func(s *protocol.AIState) bool { return s.Active != nil && s.ActiveGeneration != nil })
	last, err := f.store.LastIndex(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	f.close()
	f.model.Release("g1")
	f.open(nil) // nothing asks for either session from here on
	f.recovered()
	if f.rt.active(f.agent, "idle") {
		t.Fatal("the idle session stayed active after the scan")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for after := last; ; {
		if _, err := f.store.Wait(ctx, "s1", after); err != nil {
			t.Fatalf("the cut-short turn did not resume after the restart: %v", err)
		}
		evs, err := f.store.Read(ctx, "s1", after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == protocol.TypeGenerationCompleted {
				st := f.waitFor("s1", "the resumed turn idle", idle)
				if got := lastText(st); got != "finished after the restart" {
					t.Fatalf("resumed answer %q", got)
				}
				return
			}
			after = ev.Index
		}
	}
}

// R-DELIVERY-05: the start-up scan visits sessions a few at a time
// (recoveryParallelism), so that a store of many sessions never has more
// than that many in memory because of it; every one passivates after.
func TestStartupScanVisitsAFewSessionsAtATime(t *testing.T) {
	const sessions = 200
	f := newFixture(t, `{"default":{"text":"ok"}}`, nil)
	passive := false
	for i := range sessions {
		id := fmt.Sprintf("m%d", i)
		m := protocol.UIMessage{ID: id, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: id}}}
		f.push(fmt.Sprintf("s%03d", i), protocol.Inputs.Message(m, protocol.MessageOptions{Generate: &passive}))
	}
	f.close()
	f.open(nil)
	peak := 0
	for done := false; !done; {
		select {
		case <-f.rt.Recovered():
			done = true
		case <-time.After(10 * time.Second):
			t.Fatal("the start-up scan did not end in 10 s")
		default:
			peak = max(peak, f.rt.ActiveSessions())
		}
	}
	if limit := recoveryParallelism(); peak > limit {
		t.Fatalf("%d sessions active at once during the scan, more than its %d at a time", peak, limit)
	}
	if n := f.rt.ActiveSessions(); n != 0 {
		t.Fatalf("%d sessions left active after the scan", n)
	}
	t.Logf("at most %d of %d sessions active at once during the scan", peak, sessions)
}

// Following a session nobody has written loads no actor (there is nothing
// to resume, and a stream of any ID must not cost a session's memory),
// and still delivers the session's first events once it is written.
func TestSubscribingToAnUnwrittenSessionLoadsNoActor(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"first answer"}}`, nil)
	f.recovered()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	live, _ := f.rt.Subscribe(ctx, "assistant", "fresh", 0)
	if n := f.rt.ActiveSessions(); n != 0 {
		t.Fatalf("%d sessions active after following an unwritten one", n)
	}
	f.push("fresh", protocol.Inputs.Text("m1", "hi"))
	select {
	case ev, ok := <-live:
		if ok && ev.Type == protocol.TypeSessionCreated {
			ev, ok = <-live // the runtime creates the session in its first write
		}
		if !ok || ev.ID != "m1" {
			t.Fatalf("the subscription began with %+v (open %v), want m1", ev, ok)
		}
	case <-ctx.Done():
		t.Fatal("the subscription delivered nothing")
	}
}

// R-DELIVERY-05 on a store that two agents share: the start-up scan gives
// each written session to the agent that owns it, and resumes a turn of
// the second agent's (the scan did not: with mutant recover.go:195 a
// claimed session went to a store's only agent, and on a store of two to
// nobody).
func TestStartupRecoveryOnAStoreOfTwoAgents(t *testing.T) {
	st := openMem(t, vfs.NewMem())
	sc, err := script.Parse([]byte(`{"default":{"text":"finished after the restart","gate":"g1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	m := script.New(sc)
	agents := func() []*Agent {
		var out []*Agent
		for _, name := range []string{"support", "sales"} {
			a, err := NewAgent(AgentOptions{Name: name, Model: harness.ModelID("script"), Models: func(string) (harness.Model, error) { return m, nil }})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, a)
		}
		return out
	}
	rt, err := New(st, agents(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := rt.Push(ctx, "sales", "s1", []protocol.Event{protocol.Inputs.Text("m1", "hold")}, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, _, err := rt.State(ctx, "sales", "s1")
		if err != nil {
			t.Fatal(err)
		}
		if s.AI.ActiveGeneration != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the step did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	last, err := st.LastIndex(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	rt.Close()
	m.Release("g1")
	rt, err = New(st, agents(), Options{}) // nothing asks for the session from here on
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for after := last; ; {
		if _, err := st.Wait(wctx, "s1", after); err != nil {
			t.Fatalf("the second agent's cut-short turn did not resume after the restart: %v", err)
		}
		evs, err := st.Read(wctx, "s1", after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == protocol.TypeGenerationCompleted {
				waitAnswers(t, rt, "sales", "s1", 2, "finished after the restart")
				return
			}
			after = ev.Index
		}
	}
}
