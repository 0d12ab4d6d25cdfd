package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
	"github.com/a2-runtime/a2/tools/sandbox"
)

// toolRun is one attempt of one tool execution. Its claim is appended
// before Execute runs (R-DELIVERY-01): the run starts executing only once
// the claim is durable.
type toolRun struct {
	call      string
	tool      string
	gen       string
	version   int
	attempt   int
	input     json.RawMessage
	event     protocol.Event
	executing bool
	seq       int // preliminary outputs sent
	pid       *actor.PID
	// span is the attempt's execute_tool span (nil without a trace), began
	// when it started executing.
	span  trace.Span
	began time.Time
}

// toolPreliminary is a preliminary output a running attempt streams.
type toolPreliminary struct {
	call    string
	version int
	attempt int
	output  json.RawMessage
}

type toolEnd struct {
	call    string
	version int
	attempt int
	output  json.RawMessage
	err     error
	// started is set once Execute was entered; cancelled when its context
	// ended first.
	started   bool
	cancelled bool
}

func (s *sessionActor) isReport(tool string) bool { return s.agent.toolbox().work.ReportTools[tool] }

// reconcileTools matches the running tool executions to the tool work
// Pending names: it claims and starts calls, reruns lapsed claims of
// "rerun" tools, reports lapsed claims of "report" tools (R-TOOL-13),
// records the end of executions cancelled by Pause now, and cancels runs
// nobody wants any more.
func (s *sessionActor) reconcileTools(work []protocol.Work) {
	if s.toolRuns == nil {
		s.toolRuns = map[string]*toolRun{}
	}
	wanted := map[string]bool{}
	for _, w := range work {
		switch w.Kind {
		case protocol.WorkTool, protocol.WorkReportInterrupted:
			wanted[w.ToolCallID] = true
			r := s.toolRuns[w.ToolCallID]
			if r != nil && r.version == w.Version {
				if !r.executing && w.Attempt == r.attempt && s.claimed(w.ToolCallID, r) {
					s.execute(r) // the claim is durable
				}
				continue
			}
			if r != nil {
				s.cancelRun(r, ErrSuperseded)
			}
			if w.Kind == protocol.WorkReportInterrupted {
				// The claim lapsed without a live owner: never run it twice.
				s.queueWork(s.toolDone(w.ToolCallID, w.GenerationID, w.Version, w.Attempt, nil, protocol.InterruptedToolError, true))
				continue
			}
			s.claim(w)
		case protocol.WorkSettle:
			if w.ToolCallID == "" {
				continue
			}
			wanted[w.ToolCallID] = true
			if r := s.toolRuns[w.ToolCallID]; r != nil && r.executing {
				s.cancelRun(r, ErrPaused) // its end records the settle
				continue
			}
			// Nothing runs the call (a run that was claimed but never
			// started has nothing to cancel, and its end would never
			// come): the settle is recorded here.
			delete(s.toolRuns, w.ToolCallID)
			s.queueWork(s.toolDone(w.ToolCallID, w.GenerationID, w.Version, w.Attempt, nil, protocol.InterruptedToolError, s.isReport(w.ToolName)))
		}
	}
	for id, r := range s.toolRuns {
		if !wanted[id] {
			if !r.executing {
				delete(s.toolRuns, id)
				continue
			}
			s.cancelRun(r, ErrStopped)
		}
	}
}

// claimed reports whether the run's claim is durable: the call is running
// under the run's version and attempt.
func (s *sessionActor) claimed(call string, r *toolRun) bool {
	t, ok := s.state.AI.Tools[call]
	return ok && t.Status == protocol.ToolStatusRunning && t.ClaimedVersion == r.version && t.Attempt == r.attempt
}

func (s *sessionActor) cancelRun(r *toolRun, cause error) {
	if r.pid != nil {
		s.ctx.Send(r.pid, &cancelLane{cause: cause})
	}
}

// claim appends the claim of the next attempt of a call.
func (s *sessionActor) claim(w protocol.Work) { s.queueWork(s.claimEvent(w)) }

// claimEvent makes the run of the next attempt of a call and returns its
// claim, for the next write.
func (s *sessionActor) claimEvent(w protocol.Work) protocol.Event {
	attempt := w.Attempt + 1
	r := &toolRun{call: w.ToolCallID, tool: w.ToolName, gen: w.GenerationID, version: w.Version, attempt: attempt, input: w.Input}
	r.event = protocol.Event{ID: protocol.DeriveID("tool", s.id, w.GenerationID, w.ToolCallID, strconv.Itoa(w.Version)), Type: protocol.TypeToolExecRequested, Session: s.id,
		Payload: mustJSON(protocol.ToolExecutionRequested{ToolCallID: w.ToolCallID, ToolName: w.ToolName, Input: w.Input,
			GenerationID: w.GenerationID, TurnID: w.TurnID, Version: w.Version})}
	s.toolRuns[w.ToolCallID] = r
	if l := s.lanes[w.GenerationID]; l != nil && l.span != nil {
		s.trace.writeSpans = append(s.trace.writeSpans, l.span) // the claim's write, while its step streams
	}
	return protocol.Event{ID: protocol.DeriveID("claim", s.id, w.GenerationID, w.ToolCallID, strconv.Itoa(w.Version), strconv.Itoa(attempt)), Cause: r.event.ID,
		Type: protocol.TypeToolExecClaimed, Payload: mustJSON(protocol.ToolExecutionClaimed{ToolCallID: w.ToolCallID,
			GenerationID: w.GenerationID, Version: w.Version, Attempt: attempt})}
}

