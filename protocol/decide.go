package protocol

import (
	"fmt"
	"strconv"
)

// Policy is the agent configuration the controller needs. It holds values
// only; callbacks live in the runtime.
type Policy struct {
	// MaxSteps caps the model steps of one response; 0 means no limit
	// (R-GEN-06).
	MaxSteps int
	// DeferredTools names provider-executed tools with declared
	// deferred-result support: the continuation waits for their result,
	// submitted by trusted code with a tool-result command (R-TOOL-18).
	DeferredTools map[string]bool
	// ReportTools names the tools with toolRecovery "report" (at most once
	// per call). They start only once their step has ended (completed or
	// failed), as every tool did before: a step still streaming may be
	// superseded by a crash or a lapsed claim, and its new attempt calls
	// the model again, which would run such a tool a second time. Other
	// tools start as soon as their input is complete.
	ReportTools map[string]bool
}

// stepLimitMessage is the error of a response that maxSteps stopped.
const stepLimitMessage = "the response reached maxSteps"

// Decide is the controller for one command: given the state before the
// command and the command event (already validated at ingress by
// ValidateCommand), it returns the events that follow the command in the
// same atomic append: the ai.control.decided receipt, then the effects the
// decision causes (interruptions, admissions, generation requests). Exactly
// one receipt per command (OQ-04); a rejection is a normal receipt, not an
// error (R-INPUT-31). s is not modified.
//
// The IDs of the returned events are derived from the session and the
// command, so deciding the same command on the same state again returns the
// same events (R-LOG-07).
func Decide(p Policy, s *AIState, cmd Event) ([]Event, error) {
	if cmd.Type != TypeControlRequested {
		return nil, fmt.Errorf("protocol: decide: %q is not a command", cmd.Type)
	}
	return DecideInPlace(p, s.Clone(), cmd)
}

// DecideInPlace is Decide on s itself: it folds cmd, then each event it
// returns, into s. It spares Decide's copy of the state, whose cost grows
// with the session's history (BenchmarkDecide), for a caller that folds the
// returned events anyway. On error s may be partly changed and must be
// discarded.
func DecideInPlace(p Policy, w *AIState, cmd Event) ([]Event, error) {
	if cmd.Type != TypeControlRequested {
		return nil, fmt.Errorf("protocol: decide: %q is not a command", cmd.Type)
	}
	if err := Fold(w, cmd); err != nil {
		return nil, err
	}
	session := w.Session.ID
	if cmd.Session != "" {
		session = cmd.Session
	}
	_, pc := w.pendingCommand(cmd.ID)
	if pc == nil {
		return nil, fmt.Errorf("protocol: decide: command %q is not pending", cmd.ID)
	}
	c := pc.Command
	reason := w.judge(cmd.ID, &c)
	if reason == "" && c.Action == ActionToolResult && !p.DeferredTools[w.Tools[c.ToolCallID].ToolName] {
		reason = ReasonNotFound // only tools with declared deferred results take one (OQ-21)
	}
	rc := Decided{CommandID: cmd.ID, Outcome: OutcomeApplied}
	if reason != "" {
		rc.Outcome, rc.Reason = OutcomeRejected, reason
	}
	out := &emitter{state: w, session: session, cause: cmd.ID}
	if err := out.emit(DeriveID("decided", session, cmd.ID), TypeControlDecided, rc); err != nil {
		return nil, err
	}
	if reason == "" {
		if err := out.effects(&c, cmd.ID); err != nil {
			return nil, err
		}
	}
	if err := out.step(p); err != nil {
		return nil, err
	}
	return out.events, nil
}

// Step returns the events the control lane appends on its own after the
// state changed: a steering handoff at a step boundary, the admission of
// pending inputs when no turn is active, the first model request of a new
// turn, the continuation after a step's tool results, a fresh request after
// Resume, or the stepLimit failure. It returns nil when nothing is due. s is
// not modified. The runtime calls it after folding every appended batch and
// appends its events (ideally in the same batch, so that a completion and
// the admission it allows commit together).
func Step(p Policy, s *AIState) ([]Event, error) {
	if !needsStep(p, s) {
		return nil, nil
	}
	return StepInPlace(p, s.Clone())
}

