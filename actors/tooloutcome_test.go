// Tool outcomes: causes and the join, a tool whose step fails, Pause now
// with report and rerun tools, preliminary outputs and attempts.

package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/internal/testutil"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// R-TOOL-04 R-TOOL-03 R-TOOL-05: a tool outcome is one event that carries
// its durable cause (the call's work event), and the continuation commits
// in the same batch as what allowed it: the last result, or the step's end
// when the tool, started as its input was complete, finished first.
func TestToolOutcomeCauseAndJoin(t *testing.T) {
	echo := tools.Tool{Name: "echo", Execute: func(_ context.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil }}
	f := newFixture(t, `{"replies":[{"toolCalls":[{"id":"c1","name":"echo","input":{"a":1}}],"then":{"text":"done"}}]}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{echo} })
	f.push("s1", protocol.Inputs.Text("m1", "go"))
	f.waitFor("s1", "done", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "done" })
	evs, _ := f.store.Read(context.Background(), "s1", 0, 1000)
	var work, outcome, stepEnd, next *protocol.Event
	for i := range evs {
		ev := &evs[i]
		switch ev.Type {
		case protocol.TypeToolExecRequested:
			work = ev
		case protocol.TypeToolExecCompleted:
			outcome = ev
		case protocol.TypeGenerationCompleted:
			if stepEnd == nil {
				stepEnd = ev
			}
		case protocol.TypeGenerationRequested:
			if outcome != nil && stepEnd != nil && next == nil {
				next = ev
			}
		}
	}
	if work == nil || outcome == nil || stepEnd == nil || next == nil {
		t.Fatal("missing events")
	}
	if outcome.Cause != work.ID {
		t.Fatalf("the outcome's cause is %q, want the work event %q", outcome.Cause, work.ID)
	}
	last := outcome
	if stepEnd.Index > last.Index {
		last = stepEnd
	}
	batch := f.store.batchOf(func(ev protocol.Event) bool { return ev.ID == next.ID })
	if !slices.ContainsFunc(batch, func(ev protocol.Event) bool { return ev.ID == last.ID }) {
		t.Fatalf("the continuation (index %d) did not commit with the later of the result (index %d) and the step's end (index %d)",
			next.Index, outcome.Index, stepEnd.Index)
	}
}

// R-TOOL-06 R-STOP-12: a tool called in a step that then fails still runs
// (its effect cannot be undone), its result is recorded, and the failure
// blocks the continuation.
func TestToolRunsWhenItsStepFails(t *testing.T) {
	var runs atomic.Int64
	echo := tools.Tool{Name: "echo", Execute: func(_ context.Context, in json.RawMessage) (json.RawMessage, error) {
		runs.Add(1)
		return in, nil
	}}
	f := newFixture(t, `{"replies":[{"toolCalls":[{"id":"c1","name":"echo","input":{}}],"error":"overloaded"}]}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{echo} })
	f.push("s1", protocol.Inputs.Text("m1", "go"))
	st := f.waitFor("s1", "failed with the result", func(s *protocol.AIState) bool {
		return s.Status == protocol.StatusFailed && s.Tools["c1"].Status == protocol.ToolStatusCompleted
	})
	// The state holds both outcomes: a continuation or a rerun would be a
	// request in the same write, and there is none.
	if runs.Load() != 1 || len(f.model.Calls()) != 1 || st.ActiveRequestID != "" {
		t.Fatalf("runs %d, model calls %d, request %q", runs.Load(), len(f.model.Calls()), st.ActiveRequestID)
	}
}