// claimsOfBatch returns the claims of the calls that a batch's requests
// made runnable (ai.tool.execution.requested in it, folded), to write in
// the same batch: a claim is durable before its call runs either way
// (the run starts once the write is), and riding with the request saves
// the write of its own it took after it. Only first attempts: a rerun's
// claim, after a claim that lapsed, waits for reconcile.
func (s *sessionActor) claimsOfBatch(batch []protocol.Event) []protocol.Event {
	requested := false
	for i := range batch {
		if batch[i].Type == protocol.TypeToolExecRequested {
			requested = true
			break
		}
	}
	if !requested {
		return nil
	}
	if s.toolRuns == nil {
		s.toolRuns = map[string]*toolRun{}
	}
	var claims []protocol.Event
	// workBuf is reconcile's too: both run from the actor's message
	// handling, never one inside the other.
	s.workBuf = protocol.AppendPending(s.workBuf[:0], s.agent.toolbox().work, s.state.AI)
	for _, w := range s.workBuf {
		if w.Kind == protocol.WorkTool && w.Attempt == 0 && s.toolRuns[w.ToolCallID] == nil {
			claims = append(claims, s.claimEvent(w))
		}
	}
	return claims
}

func (s *sessionActor) toolDone(call, gen string, version, attempt int, output json.RawMessage, errText string, interrupted bool) protocol.Event {
	p := protocol.ToolExecutionCompleted{ToolCallID: call, GenerationID: gen, Version: version, Output: output, ErrorText: errText, Interrupted: interrupted}
	if errText == "" && len(output) == 0 {
		p.Output = json.RawMessage("null")
	}
	// The outcome carries its durable cause: the call's work event
	// (R-TOOL-04).
	return protocol.Event{ID: protocol.DeriveID("tool-done", s.id, gen, call, strconv.Itoa(version), strconv.Itoa(attempt)),
		Type: protocol.TypeToolExecCompleted, Payload: mustJSON(p), Cause: protocol.DeriveID("tool", s.id, gen, call, strconv.Itoa(version))}
}

// execute starts a claimed attempt's child actor.
func (s *sessionActor) execute(r *toolRun) {
	t, ok := s.agent.toolbox().set.Get(r.tool)
	r.executing = true
	r.span, r.began = s.toolSpan(r), time.Now()
	if !ok {
		msg := "no tool named " + strconv.Quote(r.tool) + " is defined"
		s.queueWork(s.toolDone(r.call, r.gen, r.version, r.attempt, nil, msg, false))
		s.endToolAfterWrite(r, "unknown_tool", nil, errors.New(msg))
		delete(s.toolRuns, r.call)
		return
	}
	hc := &tools.Context{Event: r.event, Attempt: r.attempt, Session: s.id, Contract: s.agent.contract,
		Append: func(ctx context.Context, evs ...protocol.Event) ([]protocol.Event, error) {
			return s.rt.Push(ctx, s.agent.Name(), s.id, evs, true)
		}}
	_ = json.Unmarshal(r.event.Payload, &hc.Call)
	var requestID string
	if g := s.state.AI.ActiveGeneration; g != nil && g.GenerationID == r.gen {
		requestID = g.RequestID
	} else if a := s.state.AI.Active; a != nil {
		if o, ok := s.state.AI.ResponseOwners[a.ResponseMessageID]; ok && o.GenerationID == r.gen {
			requestID = o.RequestID
		}
	}
	name, session, call, version := s.agent.Name(), s.id, r.call, r.version
	store, contract, boundary, logger := s.store, s.agent.contract, r.event.ID, s.rt.opts.Logger
	hc.State = func(ctx context.Context) (*protocol.SessionState, uint64, error) {
		return stateThrough(ctx, store, contract, session, boundary)
	}
	hc.RequestInput = func(ctx context.Context, inputID string, request json.RawMessage) (json.RawMessage, error) {
		return s.rt.requestInput(ctx, name, session, protocol.InputRequest{InputID: inputID, Request: request,
			RequestID: requestID, GenerationID: r.gen}, call, version)
	}
	span, resolve := r.span, s.agent.opts.Harness.Sandbox
	run := func(ctx context.Context, send func(any)) {
		if span != nil {
			ctx = trace.ContextWithSpan(ctx, span)
		}
		hc.Preliminary = func(out json.RawMessage) {
			send(&toolPreliminary{call: r.call, version: r.version, attempt: r.attempt, output: append(json.RawMessage(nil), out...)})
		}
		send(enterTool(ctx, &toolEnd{call: r.call, version: r.version, attempt: r.attempt}, func(ctx context.Context) (json.RawMessage, error) {
			if resolve != nil {
				sb, err := sandbox.Resolve(ctx, resolve, session)
				if err != nil {
					return nil, err
				}
				hc.Sandbox = sb
			}
			return t.Execute(tools.WithContext(ctx, hc), r.input)
		}, func(p any, stack []byte) {
			logger.Error("a tool panicked", "session", session, "tool", r.tool, "toolCallId", call, "attempt", r.attempt, "panic", fmt.Sprint(p), "stack", string(stack))
		}))
	}
	r.pid = s.spawnRun(run)
}