// StepInPlace is Step on s itself: the events it returns are folded into s
// already. On error s may be partly changed and must be discarded.
func StepInPlace(p Policy, s *AIState) ([]Event, error) {
	if !needsStep(p, s) {
		return nil, nil
	}
	out := &emitter{state: s, session: s.Session.ID}
	if err := out.step(p); err != nil {
		return nil, err
	}
	return out.events, nil
}

// judge decides a command against the state with the command folded in:
// "" to apply it, or the rejection reason (OQ-05).
func (s *AIState) judge(id string, c *Command) string {
	if s.Session.Status == SessionStatusClosed {
		return ReasonClosed
	}
	a := s.Active
	switch c.Action {
	case ActionSend:
		if c.Message == nil {
			return ReasonNotFound
		}
		return ""
	case ActionSteer:
		if c.Message == nil || c.Message.Role != RoleUser {
			return ReasonNotUserInput
		}
		return ""
	case ActionEdit:
		if c.Message == nil {
			return ReasonNotFound
		}
		k := s.inboxIndex(c.Message.ID)
		if k < 0 {
			return ReasonNotPending
		}
		if s.Inbox.Items[k].Role != c.Message.Role {
			return ReasonRoleMismatch
		}
		return ""
	case ActionMove:
		if s.inboxIndex(c.InputID) < 0 {
			return ReasonNotPending
		}
		if c.BeforeID != nil && *c.BeforeID != "" && s.inboxIndex(*c.BeforeID) < 0 {
			return ReasonNotFound
		}
		return ""
	case ActionRemove:
		if s.inboxIndex(c.InputID) < 0 {
			return ReasonNotPending
		}
		return ""
	case ActionSendNow:
		k := s.inboxIndex(c.InputID)
		if k < 0 {
			return ReasonNotPending
		}
		if s.Inbox.Items[k].Role != RoleUser {
			return ReasonNotUserInput
		}
		if c.TurnID == nil {
			if a != nil {
				return ReasonStaleTurn
			}
			return ""
		}
		if a == nil || a.TurnID != *c.TurnID {
			return ReasonStaleTurn
		}
		return ""
	case ActionStop:
		if a == nil || c.TurnID == nil || a.TurnID != *c.TurnID {
			return ReasonStaleTurn
		}
		if _, _, ok := s.owner(); !ok {
			return ReasonStaleTurn
		}
		return ""
	case ActionPause:
		if c.When != PauseNow && c.When != PauseAfterTurn {
			return ReasonNotFound
		}
		return ""
	case ActionResume:
		return ""
	case ActionApproval:
		pa, ok := s.PendingApprovals[c.ApprovalID]
		if !ok {
			if s.approvalKnown(c.ApprovalID) {
				return ReasonNotPending
			}
			return ReasonNotFound
		}
		if pa.RequestID != c.RequestID || pa.GenerationID != c.GenerationID || c.Approved == nil {
			return ReasonNotPending
		}
		return ""
	case ActionInput:
		pi, ok := s.PendingInputs[c.InputID]
		if !ok {
			return ReasonNotFound
		}
		if pi.RequestID != c.RequestID || pi.GenerationID != c.GenerationID {
			return ReasonNotPending
		}
		return ""
	case ActionRequestInput:
		req, gen, ok := s.owner()
		if !ok || a.Phase != PhaseRunning {
			return ReasonStaleTurn
		}
		if c.RequestID != req || (gen != "" && c.GenerationID != gen) {
			return ReasonStaleTurn
		}
		if _, dup := s.PendingInputs[c.InputID]; dup {
			return ReasonNotPending
		}
		return ""
	case ActionRetry:
		if a == nil || a.ResponseMessageID != c.ResponseMessageID {
			if s.message(c.ResponseMessageID) != nil {
				return ReasonStaleTurn
			}
			return ReasonNotFound
		}
		if !a.Failed || (s.Error != nil && s.Error.StepLimit) {
			return ReasonNotFound
		}
		return ""
	case ActionToolResult:
		t, ok := s.Tools[c.ToolCallID]
		if !ok || !t.ProviderExecuted {
			return ReasonNotFound
		}
		if toolTerminal(t.Status) || t.GenerationID != c.GenerationID || a == nil || a.ResponseMessageID != t.ResponseID {
			return ReasonNotPending
		}
		switch s.TerminalGenerations[t.GenerationID] {
		case GenInterrupted, GenSuperseded:
			return ReasonNotPending
		}
		return ""
	case ActionInterrupt:
		if !s.ownerMatches(c.MessageID, c.RequestID, c.GenerationID) {
			return ReasonStaleTurn
		}
		return ""
	}
	return ReasonNotFound
}