// R-TOOL-14 R-PAUSE-09 R-PAUSE-08: Pause now cuts a running "report" tool
// short: the interrupted result is recorded and Resume does not run it
// again, while a "rerun" tool cut short runs again after Resume.
func TestPauseNowWithReportAndRerunTools(t *testing.T) {
	var shellRuns, fetchRuns atomic.Int64
	// Each tool's first run reports why it was cancelled: Pause now's
	// ErrPaused (mutant toolrun.go:114 settled the tools without
	// cancelling their runs, which were cancelled later, as unwanted,
	// with ErrStopped).
	causes := map[string]chan error{"shell": make(chan error, 1), "fetchDocs": make(chan error, 1)}
	block := func(name string, counter *atomic.Int64) func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
			n := counter.Add(1)
			if n > 1 {
				return json.RawMessage(`"second run"`), nil
			}
			<-ctx.Done()
			causes[name] <- context.Cause(ctx)
			return nil, ctx.Err()
		}
	}
	f := newFixture(t, `{"replies":[{"toolCalls":[{"id":"sh","name":"shell","input":{}},{"id":"fe","name":"fetchDocs","input":{}}],"then":{"text":"after resume"}}]}`,
		func(a *AgentOptions) {
			a.Tools = []tools.Tool{{Name: "shell", Execute: block("shell", &shellRuns), Recovery: "report"}, {Name: "fetchDocs", Execute: block("fetchDocs", &fetchRuns)}}
		})
	var logs testutil.SyncBuffer
	f.rt.opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	f.push("s1", protocol.Inputs.Text("m1", "go"))
	f.waitFor("s1", "both running", func(s *protocol.AIState) bool {
		return s.Tools["sh"].Status == protocol.ToolStatusRunning && s.Tools["fe"].Status == protocol.ToolStatusRunning
	})
	for deadline := time.Now().Add(5 * time.Second); (shellRuns.Load() == 0 || fetchRuns.Load() == 0) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	f.push("s1", withID(protocol.Inputs.Pause(protocol.PauseNow), "p1"))
	st := f.waitFor("s1", "paused", func(s *protocol.AIState) bool { return s.Active != nil && s.Active.Phase == protocol.PhasePaused })
	if st.Tools["sh"].Status != protocol.ToolStatusInterrupted {
		t.Fatalf("the report tool was not reported: %+v", st.Tools["sh"])
	}
	for name, c := range causes {
		select {
		case cause := <-c:
			if !errors.Is(cause, ErrPaused) {
				t.Fatalf("%s's run was cancelled with %v, want ErrPaused", name, cause)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s's run was not cancelled within 10 s of the pause", name)
		}
	}
	f.push("s1", withID(protocol.Inputs.Resume(), "r1"))
	f.waitFor("s1", "answered", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "after resume" })
	if shellRuns.Load() != 1 || fetchRuns.Load() != 2 {
		t.Fatalf("shell ran %d times (want 1), fetchDocs %d (want 2)", shellRuns.Load(), fetchRuns.Load())
	}
}

