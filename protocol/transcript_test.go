package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// The transcript tests: each file under testdata/ is one behaviour, written
// as commands and the events and state they produce. `go test ./protocol
// -rewrite` regenerates the expected output; review the diff.
//
// Commands (arguments are key=value; message text is the command's input):
//
//	new [max-steps=N] [deferred=tool,...]      start a session "s1"
//	send id=ID [role=R] [generate=false] [trusted]   (text in input)
//	steer id=ID turn=T|null [last=N]           (text in input)
//	edit id=ID input=ID [role=R] [trusted]     (text in input)
//	move id=ID input=ID before=ID|null
//	remove id=ID input=ID
//	send-now id=ID input=ID turn=T|null [last=N]
//	stop id=ID turn=T [last=N]
//	pause id=ID when=now|after-turn ; resume id=ID
//	interrupt id=ID message=M (request=R|generation=G) [reason=..] [last=N]
//	retry id=ID message=M response=R retry=X
//	approve id=ID approval=A request=R generation=G [deny] [reason=..]
//	respond id=ID input=I request=R generation=G     (value in input)
//	request-input id=ID input=I request=R generation=G
//	tool-result id=ID call=C generation=G [error]    (output in input)
//	command [trusted]                          raw ai.control.requested payload in input, id=ID
//	start gen=G [request=R] [attempt=N] [model=M]
//	progress gen=G [from=N]                    chunks in input, one per line
//	complete gen=G ; fail gen=G (message in input) ; supersede gen=G [request=R]
//	tool-done call=C gen=G [version=N] [error]       (output in input)
//	close ; created
//	state [fields=a,b]                         print state fields
//	messages ; inbox
//
// Every command that appends prints the appended events with A2's IDs
// replaced by aliases (T1.. turns, R1.. requests), followed by the status.
// After each command the harness checks the invariants of checkInvariants.

var a2IDPattern = regexp.MustCompile(`a2\.ai:[a-z2-7]{26}`)

type transcript struct {
	t        *testing.T
	policy   Policy
	session  string
	log      []Event
	state    *AIState
	alias    map[string]string // a2 ID -> alias
	real     map[string]string // alias -> a2 ID
	counts   map[string]int
	overlay  Overlay
	work     WorkPolicy
	pushOnly bool
}

func newTranscript(t *testing.T) *transcript {
	tr := &transcript{t: t, session: "s1", state: NewAIState(),
		alias: map[string]string{}, real: map[string]string{}, counts: map[string]int{}}
	return tr
}

func (tr *transcript) name(id, prefix string) {
	if _, ok := tr.alias[id]; ok || !IsA2ID(id) {
		return
	}
	tr.counts[prefix]++
	a := fmt.Sprintf("%s%d", prefix, tr.counts[prefix])
	tr.alias[id] = a
	tr.real[a] = id
}

func (tr *transcript) resolve(v string) string {
	if id, ok := tr.real[v]; ok {
		return id
	}
	return v
}

func (tr *transcript) show(b []byte) string {
	return a2IDPattern.ReplaceAllStringFunc(string(b), func(id string) string {
		if a, ok := tr.alias[id]; ok {
			return a
		}
		return "a2"
	})
}

// append appends events to the log (assigning indexes) and folds them.
func (tr *transcript) append(evs ...Event) error {
	for _, ev := range evs {
		ev.Session = tr.session
		ev.Index = uint64(len(tr.log) + 1)
		if err := Fold(tr.state, ev); err != nil {
			return err
		}
		tr.log = append(tr.log, ev)
		switch ev.Type {
		case TypeGenerationRequested:
			tr.name(ev.ID, "R")
		case TypeMessageCreated:
			var p MessageCreated
			_ = json.Unmarshal(ev.Payload, &p)
			tr.name(p.TurnID, "T")
		}
	}
	return nil
}