// approvalKnown reports whether an approval ID appears on any tool part: an
// answer to it is late rather than unknown.
func (s *AIState) approvalKnown(id string) bool {
	for i := range s.Messages {
		for _, p := range s.Messages[i].Parts {
			if p.Approval != nil && p.Approval.ID == id {
				return true
			}
		}
	}
	return false
}

// owner returns the current owner of the active response: the active
// generation (after start) or the active request (before). ok is false when
// there is no active turn or it has neither.
func (s *AIState) owner() (requestID, generationID string, ok bool) {
	if s.Active == nil {
		return "", "", false
	}
	if g := s.ActiveGeneration; g != nil {
		return g.RequestID, g.GenerationID, true
	}
	if s.ActiveRequestID != "" {
		return s.ActiveRequestID, "", true
	}
	return "", "", false
}

// emitter collects the events of one decision or step, folding each into
// its working state as it goes so that later effects see earlier ones.
type emitter struct {
	state   *AIState
	session string
	cause   string
	events  []Event
}

func (e *emitter) emit(id, typ string, payload any) error {
	ev := Event{ID: id, Type: typ, Payload: mustJSON(payload), Session: e.session, Cause: e.cause}
	if err := Fold(e.state, ev); err != nil {
		return err
	}
	e.events = append(e.events, ev)
	return nil
}

// effects emits the events an applied command causes beyond its receipt.
func (e *emitter) effects(c *Command, commandID string) error {
	s := e.state
	switch c.Action {
	case ActionStop:
		// The receipt was folded already; the turn is still active.
		req, gen, _ := s.owner()
		p := MessageInterrupted{MessageID: s.Active.ResponseMessageID, LastSeenIndex: c.LastSeenIndex}
		if gen != "" {
			p.GenerationID = gen
		} else {
			p.RequestID = req
		}
		return e.emit(DeriveID("interrupted", e.session, commandID), TypeMessageInterrupted, p)
	case ActionInterrupt:
		p := MessageInterrupted{MessageID: c.MessageID, RequestID: c.RequestID, GenerationID: c.GenerationID, Reason: c.Reason, LastSeenIndex: c.LastSeenIndex}
		return e.emit(DeriveID("interrupted", e.session, commandID), TypeMessageInterrupted, p)
	case ActionRetry:
		a := s.Active
		if err := e.emit(DeriveID("retry", e.session, commandID), TypeRetryRequested,
			RetryRequested{MessageID: c.MessageID, ResponseMessageID: c.ResponseMessageID, RetryID: c.RetryID}); err != nil {
			return err
		}
		if a.Phase != PhaseRunning {
			return nil // paused now: the request is made at Resume (OQ-17)
		}
		return e.emit(DeriveID("request", e.session, commandID), TypeGenerationRequested, GenerationRequested{
			ResponseMessageID: a.ResponseMessageID, TurnID: a.TurnID, Reason: RequestRetry,
			SourceGenerationID: a.LastStep, Version: a.Version,
		})
	}
	return nil
}

// maxStepLoop bounds the control loop of one step; every iteration changes
// the state, so it ends long before.
const maxStepLoop = 10000

// step runs the control lane until nothing more is due.
func (e *emitter) step(p Policy) error {
	for i := 0; i < maxStepLoop; i++ {
		did, err := e.stepOnce(p)
		if err != nil || !did {
			return err
		}
	}
	return fmt.Errorf("protocol: control loop did not settle")
}

// needsStep is a cheap test of whether stepOnce would do anything.
func needsStep(p Policy, s *AIState) bool {
	e := &emitter{state: s, session: s.Session.ID}
	return e.due(p) != ""
}

// due names the next control action the state calls for, or "".
func (e *emitter) due(p Policy) string {
	s := e.state
	if s.Session.Status == SessionStatusClosed {
		return ""
	}
	a := s.Active
	if a == nil {
		if !s.Inbox.Paused && len(s.Inbox.Items) > 0 {
			return "admit"
		}
		return ""
	}
	if a.Phase != PhaseRunning || len(a.Settling) > 0 {
		return ""
	}
	if len(s.Inbox.Items) > 0 && s.Inbox.Items[0].AfterStepOf == a.TurnID && s.atStepBoundary(p) {
		return "handoff"
	}
	if len(s.runnableTools(p)) > 0 {
		return "tools"
	}
	if a.Failed || s.ActiveRequestID != "" {
		return ""
	}
	g := s.ActiveGeneration
	switch {
	case a.ResponseMessageID == "":
		return "first-request"
	case g == nil:
		return "resume-request"
	case g.State == GenCompleted && s.joinReady(p, g.GenerationID):
		return "continue"
	}
	return ""
}

