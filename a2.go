// Package a2 is the short way to run agents of your own: define them with
// the aliases below (AgentOptions, Tool, and protocol for a contract of
// your own), and Serve them over HTTP, on the embedded store or a shared
// PostgreSQL, as a single node or a cluster's member or gateway. The node
// (cmd/node) serves through Serve too. docs/embedding.md walks through an
// example (examples/helpdesk).
package a2

import (
	"context"
	"os"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/demo"
	"github.com/a2-runtime/a2/harness/providers"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/tools"
)

// The pieces of an agent, reachable from this package: each is the type or
// function of the package that defines it (and documents it), so that a
// program defining and serving agents needs only a2, and protocol for a
// contract of its own.
type (
	// AgentOptions define an agent: its name, model, instructions, tools,
	// contract and handlers (actors.AgentOptions).
	AgentOptions = actors.AgentOptions
	// Agent is an agent to serve (actors.Agent).
	Agent = actors.Agent
	// Tool is a tool an agent's model can call (tools.Tool).
	Tool = tools.Tool
	// ToolCall is what a tool's Execute learns of its call: the call and
	// its work event, the attempt, the session, and how to append to it
	// (tools.Context).
	ToolCall = tools.Context
)

// Instructions is an agent's system prompt, the same for every step
// (harness.Instructions).
func Instructions(s string) harness.InstructionsOption { return harness.Instructions(s) }

// ToolCallOf returns the call a tool's Execute runs for, from its context
// (tools.FromContext).
func ToolCallOf(ctx context.Context) (*ToolCall, error) { return tools.FromContext(ctx) }

// Models returns the model providers the environment configures, as the
// node chooses them: AI_GATEWAY_API_KEY, OPENAI_API_KEY or OPENAI_BASE_URL,
// ANTHROPIC_API_KEY, else the offline demo model; A2_MODEL names the
// model. A2_SCRIPT names a script model's file (test mode, docs/testing.md)
// that replaces them all. Use it as an agent's Model and Models:
//
//	models, _ := a2.Models()
//	actors.AgentOptions{Model: harness.ModelID(models.Model()), Models: models.For, ...}
func Models() (*providers.Set, error) {
	var sc *script.Script
	if f := os.Getenv("A2_SCRIPT"); f != "" {
		var err error
		if sc, err = script.Load(f); err != nil {
			return nil, err
		}
	}
	return providers.FromEnv(os.Getenv, os.Getenv("A2_MODEL"), sc, demo.DefaultWordDelay), nil
}

// NewAgent is actors.NewAgent with the models the environment configures
// (Models) when o names none: its Model, unless o.Model is set, and its
// providers.
func NewAgent(o actors.AgentOptions) (*actors.Agent, error) {
	if o.Models == nil {
		models, err := Models()
		if err != nil {
			return nil, err
		}
		o.Models = models.For
		if o.Model.IsZero() {
			o.Model = harness.ModelID(models.Model())
		}
	}
	return actors.NewAgent(o)
}