func (tr *transcript) format(evs []Event) string {
	var b strings.Builder
	for _, ev := range evs {
		id := ev.ID
		if IsA2ID(id) {
			if a, ok := tr.alias[id]; ok {
				id = a
			} else {
				id = "a2"
			}
		}
		fmt.Fprintf(&b, "%s %s %s\n", ev.Type, id, tr.show(ev.Payload))
	}
	fmt.Fprintf(&b, "status: %s", tr.state.Status)
	if a := tr.state.Active; a != nil {
		fmt.Fprintf(&b, " active: %s %s", tr.alias[a.TurnID], a.Phase)
	}
	if tr.state.Inbox.Paused {
		b.WriteString(" paused")
	}
	b.WriteString("\n")
	return b.String()
}

// command validates a command at ingress, appends it with its decision and
// effects, and returns what was appended (or the validation error).
func (tr *transcript) command(id string, c Command, trust Trust) string {
	ev := Event{ID: id, Type: TypeControlRequested, Payload: mustJSON(c), Session: tr.session}
	return tr.commandEvent(ev, trust)
}

func (tr *transcript) commandEvent(ev Event, trust Trust) string {
	if _, err := ValidateCommand(ev, trust); err != nil {
		return "error: " + err.Error() + "\n"
	}
	if tr.pushOnly {
		// Pushed by this client, not yet persisted and decided: shown only
		// in the optimistic view.
		tr.overlay.Push(ev)
		return "pending " + ev.ID + "\n"
	}
	out, err := Decide(tr.policy, tr.state, ev)
	if err != nil {
		return "decide error: " + err.Error() + "\n"
	}
	all := append([]Event{ev}, out...)
	if err := tr.append(all...); err != nil {
		return "fold error: " + err.Error() + "\n"
	}
	for _, e := range all {
		tr.overlay.Observe(e)
	}
	return tr.format(all)
}

// worker appends an event of the generation lane or a tool handler, then
// runs the control lane's Step on the result.
func (tr *transcript) worker(ev Event) string {
	if err := tr.append(ev); err != nil {
		return "fold error: " + err.Error() + "\n"
	}
	evs := []Event{ev}
	more, err := Step(tr.policy, tr.state)
	if err != nil {
		return "step error: " + err.Error() + "\n"
	}
	if err := tr.append(more...); err != nil {
		return "fold error: " + err.Error() + "\n"
	}
	return tr.format(append(evs, more...))
}

