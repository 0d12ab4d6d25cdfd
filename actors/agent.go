// Package actors is the actor shell around the pure session core: one
// session actor per session is the single writer of its log. It persists,
// then acts: commands are decided (protocol.DecideInPlace) and appended with their
// effects; the work protocol.Pending names is run by child lanes (the model
// steps of the generation lane); subscribers read only durable events.
package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
	"github.com/a2-runtime/a2/tools/sandbox"
)

// ModelProvider resolves a model ID (as resolved by the agent's model
// option) to the model that serves it.
type ModelProvider func(modelID string) (harness.Model, error)

// HarnessOptions are the options of the default AI SDK harness. They exist
// only here: passing them to the agent itself is not possible in Go's
// types, which is the Go form of R-GEN-08's construction error.
type HarnessOptions struct {
	// Generation holds the per-step settings (static).
	Generation harness.GenerationSettings
	// GenerationFunc resolves per-step settings once per attempt; it wins
	// over Generation when set.
	GenerationFunc func(context.Context, harness.ResolverContext) (harness.GenerationSettings, error)
	// Compaction configures automatic compaction.
	Compaction protocol.CompactionOptions
	// CustomCompaction replaces the automatic policy with the
	// application's own (R-COMPACT-13); Compaction must then be zero.
	CustomCompaction *CustomCompaction
	// CompactionFunc resolves the compaction choice once per generation
	// (R-COMPACT-14); it replaces Compaction and CustomCompaction, which
	// must then be zero.
	CompactionFunc func(context.Context, harness.ResolverContext) (CompactionChoice, error)
	// StepTimeout bounds one model step (the summary request of a
	// compaction included); 0 is no limit. A step that runs out fails its
	// generation with a timeout error, like any model failure. Tool
	// executions are not bounded by it (R-TOOL-09): a tool runs until it
	// returns or its call is cancelled.
	StepTimeout time.Duration
	// MessageMetadata maps each chunk of the default generator to message
	// metadata (R-GEN-27): it is called synchronously for every chunk the
	// model streams, and what it returns for the start and finish chunks (a
	// value that encodes as a JSON object; nil for none) is recorded on
	// that chunk, with the progress, and shallow-merged onto the assistant
	// message (R-PROGRESS-06). A custom Generate skips it (R-GEN-28). A
	// value that is not a JSON object fails the generation.
	MessageMetadata func(MetadataContext) any
	// Generate replaces the model-facing step (R-GEN-29): it returns the
	// step's chunk stream, which writes the response message; A2 keeps
	// durable progress, tool execution, approval, continuation,
	// interruption and failure. With it, Models may be nil, and compaction
	// stays off unless Compaction, CustomCompaction or CompactionFunc is
	// set (R-GEN-30). An error fails the turn once, like a provider error.
	Generate func(context.Context, GenerateContext) (harness.Stream, error)
	// Sandbox resolves the session's sandbox for each local tool
	// execution, before its Execute (tools.Context.Sandbox), for the
	// harness's tools and the agent's alike; a failure is tried again,
	// then fails the attempt (R-HARNESS-23, R-HARNESS-24). Pi's harness
	// sets it. Nil: tools get no sandbox.
	Sandbox sandbox.Resolver
	// Loop says that Generate runs an agent loop of its own (an external
	// harness, Pi's): the loop's tool calls run without approval, so an
	// agent tool that asks for one (NeedsApproval) is refused at
	// construction (R-HARNESS-05). harness/external and harness/pi set it.
	Loop bool
}

// GenerateContext is what a custom Generate, and MessageMetadata, receive
// for one model step: the resolver context (its Messages after this step's
// compaction) and what the step resolved (R-GEN-13, R-GEN-29).
type GenerateContext struct {
	harness.ResolverContext
	// GenerationID is the step's generation.
	GenerationID string
	// ModelMessages is the model-ready prompt, committed summaries
	// included.
	ModelMessages []harness.ModelMessage
	// Model, Instructions, Tools and Generation are the step's resolved
	// settings. Generate receives the user's generation settings as
	// resolved (R-GEN-25); MessageMetadata sees them with A2's Gateway
	// defaults, as the default generator sends them (R-GEN-27).
	Model        harness.ModelSettings
	Instructions string
	Tools        []harness.ToolDefinition
	Generation   harness.GenerationSettings
}

// MetadataContext is what MessageMetadata receives for one chunk.
type MetadataContext struct {
	GenerateContext
	// Part is the chunk.
	Part protocol.UIMessageChunk
	// TotalUsage is the step's usage, on the finish chunk when the model
	// reported it (use it for final usage); nil on other chunks.
	TotalUsage *protocol.Usage
}

