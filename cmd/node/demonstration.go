// The demonstration (go run ./cmd/node demo) drives a short conversation
// through the pure controller in-process (protocol.Decide and protocol.Step),
// with this program playing the model, and prints every event the session
// log holds and the transcript that folds out of it. It needs no store, no
// runtime and no network: it shows the core alone.

package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/a2-runtime/a2/protocol"
)

type session struct {
	id     string
	log    []protocol.Event
	state  *protocol.AIState
	policy protocol.Policy
	quiet  bool
}

func (s *session) append(evs ...protocol.Event) error {
	for _, ev := range evs {
		ev.Session = s.id
		ev.Index = uint64(len(s.log) + 1)
		if err := protocol.Fold(s.state, ev); err != nil {
			return err
		}
		s.log = append(s.log, ev)
		if !s.quiet {
			fmt.Printf("%4d  %-28s %s\n", ev.Index, ev.Type, ev.Payload)
		}
	}
	return nil
}

// push validates a client command, then appends it with its decision and
// effects, as the session actor will.
func (s *session) push(ev protocol.Event) error {
	ev.Session = s.id
	if _, err := protocol.ValidateCommand(ev, protocol.Untrusted); err != nil {
		return err
	}
	out, err := protocol.Decide(s.policy, s.state, ev)
	if err != nil {
		return err
	}
	return s.append(append([]protocol.Event{ev}, out...)...)
}

// work appends an event of the generation lane, then the control lane's
// reaction to it.
func (s *session) work(id, typ string, payload any) error {
	b, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	if err := s.append(protocol.Event{ID: id, Type: typ, Payload: b}); err != nil {
		return err
	}
	more, err := protocol.Step(s.policy, s.state)
	if err != nil {
		return err
	}
	return s.append(more...)
}

// answer plays the model for the active request: it streams text word by
// word in progress batches and completes the step.
func (s *session) answer(gen, text string) error {
	if err := s.work("start-"+gen, protocol.TypeGenerationStarted, protocol.GenerationStarted{
		GenerationID: gen, RequestID: s.state.ActiveRequestID, Attempt: 1, Model: "demo"}); err != nil {
		return err
	}
	chunks := []protocol.UIMessageChunk{{Type: protocol.ChunkStartStep}, {Type: protocol.ChunkTextStart, ID: "t"}}
	for _, w := range strings.SplitAfter(text, " ") {
		chunks = append(chunks, protocol.UIMessageChunk{Type: protocol.ChunkTextDelta, ID: "t", Delta: w})
	}
	chunks = append(chunks, protocol.UIMessageChunk{Type: protocol.ChunkTextEnd, ID: "t"}, protocol.UIMessageChunk{Type: protocol.ChunkFinishStep})
	if err := s.work("progress-"+gen, protocol.TypeGenerationProgress, protocol.GenerationProgress{GenerationID: gen, Chunks: chunks}); err != nil {
		return err
	}
	return s.work("complete-"+gen, protocol.TypeGenerationCompleted, protocol.GenerationCompleted{GenerationID: gen, FinishReason: "stop"})
}

// runDemonstration runs the demonstration; quiet prints nothing.
func runDemonstration(quiet bool) error {
	s := &session{id: "demo-session", state: protocol.NewAIState(), quiet: quiet}
	say := func(format string, args ...any) {
		if !quiet {
			fmt.Printf("\n# "+format+"\n", args...)
		}
	}
	say("a user sends a message; the controller admits it as a turn and requests a model step")
	if err := s.push(protocol.Inputs.Text("m1", "What is A2?")); err != nil {
		return err
	}
	say("while the model answers, two more messages queue up")
	if err := s.push(protocol.Inputs.Text("m2", "And how does steering work?")); err != nil {
		return err
	}
	if err := s.push(protocol.Inputs.Text("m3", "Thanks!")); err != nil {
		return err
	}
	say("the user moves the last message to the front of the queue")
	move := protocol.Inputs.Queue.Move("m3", ptr("m2"))
	move.ID = "move-1"
	if err := s.push(move); err != nil {
		return err
	}
	say("the model streams its answer; the turn ends and the next input is admitted")
	if err := s.answer("gen-1", "A2 keeps every agent conversation as a durable, event-sourced session."); err != nil {
		return err
	}
	say("the user stops the second turn before the model answers")
	stop := protocol.Inputs.Stop(s.state.Active.TurnID, nil)
	stop.ID = "stop-1"
	if err := s.push(stop); err != nil {
		return err
	}
	if err := s.answer("gen-3", "Steering hands off after the current step."); err != nil {
		return err
	}
	if !quiet {
		fmt.Println("\n# the transcript folded from the log")
		for _, m := range s.state.Messages {
			var text []string
			for _, p := range m.Parts {
				if p.Type == protocol.PartText {
					text = append(text, p.Text)
				}
			}
			fmt.Printf("%-10s %s\n", m.Role+":", strings.Join(text, " "))
		}
		fmt.Printf("\nstatus: %s, %d events in the log\n", s.state.Status, len(s.log))
	}
	return nil
}

func ptr(s string) *string { return &s }
