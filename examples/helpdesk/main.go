// Command helpdesk is an agent of your own, served by A2: two tools (one
// needs the user's approval and is never run twice), an application event
// with its reducer, over HTTP on the embedded store. docs/embedding.md
// walks through it.
package main

import (
	"context"
	"encoding/json"
	"log"
	"os"
	"os/signal"
	"slices"

	"github.com/a2-runtime/a2"
	"github.com/a2-runtime/a2/protocol"
)

// desk is the application state: the tickets escalated so far.
type desk struct {
	Escalated []string `json:"escalated"`
}

const ticketSchema = `{"type":"object","properties":{"ticket":{"type":"string","pattern":"^T-[0-9]+$"}},"required":["ticket"]}`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, options(os.Getenv)); err != nil {
		log.Fatal(err)
	}
}

// options serve beside a node (127.0.0.1:8080, ./data), unless A2_ADDR and A2_DATA say otherwise.
func options(getenv func(string) string) a2.Options {
	or := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	return a2.Options{Addr: or("A2_ADDR", "127.0.0.1:8090"), Data: or("A2_DATA", "./data-helpdesk")}
}

func run(ctx context.Context, o a2.Options) error {
	contract, err := protocol.AgentContract(protocol.ContractOptions{Name: "helpdesk",
		Events: map[string]protocol.Schema{"ticket.escalated": nil},
		Reducer: protocol.NewReducer("desk.v1", desk{Escalated: []string{}}, func(d desk, ev protocol.Event) desk {
			var p struct{ Ticket string }
			if ev.Type == "ticket.escalated" && json.Unmarshal(ev.Payload, &p) == nil {
				d.Escalated = append(slices.Clone(d.Escalated), p.Ticket)
			}
			return d
		})})
	if err != nil {
		return err
	}
	lookup := a2.Tool{Name: "lookup_ticket", Description: "Reads a support ticket.", InputSchema: json.RawMessage(ticketSchema),
		Execute: func(_ context.Context, in json.RawMessage) (json.RawMessage, error) {
			return json.Marshal(map[string]any{"input": in, "status": "open", "subject": "The printer is on fire"})
		}}
	escalate := a2.Tool{Name: "escalate_ticket", Description: "Pages the on-call engineer about a ticket.", InputSchema: json.RawMessage(ticketSchema),
		NeedsApproval: func(json.RawMessage) bool { return true }, // a person says yes first
		Recovery:      "report",                                   // it pages someone: cut short, it is reported, never run again
		Execute: func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
			hc, err := a2.ToolCallOf(ctx)
			if err == nil { // the event is the page, recorded in the session's log
				_, err = hc.Append(ctx, protocol.Event{ID: "escalated-" + hc.Call.ToolCallID, Type: "ticket.escalated", Payload: in})
			}
			return json.RawMessage(`{"paged":true}`), err
		}}
	// The model: from the environment's keys (or A2_MODEL), else the demo model.
	agent, err := a2.NewAgent(a2.AgentOptions{Contract: contract, Tools: []a2.Tool{lookup, escalate},
		Instructions: a2.Instructions("You are a helpdesk agent. Look a ticket up before you answer; escalate only when asked.")})
	if err != nil {
		return err
	}
	return a2.Serve(ctx, o, agent)
}