// readsTranscript reports whether a function of the agent's reads a
// model step's typed messages (ResolverContext.Messages, and
// GenerateContext's and CompactionContext's): a model, instructions,
// generation or compaction resolver, a custom generate or compaction
// policy, MessageMetadata. Only then does a step copy its model context
// (stepPrompt); without them its Messages are nil, which nothing reads.
func (a *Agent) readsTranscript() bool {
	o, h := &a.opts, &a.opts.Harness
	return o.Model.Resolves() || o.Instructions.Resolves() || h.GenerationFunc != nil || h.CompactionFunc != nil ||
		h.CustomCompaction != nil || h.Generate != nil || h.MessageMetadata != nil
}

// compacts reports whether the agent's sessions compact: under A2's own
// harness, and under a loop harness (Pi's), whose own compaction A2 could
// not record, by default; under a custom Generate only when compaction is
// configured explicitly (R-GEN-30).
func (h HarnessOptions) compacts() bool {
	return h.Generate == nil || h.Loop || h.Compaction != (protocol.CompactionOptions{}) || h.CustomCompaction != nil || h.CompactionFunc != nil
}

// Handler handles an application event at least once; event.ID is its
// idempotency key.
type Handler func(ctx context.Context, event protocol.Event) error

// AgentOptions define an agent: the Go form of agent({...}).
type AgentOptions struct {
	// Name builds the agent's own contract, or Contract is a shared one;
	// never both (R-CONTRACT-12).
	Name     string
	Contract *protocol.Contract
	// Events are server-only application events of a named agent.
	Events map[string]protocol.Schema
	// Model is the model ID or settings, or a resolver (R-GEN-10).
	Model harness.ModelOption
	// Models serves a resolved model ID.
	Models ModelProvider
	// Instructions are the system prompt, or a resolver (R-GEN-11).
	Instructions harness.InstructionsOption
	// MaxSteps caps the model steps of one response; 0 is no limit.
	MaxSteps int
	// Harness holds the default harness's options.
	Harness HarnessOptions
	// Progress batches model chunks into durable progress events.
	Progress protocol.ProgressOptions
	// ToolLane and ToolRecovery govern tool executions.
	ToolLane     string
	ToolRecovery map[string]string
	// Handlers are application event handlers.
	Handlers map[string]Handler
	// Tools the model may call; A2 executes them durably.
	Tools []tools.Tool
	// Store holds this agent's sessions; nil means the runtime's store (the
	// one given to New). Agents with their own stores may use the same
	// session IDs without sharing a log.
	Store persistence.Store
}

// Agent is a validated agent definition.
type Agent struct {
	opts     AgentOptions
	contract *protocol.Contract
	progress protocol.ProgressOptions
	// box is what the agent's tools decide, replaced whole by SetTools.
	box atomic.Pointer[toolbox]
}

// toolbox is an agent's tools and the policies they shape: the report
// tools (R-RECOVERY) of the step policy and of the work policy.
type toolbox struct {
	set    *tools.Set
	policy protocol.Policy
	work   protocol.WorkPolicy
	// defs are the tools as a model step offers them, and defsBytes their
	// JSON's size (the prompt's estimate counts it): made once per list,
	// not per step.
	defs      []harness.ToolDefinition
	defsBytes int64
}

// toolbox is the agent's current tools. A caller that reads it more than
// once in one decision (a step, a command) reads it once.
func (a *Agent) toolbox() *toolbox { return a.box.Load() }