// R-TOOL-07 R-PROGRESS-07 R-TOOL-25 R-PAUSE-08: a running tool's
// preliminary outputs are appended at once and shown on its part; a rerun
// attempt (after Pause now and Resume) gets a fresh handler context and
// streams different preliminary output under the same toolCallId.
func TestPreliminaryOutputsAndRerunAttempts(t *testing.T) {
	var attempts []int
	var mu sync.Mutex
	slow := tools.Tool{Name: "build", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		hc, err := tools.FromContext(ctx)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		attempts = append(attempts, hc.Attempt)
		mu.Unlock()
		hc.Preliminary(json.RawMessage(fmt.Sprintf(`{"attempt":%d,"progress":0.5}`, hc.Attempt)))
		if hc.Attempt == 2 {
			hc.Preliminary(json.RawMessage(`{"attempt":2,"progress":0.9}`))
		}
		if hc.Attempt == 1 {
			<-ctx.Done() // cut short by Pause now
			return nil, ctx.Err()
		}
		return json.RawMessage(`{"built":true}`), nil
	}}
	f := newFixture(t, `{"replies":[{"toolCalls":[{"id":"b1","name":"build","input":{}}],"then":{"text":"built"}}]}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{slow} })
	f.push("s1", protocol.Inputs.Text("m1", "build it"))
	st := f.waitFor("s1", "preliminary output shown", func(s *protocol.AIState) bool {
		for _, m := range s.Messages {
			for _, p := range m.Parts {
				if p.ToolCallID == "b1" && p.Preliminary != nil && *p.Preliminary {
					return true
				}
			}
		}
		return false
	})
	_ = st
	f.push("s1", withID(protocol.Inputs.Pause(protocol.PauseNow), "p1"))
	f.waitFor("s1", "paused", func(s *protocol.AIState) bool { return s.Active != nil && s.Active.Phase == protocol.PhasePaused })
	f.push("s1", withID(protocol.Inputs.Resume(), "r1"))
	st = f.waitFor("s1", "built", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "built" })
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 2 || attempts[0] != 1 || attempts[1] != 2 {
		t.Fatalf("attempts %v, want a fresh context per attempt: [1 2]", attempts)
	}
	evs, _ := f.store.Read(context.Background(), "s1", 0, 1000)
	var prelims, seqs []string
	for _, ev := range evs {
		if ev.Type == protocol.TypeToolOutputPreliminary {
			var p protocol.ToolOutputPreliminary
			_ = json.Unmarshal(ev.Payload, &p)
			if p.ToolCallID != "b1" {
				t.Fatalf("preliminary for %q", p.ToolCallID)
			}
			prelims = append(prelims, string(p.Output))
			seqs = append(seqs, fmt.Sprintf("%d.%d", p.Attempt, p.Seq))
		}
	}
	if len(prelims) != 3 || prelims[0] == prelims[1] {
		t.Fatalf("preliminary outputs %v: each attempt streams its own under the same call", prelims)
	}
	// Seq orders the outputs of one attempt, from 1 (R-PROGRESS-07).
	if strings.Join(seqs, " ") != "1.1 2.1 2.2" {
		t.Fatalf("preliminary attempt.seq %v, want 1.1 2.1 2.2", seqs)
	}
	for _, p := range st.Messages[1].Parts {
		if p.ToolCallID == "b1" && (p.State != protocol.ToolOutputAvailable || string(p.Output) != `{"built":true}` || (p.Preliminary != nil && *p.Preliminary)) {
			t.Fatalf("final part %+v", p)
		}
	}
}

// failFirstClaim fails the first append that carries a tool claim, writing
// nothing: an attempt that fails before Execute.
type failFirstClaim struct {
	*countingStore
	failed atomic.Bool
}

// Append injects into each append, the claim's and the batch's one after
// the other.
func (f *failFirstClaim) Append(ctx context.Context, session string, expected uint64, events []protocol.Event, opts ...persistence.AppendOption) ([]protocol.Event, error) {
	return persistence.AppendInTurn(ctx, func(ctx context.Context, session string, expected uint64, events []protocol.Event, o persistence.AppendOptions) ([]protocol.Event, error) {
		for _, ev := range events {
			if ev.Type == protocol.TypeToolExecClaimed && f.failed.CompareAndSwap(false, true) {
				return nil, fmt.Errorf("injected: the claim write failed")
			}
		}
		return f.countingStore.Append(ctx, session, expected, events, o.Options()...)
	}, session, expected, events, persistence.OptionsOf(opts))
}

// R-TOOL-15: under "report", an attempt that failed before Execute (its
// claim write failed) is retried and runs the tool: the call gets the
// tool's real result, not the interrupted error, and the tool ran once.
// The claim rides with the write of the step that requested the call, so
// the failed write takes the step's end with it, and the step runs again
// (the script's default answers it again).
func TestReportToolRetriesAFailureBeforeExecute(t *testing.T) {
	var runs atomic.Int64
	charge := tools.Tool{Name: "charge", Recovery: "report", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		runs.Add(1)
		return json.RawMessage(`"charged"`), nil
	}}
	f := newFixture(t, `{"default":{"toolCalls":[{"name":"charge","input":{}}],"then":{"text":"paid"}}}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{charge} })
	fs := &failFirstClaim{countingStore: f.store}
	f.recovered() // the start-up scan reads the store field
	f.rt.store = fs
	f.push("s1", protocol.Inputs.Text("m1", "pay the bill"))
	st := f.waitFor("s1", "the paid turn", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "paid" })
	if !fs.failed.Load() {
		t.Fatal("no claim write failed: the test did not exercise the failure")
	}
	if runs.Load() != 1 {
		t.Fatalf("the report tool ran %d times, want 1", runs.Load())
	}
	part := lastToolPart(st)
	output, errText := string(part.Output), part.ErrorText
	if output != `"charged"` || errText != "" {
		t.Fatalf("the call's result is %q / %q, want the tool's own result", output, errText)
	}
}