// enterTool runs an attempt's Execute and fills in its end, unless the
// attempt's context ended before its goroutine got this far: a session that
// stopped (a crash, a Close, a move to another member) or an attempt that
// was superseded or paused meanwhile must not start a side effect late,
// beside or after the attempt that replaced it. Such an attempt ends
// cancelled without having started (its end is recorded as any cancelled
// attempt's: interrupted for a "report" tool).
//
// A panic in Execute is the attempt's error ("the tool panicked: ..."), as
// a thrown exception is in the AI SDK: the model sees an error result and
// the node goes on; logPanic gets the value and the stack.
func enterTool(ctx context.Context, end *toolEnd, execute func(context.Context) (json.RawMessage, error), logPanic func(value any, stack []byte)) *toolEnd {
	if ctx.Err() != nil {
		end.err, end.cancelled = context.Cause(ctx), true
		return end
	}
	end.started = true
	func() {
		defer func() {
			if p := recover(); p != nil {
				logPanic(p, debug.Stack())
				end.output, end.err = nil, fmt.Errorf("the tool panicked: %v", p)
			}
		}()
		end.output, end.err = execute(ctx)
	}()
	end.cancelled = ctx.Err() != nil
	return end
}

// onToolPreliminary appends a running attempt's preliminary output at once
// (R-PROGRESS-07); outputs of an attempt that is no longer current are
// dropped (the fold would fence them anyway).
func (s *sessionActor) onToolPreliminary(m *toolPreliminary) {
	r := s.toolRuns[m.call]
	if r == nil || r.attempt != m.attempt || r.version != m.version {
		return
	}
	r.seq++
	s.queueWork(protocol.Event{ID: protocol.DeriveID("preliminary", s.id, r.gen, m.call, strconv.Itoa(m.version), strconv.Itoa(m.attempt), strconv.Itoa(r.seq)),
		Type: protocol.TypeToolOutputPreliminary, Cause: r.event.ID,
		Payload: mustJSON(protocol.ToolOutputPreliminary{ToolCallID: m.call, GenerationID: r.gen, Version: m.version, Attempt: m.attempt, Seq: r.seq, Output: m.output})})
	s.flushSoon()
}

// onToolEnd records a tool attempt's outcome. A "report" tool cut short
// after Execute started records the interrupted result (R-TOOL-14); a
// "rerun" tool cut short records a "cancelled" error for its version,
// which the fold fences (the call's current version runs again when
// wanted) and which ends the call's settling after Pause now.
func (s *sessionActor) onToolEnd(m *toolEnd) {
	r := s.toolRuns[m.call]
	if r == nil || r.attempt != m.attempt || r.version != m.version {
		return
	}
	s.ctx.Stop(r.pid)
	delete(s.toolRuns, m.call)
	switch {
	case m.cancelled && s.isReport(r.tool):
		s.queueWork(s.toolDone(m.call, r.gen, m.version, m.attempt, nil, protocol.InterruptedToolError, true))
		s.endToolAfterWrite(r, "interrupted", nil, nil)
	case m.cancelled:
		s.queueWork(s.toolDone(m.call, r.gen, m.version, m.attempt, nil, "cancelled", false))
		s.endToolAfterWrite(r, "cancelled", nil, nil)
	case m.err != nil:
		s.queueWork(s.toolDone(m.call, r.gen, m.version, m.attempt, nil, m.err.Error(), false))
		s.endToolAfterWrite(r, "failed", nil, m.err)
	default:
		s.queueWork(s.toolDone(m.call, r.gen, m.version, m.attempt, m.output, "", false))
		s.endToolAfterWrite(r, "completed", m.output, nil)
	}
	s.flushSoon()
}

// stateThrough folds session's log with c up to and including the event
// with ID id: a boundary that every attempt of a tool call reads alike
// (R-CONTRACT-20).
func stateThrough(ctx context.Context, store persistence.Store, c *protocol.Contract, session, id string) (*protocol.SessionState, uint64, error) {
	evs, err := store.Lookup(ctx, []string{id})
	if err != nil {
		return nil, 0, err
	}
	if len(evs) == 0 {
		return nil, 0, fmt.Errorf("actors: the boundary event %q is not in the store", id)
	}
	return replay(ctx, store, c, session, evs[0].Index, func(string, error) {}, nil)
}