// runnableTools lists, in the order the model called them, the local tool
// calls of the active response that may run now and have no work event for
// the current execution version: their input is complete (the step may
// still stream; it may also have completed, or failed: a result racing the
// failure still wins, R-STOP-12), they need no approval or were approved,
// and the turn is running.
func (s *AIState) runnableTools(pol Policy) []string {
	a := s.Active
	if a == nil || a.Phase != PhaseRunning || len(a.Settling) > 0 || a.Yield {
		return nil
	}
	msg := s.message(a.ResponseMessageID)
	if msg == nil {
		return nil
	}
	var out []string
	for _, p := range msg.Parts {
		if !p.IsToolPart() {
			continue
		}
		t, ok := s.Tools[p.ToolCallID]
		if !ok || t.Status != ToolStatusPending || t.ProviderExecuted {
			continue
		}
		switch s.TerminalGenerations[t.GenerationID] {
		case GenCompleted, GenFailed:
			out = append(out, p.ToolCallID)
		case "":
			// A call of the step still streaming runs as soon as its input
			// is complete and authorized: the rest of the stream does not
			// hold it back (R-TOOL-03 "results and generation completion
			// arrive in either order").
			if g := s.ActiveGeneration; g != nil && g.GenerationID == t.GenerationID && g.State == "streaming" && !pol.ReportTools[t.ToolName] {
				out = append(out, p.ToolCallID)
			}
		}
	}
	return out
}

// atStepBoundary reports whether the active turn may hand off to steering
// now (R-STEER-03): no model step is streaming, and the current step's tool
// calls have settled, including authorized deferred provider results;
// calls still waiting for approval do not hold the handoff, they close
// (R-STEER-06). A failed turn is settled already (OQ-10a).
func (s *AIState) atStepBoundary(p Policy) bool {
	a := s.Active
	if a.Failed || a.Yield {
		return true
	}
	g := s.ActiveGeneration
	if g != nil && g.State == "streaming" {
		return false
	}
	if g == nil {
		return true
	}
	for _, id := range sortedKeys(s.Tools) {
		t := s.Tools[id]
		if t.GenerationID != g.GenerationID || toolTerminal(t.Status) || t.Status == ToolStatusApproval {
			continue
		}
		if t.ProviderExecuted && !p.DeferredTools[t.ToolName] {
			continue
		}
		return false
	}
	return true
}

// joinReady reports whether a completed step's continuation may be
// requested: every required tool result is terminal and nothing waits on
// the user (R-TOOL-03).
func (s *AIState) joinReady(p Policy, generationID string) bool {
	if len(s.PendingApprovals) > 0 || len(s.PendingInputs) > 0 {
		return false
	}
	// Whether any call holds the join, so the order does not matter: no
	// sort of every call the session ever made at each step.
	held := func(t ToolActivity) bool {
		return t.GenerationID == generationID && !toolTerminal(t.Status) && (!t.ProviderExecuted || p.DeferredTools[t.ToolName])
	}
	if x := s.index(); x != nil {
		for id := range x.open {
			if held(s.Tools[id]) {
				return false
			}
		}
		return true
	}
	for _, t := range s.Tools {
		if held(t) {
			return false
		}
	}
	return true
}

