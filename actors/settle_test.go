package actors

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// R-PAUSE-03: after Pause now, a call listed in settling reports that it
// stopped. A call claimed again (its earlier claim lapsed) whose run had
// not started when Pause now came has nothing running to cancel: its
// settle is recorded at once (an interrupted end), instead of waiting for
// the end of a run that never comes, which left the turn pausing for ever
// (the simulated schedules' seed 305, under load).
func TestASettleOfAClaimThatNeverStartedIsRecorded(t *testing.T) {
	sc, err := script.Parse([]byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	calc := tools.Tool{Name: "calc", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil }}
	a, _ := scriptAgent(t, sc, calc)
	s := &sessionActor{agent: a, id: "s1", toolRuns: map[string]*toolRun{
		"c1": {call: "c1", tool: "calc", gen: "g1", version: 0, attempt: 2}, // claimed, not started
	}}
	s.reconcileTools([]protocol.Work{{Kind: protocol.WorkSettle, ToolCallID: "c1", ToolName: "calc", GenerationID: "g1", Version: 0, Attempt: 2}})
	if len(s.workQueue) != 1 || s.workQueue[0].Type != protocol.TypeToolExecCompleted {
		t.Fatalf("queued %+v: want the call's interrupted end", s.workQueue)
	}
	var done protocol.ToolExecutionCompleted
	if err := json.Unmarshal(s.workQueue[0].Payload, &done); err != nil || done.ToolCallID != "c1" || done.ErrorText != protocol.InterruptedToolError {
		t.Fatalf("the end %s (%v): want c1 interrupted", s.workQueue[0].Payload, err)
	}
	if _, ok := s.toolRuns["c1"]; ok {
		t.Fatal("the run that never started is still kept")
	}
}

// A closed runtime's store is not kept alive by the claims cache (a global
// keyed by store): the runtime forgets its store's claims when it closes.
func TestClosingARuntimeForgetsItsStoresClaims(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"hi"}}`, nil)
	f.push("s1", protocol.Inputs.Text("m1", "hello"))
	f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	cached := func() int {
		owners.mu.Lock()
		defer owners.mu.Unlock()
		n := 0
		for k := range owners.m {
			if k.store == persistence.Store(f.store) {
				n++
			}
		}
		return n
	}
	if _, err := checkOwner(context.Background(), f.store, "assistant", "s1"); err != nil {
		t.Fatal(err)
	}
	if cached() == 0 {
		t.Fatal("the session's claim is not cached: the test checks nothing")
	}
	f.close()
	if n := cached(); n != 0 {
		t.Fatalf("%d claims of the closed runtime's store are still cached", n)
	}
}
