package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"

	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// The simulated schedules' tools (simulate_test.go).

// simTools are the schedule's three tools, "probe" (toolRecovery report: a
// call's version must never run twice, R-TOOL-13), "calc" (rerun) and
// "guard" (rerun, needing approval: simapproval_test.go): each run waits
// until the schedule ends it.
type simTools struct {
	mu      sync.Mutex
	runs    map[string]int             // starts per tool call
	running map[string]chan simToolEnd // runs (call, version, attempt) waiting for their end
	order   []string                   // of running's keys
	starts  []string
}

type simToolEnd struct {
	out json.RawMessage
	err error
}

func newSimTools() *simTools {
	return &simTools{runs: map[string]int{}, running: map[string]chan simToolEnd{}}
}

func (st *simTools) tool(name, recovery string) tools.Tool {
	return tools.Tool{Name: name, Recovery: recovery, Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		hc, err := tools.FromContext(ctx)
		if err != nil {
			return nil, err
		}
		call := hc.Call.ToolCallID
		// A run per attempt: an attempt cut short (superseded, its session
		// stopped) may still be returning while the next one runs.
		run := fmt.Sprintf("%s v%d a%d", call, hc.Call.Version, hc.Attempt)
		end := make(chan simToolEnd, 1)
		st.mu.Lock()
		st.starts = append(st.starts, fmt.Sprintf("%s attempt %d version %d", call, hc.Attempt, hc.Call.Version))
		// Per version: Pause now ends a run (its result is recorded), and
		// Resume asks the call again as a new version (R-INPUT-15).
		st.runs[fmt.Sprintf("%s %s v%d", name, call, hc.Call.Version)]++
		st.running[run] = end
		st.order = append(st.order, run)
		st.mu.Unlock()
		defer func() {
			st.mu.Lock()
			if st.running[run] == end {
				delete(st.running, run)
			}
			st.mu.Unlock()
		}()
		if stubborn(run) {
			// It ignores its context: cut short, it still returns only
			// when the schedule ends it, with a late result.
			e := <-end
			return e.out, e.err
		}
		select {
		case e := <-end:
			return e.out, e.err
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}}
}

// stubborn picks the runs (a third of them, by their key) that ignore
// their context.
func stubborn(run string) bool {
	h := fnv.New32a()
	h.Write([]byte(run))
	return h.Sum32()%3 == 0
}

// oneOutcomePerCall checks a log's tool outcomes: at most one per call
// and version, whatever the attempts, late results and restarts before.
func oneOutcomePerCall(evs []protocol.Event) error {
	seen := map[string]uint64{}
	for _, ev := range evs {
		if ev.Type != protocol.TypeToolExecCompleted {
			continue
		}
		var c protocol.ToolExecutionCompleted
		if err := json.Unmarshal(ev.Payload, &c); err != nil {
			return err
		}
		k := fmt.Sprintf("%s v%d", c.ToolCallID, c.Version)
		if at, ok := seen[k]; ok {
			return fmt.Errorf("the tool call %s has two outcomes, at %d and %d", k, at, ev.Index)
		}
		seen[k] = ev.Index
	}
	return nil
}

// end ends the oldest running call (false: none runs).
func (st *simTools) end(e simToolEnd) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	for len(st.order) > 0 {
		call := st.order[0]
		st.order = st.order[1:]
		if ch, ok := st.running[call]; ok {
			delete(st.running, call)
			ch <- e
			return true
		}
	}
	return false
}

// ranCalls lists the calls of tool name that started a run.
func (st *simTools) ranCalls(name string) []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	var calls []string
	for k := range st.runs {
		if rest, ok := strings.CutPrefix(k, name+" "); ok {
			call, _, _ := strings.Cut(rest, " ")
			calls = append(calls, call)
		}
	}
	return calls
}

// twice names a report tool's call that ran more than once.
func (st *simTools) twice() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	for k, n := range st.runs {
		if strings.HasPrefix(k, "probe ") && n > 1 {
			return fmt.Sprintf("%s ran %d times (%v)", k, n, st.starts)
		}
	}
	return ""
}