// stepOnce performs the next due control action.
func (e *emitter) stepOnce(p Policy) (bool, error) {
	s := e.state
	switch e.due(p) {
	case "":
		return false, nil
	case "admit":
		return true, e.admit()
	case "tools":
		a := s.Active
		for _, id := range s.runnableTools(p) {
			t := s.Tools[id]
			msg, k := s.toolPart(id)
			p := ToolExecutionRequested{ToolCallID: id, ToolName: t.ToolName, GenerationID: t.GenerationID, TurnID: a.TurnID, Version: a.Version}
			if msg != nil {
				p.Input = msg.Parts[k].Input
			}
			if err := e.emit(DeriveID("tool", e.session, t.GenerationID, id, strconv.Itoa(a.Version)), TypeToolExecRequested, p); err != nil {
				return false, err
			}
		}
		return true, nil
	case "handoff":
		a := s.Active
		req, gen, ok := s.owner()
		pl := MessageInterrupted{MessageID: a.ResponseMessageID, Reason: ReasonSteeredAfterStep}
		if gen != "" {
			pl.GenerationID = gen
		} else {
			pl.RequestID = req
		}
		if !ok || a.ResponseMessageID == "" {
			// A turn with no owner left (its request fenced by Pause now
			// before it started, or never written) has nothing to fence: the
			// interruption names neither a request nor a generation and ends
			// the turn (foldInterrupted). It is an event, as every change of
			// the state is, so that the log folds to the state the step saw.
			pl = MessageInterrupted{MessageID: a.ResponseMessageID, Reason: ReasonSteeredAfterStep}
		}
		if err := e.emit(DeriveID("handoff", e.session, a.TurnID), TypeMessageInterrupted, pl); err != nil {
			return false, err
		}
		return true, nil
	case "first-request":
		a := s.Active
		id := DeriveID("request", e.session, a.TurnID, RequestTurn)
		return true, e.request(p, id, GenerationRequested{ResponseMessageID: id, TurnID: a.TurnID, Reason: RequestTurn, Version: a.Version})
	case "resume-request":
		a := s.Active
		id := DeriveID("request", e.session, a.TurnID, RequestResume, strconv.Itoa(a.Version), strconv.Itoa(a.Steps))
		return true, e.request(p, id, GenerationRequested{ResponseMessageID: a.ResponseMessageID, TurnID: a.TurnID, Reason: RequestResume, SourceGenerationID: a.LastStep, Version: a.Version})
	case "continue":
		a := s.Active
		g := s.ActiveGeneration
		id := DeriveID("request", e.session, a.TurnID, RequestContinue, g.GenerationID)
		return true, e.request(p, id, GenerationRequested{ResponseMessageID: a.ResponseMessageID, TurnID: a.TurnID, Reason: RequestContinue, SourceGenerationID: g.GenerationID, Version: a.Version})
	}
	return false, nil
}

// request writes a generation request, or the stepLimit failure when
// maxSteps refuses another step of the response (R-GEN-07, OQ-18).
func (e *emitter) request(p Policy, id string, r GenerationRequested) error {
	a := e.state.Active
	if p.MaxSteps > 0 && r.Reason != RequestTurn && a.Steps+1 > p.MaxSteps {
		return e.emit(DeriveID("step-limit", e.session, id), TypeGenerationFailed,
			GenerationFailed{RequestID: id, Message: stepLimitMessage, StepLimit: true})
	}
	return e.emit(id, TypeGenerationRequested, r)
}

// admit admits the run at the front of the queue (R-INBOX-19, R-TURN-10,
// OQ-08, OQ-09): the steering run for one turn, or passive inputs and
// context up to and including the first generating user input. The run's
// last generating input starts the turn; a run without one is admitted as
// context, without a turn.
func (e *emitter) admit() error {
	s := e.state
	items := s.Inbox.Items
	target := items[0].AfterStepOf
	n := 0
	gen := -1
	if target != "" {
		for n < len(items) && items[n].AfterStepOf == target {
			if items[n].generating() {
				gen = n
			}
			n++
		}
	} else {
		for n < len(items) && items[n].AfterStepOf == "" {
			n++
			if items[n-1].generating() {
				gen = n - 1
				break
			}
		}
	}
	run := append([]InboxItem(nil), items[:n]...)
	var turnID string
	if gen >= 0 {
		turnID = DeriveID("turn", e.session, run[gen].ID)
	}
	for i, it := range run {
		p := MessageCreated{MessageID: it.ID, CommandID: it.CommandID, EditID: it.EditID, Generate: it.Generate, AfterStepOf: it.AfterStepOf}
		if i == gen {
			p.TurnID = turnID
		}
		if err := e.emit(DeriveID("created", e.session, it.ID), TypeMessageCreated, p); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks the controller policy at construction: maxSteps is a
// positive integer when set, 0 meaning no limit (R-GEN-06).
func (p Policy) Validate() error {
	if p.MaxSteps < 0 {
		return configErr("maxSteps", "must be a positive integer (or unset for no limit), not %d", p.MaxSteps)
	}
	return nil
}