func (tr *transcript) run(t *testing.T, d *datadriven.TestData) string {
	_, tr.pushOnly = arg(d, "pending")
	id := tr.str(d, "id")
	role, _ := arg(d, "role")
	var out string
	switch d.Cmd {
	case "new":
		tr.policy = Policy{}
		if n := optInt(d, "max-steps"); n != nil {
			tr.policy.MaxSteps = int(*n)
		}
		tr.work = WorkPolicy{}
		if v, ok := arg(d, "lane"); ok {
			tr.work.ToolLane = v
		}
		if v, ok := arg(d, "report"); ok {
			tr.work.ReportTools = map[string]bool{}
			for _, name := range strings.Split(v, ",") {
				tr.work.ReportTools[name] = true
			}
		}
		if v, ok := arg(d, "deferred"); ok {
			tr.policy.DeferredTools = map[string]bool{}
			for _, name := range strings.Split(v, ",") {
				tr.policy.DeferredTools[name] = true
			}
		}
		return "ok\n"
	case "created":
		out = tr.worker(Event{ID: "created-" + tr.session, Type: TypeSessionCreated, Payload: json.RawMessage(`{}`)})
	case "close":
		out = tr.worker(Event{ID: fmt.Sprintf("closed-%d", len(tr.log)), Type: TypeSessionClosed, Payload: json.RawMessage(`{}`)})
	case "send":
		c := Command{Action: ActionSend, Message: textMessage(id, role, d.Input)}
		if v, ok := arg(d, "generate"); ok && v == "false" {
			f := false
			c.Generate = &f
		}
		out = tr.command(id, c, trustOf(d))
	case "steer":
		out = tr.command(id, Command{Action: ActionSteer, Message: textMessage(id, role, d.Input), TurnID: tr.optTurn(d), LastSeenIndex: optInt(d, "last")}, trustOf(d))
	case "edit":
		out = tr.command(id, Command{Action: ActionEdit, Message: textMessage(tr.str(d, "input"), role, d.Input)}, trustOf(d))
	case "move":
		c := Command{Action: ActionMove, InputID: tr.str(d, "input")}
		if v, ok := arg(d, "before"); ok && v != "null" {
			v = tr.resolve(v)
			c.BeforeID = &v
		}
		out = tr.command(id, c, trustOf(d))
	case "remove":
		out = tr.command(id, Command{Action: ActionRemove, InputID: tr.str(d, "input")}, trustOf(d))
	case "send-now":
		c := Command{Action: ActionSendNow, InputID: tr.str(d, "input"), LastSeenIndex: optInt(d, "last")}
		payload := mustJSON(c)
		// send-now requires turnId, null when idle.
		var m map[string]any
		_ = json.Unmarshal(payload, &m)
		if t := tr.optTurn(d); t != nil {
			m["turnId"] = *t
		} else {
			m["turnId"] = nil
		}
		out = tr.commandEvent(Event{ID: id, Type: TypeControlRequested, Payload: mustJSON(m), Session: tr.session}, trustOf(d))
	case "stop":
		out = tr.command(id, Command{Action: ActionStop, TurnID: tr.optTurn(d), LastSeenIndex: optInt(d, "last")}, trustOf(d))
	case "pause":
		w, _ := arg(d, "when")
		out = tr.command(id, Command{Action: ActionPause, When: w}, trustOf(d))
	case "resume":
		out = tr.command(id, Command{Action: ActionResume}, trustOf(d))
	case "interrupt":
		reason, _ := arg(d, "reason")
		out = tr.command(id, Command{Action: ActionInterrupt, MessageID: tr.str(d, "message"), RequestID: tr.str(d, "request"),
			GenerationID: tr.str(d, "generation"), Reason: strings.ReplaceAll(reason, "_", " "), LastSeenIndex: optInt(d, "last")}, trustOf(d))
	case "retry":
		out = tr.command(id, Command{Action: ActionRetry, MessageID: tr.str(d, "message"), ResponseMessageID: tr.str(d, "response"), RetryID: tr.str(d, "retry")}, trustOf(d))
	case "approve":
		_, deny := arg(d, "deny")
		approved := !deny
		reason, _ := arg(d, "reason")
		out = tr.command(id, Command{Action: ActionApproval, ApprovalID: tr.str(d, "approval"), ToolCallID: tr.str(d, "call"), Approved: &approved,
			Reason: reason, RequestID: tr.str(d, "request"), GenerationID: tr.str(d, "generation")}, trustOf(d))
	case "respond":
		out = tr.command(id, Command{Action: ActionInput, InputID: tr.str(d, "input"), Value: rawOr(d.Input, "null"),
			RequestID: tr.str(d, "request"), GenerationID: tr.str(d, "generation")}, trustOf(d))
	case "request-input":
		out = tr.command(id, Command{Action: ActionRequestInput, InputID: tr.str(d, "input"), Request: rawOr(d.Input, "{}"),
			RequestID: tr.str(d, "request"), GenerationID: tr.str(d, "generation")}, trustOf(d))
	case "tool-result":
		c := Command{Action: ActionToolResult, ToolCallID: tr.str(d, "call"), GenerationID: tr.str(d, "generation")}
		if _, ok := arg(d, "error"); ok {
			c.ErrorText = strings.TrimSpace(d.Input)
		} else {
			c.Output = rawOr(d.Input, "null")
		}
		out = tr.command(id, c, trustOf(d))
	case "command":
		out = tr.commandEvent(Event{ID: id, Type: TypeControlRequested, Payload: json.RawMessage(strings.TrimSpace(d.Input)), Session: tr.session}, trustOf(d))
	case "start":
		req := tr.str(d, "request")
		if req == "" {
			req = tr.state.ActiveRequestID
		}
		attempt := 1
		if n := optInt(d, "attempt"); n != nil {
			attempt = int(*n)
		}
		model, _ := arg(d, "model")
		gen := tr.str(d, "gen")
		out = tr.worker(Event{ID: "ev-start-" + gen + "-" + strconv.Itoa(attempt), Type: TypeGenerationStarted,
			Payload: mustJSON(GenerationStarted{GenerationID: gen, RequestID: req, Attempt: attempt, Model: model})})
	case "progress":
		gen := tr.str(d, "gen")
		chunks := parseChunks(t, d)
		from := 0
		if pr := tr.state.ActiveProjection; pr != nil && pr.GenerationID == gen {
			from = pr.Chunks
		}
		if n := optInt(d, "from"); n != nil {
			from = int(*n)
		}
		out = tr.worker(Event{ID: fmt.Sprintf("ev-progress-%s-%d-%d", gen, from, len(tr.log)), Type: TypeGenerationProgress,
			Payload: mustJSON(GenerationProgress{GenerationID: gen, FromIndex: from, Chunks: chunks})})
	case "complete":
		gen := tr.str(d, "gen")
		out = tr.worker(Event{ID: "ev-complete-" + gen + "-" + strconv.Itoa(len(tr.log)), Type: TypeGenerationCompleted,
			Payload: mustJSON(GenerationCompleted{GenerationID: gen, Usage: &Usage{InputTokens: 10, OutputTokens: 5, TotalTokens: 15}, FinishReason: "stop"})})
	case "fail":
		gen := tr.str(d, "gen")
		out = tr.worker(Event{ID: "ev-fail-" + gen + "-" + strconv.Itoa(len(tr.log)), Type: TypeGenerationFailed,
			Payload: mustJSON(GenerationFailed{GenerationID: gen, Message: strings.TrimSpace(d.Input)})})
	case "supersede":
		gen := tr.str(d, "gen")
		out = tr.worker(Event{ID: "ev-supersede-" + gen + "-" + strconv.Itoa(len(tr.log)), Type: TypeGenerationSuperseded,
			Payload: mustJSON(GenerationSuperseded{GenerationID: gen, RequestID: tr.str(d, "request")})})
	case "tool-done":
		p := ToolExecutionCompleted{ToolCallID: tr.str(d, "call"), GenerationID: tr.str(d, "gen")}
		if n := optInt(d, "version"); n != nil {
			p.Version = int(*n)
		} else if tl, ok := tr.state.Tools[p.ToolCallID]; ok {
			p.Version = tl.Version
		}
		if _, ok := arg(d, "interrupted"); ok {
			p.Interrupted, p.ErrorText = true, InterruptedToolError
		} else if _, ok := arg(d, "error"); ok {
			p.ErrorText = strings.TrimSpace(d.Input)
		} else {
			p.Output = rawOr(d.Input, "null")
		}
		out = tr.worker(Event{ID: fmt.Sprintf("ev-tool-%s-%d", p.ToolCallID, len(tr.log)), Type: TypeToolExecCompleted, Payload: mustJSON(p)})
	case "compaction-requested":
		p := CompactionRequested{GenerationID: tr.str(d, "gen"), InputTokens: optInt(d, "input"), ThresholdTokens: optInt(d, "threshold")}
		if g := tr.state.ActiveGeneration; g != nil {
			p.ResponseMessageID = g.ResponseMessageID
		}
		out = tr.worker(Event{ID: fmt.Sprintf("ev-compact-%s-%d", p.GenerationID, len(tr.log)), Type: TypeCompactionRequested, Payload: mustJSON(p)})
	case "compaction-completed":
		p := CompactionCompleted{GenerationID: tr.str(d, "gen"), Summary: strings.TrimSpace(d.Input), Usage: &Usage{InputTokens: 1000, OutputTokens: 50, TotalTokens: 1050}}
		out = tr.worker(Event{ID: fmt.Sprintf("ev-compacted-%s-%d", p.GenerationID, len(tr.log)), Type: TypeCompactionCompleted, Payload: mustJSON(p)})
	case "append-command":
		// A command appended without its decision yet.
		ev := Event{ID: id, Type: TypeControlRequested, Payload: json.RawMessage(strings.TrimSpace(d.Input))}
		if err := tr.append(ev); err != nil {
			return "fold error: " + err.Error() + "\n"
		}
		out = tr.format([]Event{ev})
	case "metadata-requested":
		model, _ := arg(d, "model")
		out = tr.worker(Event{ID: fmt.Sprintf("ev-meta-%d", len(tr.log)), Type: TypeModelMetaRequested, Payload: mustJSON(ModelMetadataRequested{Model: model})})
	case "metadata-resolved":
		model, _ := arg(d, "model")
		p := ModelMetadataResolved{Model: model}
		if n := optInt(d, "context"); n != nil {
			p.ContextWindow = *n
		}
		if n := optInt(d, "max-output"); n != nil {
			p.MaxOutputTokens = *n
		}
		_, p.Unavailable = arg(d, "unavailable")
		out = tr.worker(Event{ID: fmt.Sprintf("ev-meta-%d", len(tr.log)), Type: TypeModelMetaResolved, Payload: mustJSON(p)})
	case "deliver":
		// Persist and decide a pending command of this client.
		for _, ev := range tr.overlay.Pending() {
			if ev.ID == id {
				return tr.commandEvent(ev, trustOf(d))
			}
		}
		d.Fatalf(t, "no pending command %q", id)
	case "push-failed":
		tr.overlay.Fail(id)
		return "ok\n"
	case "view":
		return tr.showView(d)
	case "context":
		summary, after := ModelContext(tr.state.Messages)
		return fmt.Sprintf("summary: %q\n", summary) + tr.messagesOf(&AIState{Messages: after})
	case "pending":
		var b strings.Builder
		for _, w := range Pending(tr.work, tr.state) {
			b.WriteString(tr.show(mustJSON(w)))
			b.WriteString("\n")
		}
		if b.Len() == 0 {
			return "(none)\n"
		}
		return b.String()
	case "claim":
		call := tr.str(d, "call")
		t := tr.state.Tools[call]
		attempt := t.Attempt + 1
		if n := optInt(d, "attempt"); n != nil {
			attempt = int(*n)
		}
		out = tr.worker(Event{ID: fmt.Sprintf("ev-claim-%s-%d", call, len(tr.log)), Type: TypeToolExecClaimed,
			Payload: mustJSON(ToolExecutionClaimed{ToolCallID: call, GenerationID: t.GenerationID, Version: t.Version, Attempt: attempt})})
	case "preliminary":
		call := tr.str(d, "call")
		t := tr.state.Tools[call]
		out = tr.worker(Event{ID: fmt.Sprintf("ev-prelim-%s-%d", call, len(tr.log)), Type: TypeToolOutputPreliminary,
			Payload: mustJSON(ToolOutputPreliminary{ToolCallID: call, GenerationID: t.GenerationID, Version: t.Version, Attempt: t.Attempt, Output: rawOr(d.Input, "null")})})
	case "state":
		return tr.showState(d)
	case "messages":
		return tr.showMessages()
	case "inbox":
		return tr.showInbox()
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	tr.checkInvariants(t, d.Pos)
	return out
}

// checkInvariants holds after every command of every transcript: the
// incremental state equals a fresh fold of the whole log byte for byte, a
// snapshot round-trips, and the structural invariants of checkState hold.
func (tr *transcript) checkInvariants(t *testing.T, pos string) {
	t.Helper()
	fresh := NewAIState()
	for _, ev := range tr.log {
		if err := Fold(fresh, ev); err != nil {
			t.Fatalf("%s: refold: %v", pos, err)
		}
	}
	a, _ := MarshalState(tr.state)
	b, _ := MarshalState(fresh)
	if !bytes.Equal(a, b) {
		t.Fatalf("%s: incremental state differs from a fresh fold:\n%s\n%s", pos, a, b)
	}
	restored, err := UnmarshalState(a)
	if err != nil {
		t.Fatalf("%s: restore snapshot: %v", pos, err)
	}
	c, _ := MarshalState(restored)
	if !bytes.Equal(a, c) {
		t.Fatalf("%s: snapshot does not round-trip", pos)
	}
	if err := checkState(tr.log, tr.state); err != nil {
		t.Fatalf("%s: %v", pos, err)
	}
}

func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		tr := newTranscript(t)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return tr.run(t, d)
		})
		checkPendingAtEveryCut(t, path, tr.log, tr.work)
		checkFoldGolden(t, path, tr.log, tr.state)
	})
}