// NewAgent validates the options (R-GEN-*, R-CONTRACT-*): a wrong option is
// a *protocol.ConfigError naming the option.
func NewAgent(o AgentOptions) (*Agent, error) {
	c, err := protocol.ResolveContract(o.Name, o.Contract, o.Events, nil)
	if err != nil {
		return nil, err
	}
	if err := o.Model.Validate(); err != nil {
		return nil, err
	}
	if o.Models == nil && o.Harness.Generate == nil {
		return nil, &protocol.ConfigError{Option: "models", Message: "a model provider is required to serve the model (or harness.generate to replace the model step)"}
	}
	if o.Models == nil && o.Harness.Compaction != (protocol.CompactionOptions{}) && !o.Harness.Compaction.Disabled {
		return nil, &protocol.ConfigError{Option: "harness.compaction", Message: "automatic compaction sends its summary request to the model through models; set models, or use a custom compaction"}
	}
	policy := protocol.Policy{MaxSteps: o.MaxSteps}
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	if err := o.Harness.Generation.Validate(); err != nil {
		return nil, err
	}
	if o.Harness.CompactionFunc != nil && (o.Harness.Compaction != (protocol.CompactionOptions{}) || o.Harness.CustomCompaction != nil) {
		return nil, &protocol.ConfigError{Option: "harness.compaction", Message: "a compaction resolver replaces static compaction options; set one or the other"}
	}
	if err := (CompactionChoice{Options: o.Harness.Compaction, Custom: o.Harness.CustomCompaction}).validate(o.Harness.Generation); err != nil {
		return nil, err
	}
	if err := o.Progress.Validate(); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(o.Handlers))
	for n := range o.Handlers {
		names = append(names, n)
	}
	// The contract records the events the handlers owe runs for
	// (R-CONTRACT-15).
	if c, err = c.WithHandlers(names); err != nil {
		return nil, err
	}
	if o.Harness.Loop {
		if o.Harness.Generate == nil {
			return nil, &protocol.ConfigError{Option: "harness.loop", Message: "is set without harness.generate, the loop that runs the steps"}
		}
		for i, t := range o.Tools {
			if t.NeedsApproval != nil {
				return nil, &protocol.ConfigError{Option: fmt.Sprintf("tools[%d].needsApproval", i),
					Message: fmt.Sprintf("tool %q asks for approval, but a harness that runs its own loop runs its tools without approval: remove NeedsApproval or use the default harness", t.Name)}
			}
		}
	}
	if strings.ContainsAny(o.ToolLane, " \t\n") {
		return nil, &protocol.ConfigError{Option: "toolLane", Message: "must be a name without spaces"}
	}
	a := &Agent{opts: o, contract: c, progress: o.Progress.WithDefaults()}
	box, err := a.newToolbox(policy, o.Tools, true)
	if err != nil {
		return nil, err
	}
	a.box.Store(box)
	return a, nil
}

// newToolbox validates a list of tools with the agent's recovery options;
// strict (at NewAgent) refuses a ToolRecovery entry for a tool the list
// does not have, which a later list (SetTools) may well not.
func (a *Agent) newToolbox(policy protocol.Policy, list []tools.Tool, strict bool) (*toolbox, error) {
	o := a.opts
	set, err := tools.NewSet(list...)
	if err != nil {
		return nil, err
	}
	recovery := map[string]string{}
	for _, t := range list {
		if t.Recovery != "" {
			recovery[t.Name] = t.Recovery
		}
	}
	for k, v := range o.ToolRecovery {
		if _, ok := set.Get(k); ok || strict {
			recovery[k] = v
		}
	}
	report, err := protocol.ValidateToolRecovery(recovery, set.Info())
	if err != nil {
		return nil, err
	}
	policy.ReportTools = report
	var defs []harness.ToolDefinition
	for _, name := range set.Names() {
		t, _ := set.Get(name)
		defs = append(defs, harness.ToolDefinition{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	defsJSON, _ := json.Marshal(defs) // schemas NewSet parsed: they serialize
	return &toolbox{set: set, policy: policy, defs: defs, defsBytes: int64(len(defsJSON)),
		work: protocol.WorkPolicy{ToolLane: o.ToolLane, ReportTools: report,
			// Model limits serve automatic compaction only, which a custom
			// generate runs only when configured (R-GEN-30, R-META-07).
			NoMetadata: !o.Harness.Compaction.Discovery() || o.Harness.CustomCompaction != nil || !o.Harness.compacts()},
	}, nil
}

// SetTools replaces the agent's tools, as when an MCP server says its list
// changed. Model steps that start afterwards offer the new list; a step
// running keeps the list it started with; a call of a tool that is no
// longer listed fails as a tool error, which the model sees. The list is
// validated as AgentOptions.Tools is (with AgentOptions.ToolRecovery for
// the tools it names); on an error the agent keeps its tools.
func (a *Agent) SetTools(list []tools.Tool) error {
	old := a.toolbox()
	box, err := a.newToolbox(protocol.Policy{MaxSteps: old.policy.MaxSteps}, list, false)
	if err != nil {
		return err
	}
	a.box.Store(box)
	return nil
}

// ToolNames lists the agent's current tools, sorted.
func (a *Agent) ToolNames() []string { return a.toolbox().set.Names() }

// Name is the agent's (contract's) name.
func (a *Agent) Name() string { return a.contract.Name() }

// Contract is the agent's contract.
func (a *Agent) Contract() *protocol.Contract { return a.contract }

func (a *Agent) String() string { return fmt.Sprintf("agent %q", a.Name()) }
