// The approval flow of local tool calls.

package actors

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// R-APPROVAL-01 R-APPROVAL-09 R-TOOL-02: a tool whose predicate asks for
// approval waits in pendingApprovals; an approval runs it, a denial records
// a denied result the model sees; independent calls run concurrently.
func TestApprovalFlow(t *testing.T) {
	var deploys, lookups atomic.Int64
	var inFlight, maxInFlight atomic.Int64
	gate := make(chan struct{})
	deploy := tools.Tool{Name: "deploy",
		NeedsApproval: func(in json.RawMessage) bool { return true },
		Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			deploys.Add(1)
			return json.RawMessage(`"deployed"`), nil
		}}
	lookup := tools.Tool{Name: "lookup", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		n := inFlight.Add(1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-gate:
		case <-time.After(2 * time.Second):
		}
		inFlight.Add(-1)
		lookups.Add(1)
		return json.RawMessage(`1`), nil
	}}
	f := newFixture(t, `{"replies":[
		{"match":"ship","toolCalls":[{"name":"deploy","input":{}},{"name":"lookup","input":{}},{"name":"lookup","input":{}}],"then":{"text":"shipped"}},
		{"match":"again","toolCalls":[{"name":"deploy","input":{}}],"then":{"text":"not shipped"}}]}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{deploy, lookup} })
	f.push("s1", protocol.Inputs.Text("m1", "ship it"))
	st := f.waitFor("s1", "approval pending", func(s *protocol.AIState) bool { return len(s.PendingApprovals) == 1 })
	deadline := time.Now().Add(5 * time.Second)
	for maxInFlight.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	close(gate)
	if maxInFlight.Load() != 2 {
		t.Fatalf("independent tool calls ran %d at a time", maxInFlight.Load())
	}
	if deploys.Load() != 0 {
		t.Fatal("the tool ran before approval")
	}
	approvalID := onlyApproval(t, st)
	f.push("s1", protocol.Actions{View: st, NewID: func() string { return "x" }}.Approve(approvalID)...)
	f.waitFor("s1", "shipped", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "shipped" })
	if deploys.Load() != 1 || lookups.Load() != 2 {
		t.Fatalf("deploys %d lookups %d", deploys.Load(), lookups.Load())
	}
	f.push("s1", protocol.Inputs.Text("m2", "again"))
	st = f.waitFor("s1", "approval pending", func(s *protocol.AIState) bool { return len(s.PendingApprovals) == 1 })
	approvalID = onlyApproval(t, st)
	f.push("s1", protocol.Actions{View: st, NewID: func() string { return "y" }}.Deny(approvalID, "not today")...)
	f.waitFor("s1", "denied", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "not shipped" })
	if deploys.Load() != 1 {
		t.Fatal("a denied tool ran")
	}
	calls := f.model.Calls()
	last := calls[len(calls)-1]
	found := false
	for _, m := range last.Messages {
		for _, p := range m.Content {
			if p.Type == harness.ContentToolResult && p.Output != nil && p.Output.Type == "error-text" && p.Output.Text() == "not today" {
				found = true
			}
		}
	}
	if !found {
		t.Fatal("the model did not see the denial")
	}
}