// checkPendingAtEveryCut cuts a scenario's log at every index, as a crash
// would, and checks that the work Pending names after the cut is what a
// restarted runtime must do: the same from a fresh fold and from a
// restored snapshot, nothing for a closed session, one generation attempt
// for an active running turn's request and none otherwise, tool work only
// for unsettled calls of the current execution version (reported instead of
// rerun for report tools whose claim lapsed), and a settle for every owner
// Pause now cancelled.
func checkPendingAtEveryCut(t *testing.T, path string, log []Event, p WorkPolicy) {
	for cut := 0; cut <= len(log); cut++ {
		s := NewAIState()
		for _, ev := range log[:cut] {
			if err := Fold(s, ev); err != nil {
				t.Fatalf("%s cut %d: %v", path, cut, err)
			}
		}
		work := Pending(p, s)
		snap, _ := MarshalState(s)
		restored, err := UnmarshalState(snap)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := mustJSON(work), mustJSON(Pending(p, restored)); !bytes.Equal(a, b) {
			t.Fatalf("%s cut %d: Pending after restore differs:\n%s\n%s", path, cut, a, b)
		}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("%s cut %d: %s\nwork: %s", path, cut, fmt.Sprintf(format, args...), mustJSON(work))
		}
		if s.Session.Status == SessionStatusClosed && len(work) > 0 {
			fail("work pending for a closed session")
		}
		a := s.Active
		wantGen := a != nil && a.Phase == PhaseRunning && len(a.Settling) == 0 && !a.Yield && s.ActiveRequestID != "" && !s.TerminalRequestIDs[s.ActiveRequestID]
		gens, settles := 0, 0
		for _, w := range work {
			switch w.Kind {
			case WorkGeneration:
				gens++
				if w.RequestID != s.ActiveRequestID {
					fail("generation work for %s, active request %s", w.RequestID, s.ActiveRequestID)
				}
			case WorkTool, WorkReportInterrupted:
				tl, ok := s.Tools[w.ToolCallID]
				if !ok || toolTerminal(tl.Status) || a == nil || tl.Version != a.Version || tl.ResponseID != a.ResponseMessageID {
					fail("tool work for settled or stale call %s", w.ToolCallID)
				}
				if (w.Kind == WorkReportInterrupted) != (p.ReportTools[w.ToolName] && tl.Status == ToolStatusRunning) {
					fail("report policy misapplied to %s", w.ToolCallID)
				}
			case WorkSettle:
				settles++
			}
		}
		if (gens == 1) != wantGen || gens > 1 {
			fail("generation work %d, want %v", gens, wantGen)
		}
		if a != nil && settles != len(a.Settling) {
			fail("settle work %d for %d settling owners", settles, len(a.Settling))
		}
	}
}
