// Package tools defines tools an agent can call: a name, a description, a
// JSON Schema for the input (validated before the tool runs), an Execute
// function and an optional approval predicate. Inside Execute, the handler
// context of the execution is available from the context.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools/sandbox"
)

// Tool is a tool definition.
type Tool struct {
	// Name is how the model calls the tool.
	Name string
	// Description tells the model what the tool does.
	Description string
	// InputSchema is the JSON Schema of the input (default: any object).
	InputSchema json.RawMessage
	// Execute runs the tool. It receives the validated input and returns
	// the output (any JSON value) or an error, which the model sees as the
	// tool's error result. ctx carries the abort signal and the handler
	// context (FromContext). A panic is an error too ("the tool panicked:
	// <value>", its stack in the node's log); the node goes on. An attempt
	// whose context ended before it started (its session stopped, or a newer
	// attempt replaced it) is not started at all.
	Execute func(ctx context.Context, input json.RawMessage) (json.RawMessage, error)
	// NeedsApproval, when set, asks the user before the call runs. It is
	// re-evaluated on recovery for the same call, so keep it deterministic
	// over the input (R-APPROVAL-09).
	NeedsApproval func(input json.RawMessage) bool
	// Recovery is "rerun" (default) or "report" (R-TOOL-12).
	Recovery string
}

// Set is a validated set of tools.
type Set struct {
	tools   map[string]*compiled
	ordered []string
}

type compiled struct {
	Tool
	schema *jsonschema.Schema
}

// NewSet validates the tools: unique non-empty names, compilable schemas,
// an Execute function.
func NewSet(list ...Tool) (*Set, error) {
	s := &Set{tools: map[string]*compiled{}}
	for i, t := range list {
		opt := fmt.Sprintf("tools[%d]", i)
		if strings.TrimSpace(t.Name) == "" {
			return nil, &protocol.ConfigError{Option: opt + ".name", Message: "is required"}
		}
		if _, dup := s.tools[t.Name]; dup {
			return nil, &protocol.ConfigError{Option: opt + ".name", Message: fmt.Sprintf("%q is defined twice", t.Name)}
		}
		if t.Execute == nil {
			return nil, &protocol.ConfigError{Option: opt + ".execute", Message: fmt.Sprintf("tool %q has no Execute", t.Name)}
		}
		if t.Recovery != "" && t.Recovery != protocol.RecoveryRerun && t.Recovery != protocol.RecoveryReport {
			return nil, &protocol.ConfigError{Option: opt + ".recovery", Message: fmt.Sprintf("must be %q or %q", protocol.RecoveryRerun, protocol.RecoveryReport)}
		}
		if len(t.InputSchema) == 0 {
			t.InputSchema = json.RawMessage(`{"type":"object"}`)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.InputSchema))
		if err != nil {
			return nil, &protocol.ConfigError{Option: opt + ".inputSchema", Message: fmt.Sprintf("is not JSON: %v", err)}
		}
		c := jsonschema.NewCompiler()
		url := "mem://tools/" + t.Name + ".json"
		if err := c.AddResource(url, doc); err != nil {
			return nil, &protocol.ConfigError{Option: opt + ".inputSchema", Message: err.Error()}
		}
		sch, err := c.Compile(url)
		if err != nil {
			return nil, &protocol.ConfigError{Option: opt + ".inputSchema", Message: fmt.Sprintf("does not compile: %v", err)}
		}
		s.tools[t.Name] = &compiled{Tool: t, schema: sch}
		s.ordered = append(s.ordered, t.Name)
	}
	return s, nil
}

// Names lists the tools in definition order.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s.ordered...)
}

// Get returns a tool.
func (s *Set) Get(name string) (*Tool, bool) {
	if s == nil {
		return nil, false
	}
	c, ok := s.tools[name]
	if !ok {
		return nil, false
	}
	return &c.Tool, true
}

// Info describes the tools for toolRecovery validation.
func (s *Set) Info() []protocol.ToolInfo {
	var out []protocol.ToolInfo
	for _, n := range s.Names() {
		out = append(out, protocol.ToolInfo{Name: n, Local: true})
	}
	return out
}

// ErrInvalidInput is wrapped by the error Validate returns for input the
// schema rejects; the model sees it as the tool's error result and the tool
// does not run.
var ErrInvalidInput = errors.New("tools: invalid input")

// Validate checks a call's input against the tool's schema.
func (s *Set) Validate(name string, input json.RawMessage) error {
	c, ok := s.tools[name]
	if !ok {
		return fmt.Errorf("%w: no tool named %q", ErrInvalidInput, name)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return fmt.Errorf("%w: the input is not JSON: %v", ErrInvalidInput, err)
	}
	if err := c.schema.Validate(v); err != nil {
		return fmt.Errorf("%w for tool %q: %v", ErrInvalidInput, name, err)
	}
	return nil
}

// Context is the handler context of one tool execution attempt
// (R-TOOL-20): the work event, the attempt and the session. It is built per
// attempt and never persisted (R-TOOL-25).
type Context struct {
	// Event is the ai.tool.execution.requested work event (R-TOOL-23).
	Event protocol.Event
	// Call is its decoded payload: the call, its generation, the turn and
	// the execution version.
	Call protocol.ToolExecutionRequested
	// Attempt counts from 1.
	Attempt int
	// Session is the session's ID.
	Session string
	// Contract is the executing agent's contract: its application events
	// and state (ContextFor checks a tool's expectation against it).
	Contract *protocol.Contract
	// Append appends trusted events to the session (server append).
	Append func(ctx context.Context, events ...protocol.Event) ([]protocol.Event, error)
	// Preliminary streams a non-final output of this attempt: it is
	// appended at once as ai.tool.output.preliminary and shown on the tool
	// part until the final result (R-TOOL-07). Nil outside the runtime.
	Preliminary func(output json.RawMessage)
	// RequestInput asks the user for application input during this call
	// and waits for the answer (R-APPROVAL-02, R-APPROVAL-03): it appends a
	// trusted request-input for the call's step (pendingInputs[inputID],
	// status awaiting-input) and returns the value of the answer that was
	// applied. The request is idempotent per call, version and inputID, so
	// a retried attempt asks once and finds an earlier answer in the log.
	// It fails when the request is rejected (the turn moved on) and returns
	// ctx's error when the call is cancelled (Stop, Pause now). Nil outside
	// the runtime.
	RequestInput func(ctx context.Context, inputID string, request json.RawMessage) (json.RawMessage, error)
	// State reads the session at the call's boundary: the contract's state
	// folded over the log up to and including the call's work event, with
	// that index. Every attempt reads the same boundary, a recovered one
	// included, whatever was appended since (R-CONTRACT-20). Nil outside
	// the runtime.
	State func(ctx context.Context) (*protocol.SessionState, uint64, error)
	// Sandbox is the session's sandbox, resolved for this attempt when the
	// agent's harness has a sandbox resolver (HarnessOptions.Sandbox: Pi's),
	// for its tools and the agent's alike (the reference's
	// experimental_sandbox, R-HARNESS-23); nil otherwise.
	Sandbox sandbox.Sandbox
}

type ctxKey struct{}

// WithContext returns ctx carrying the handler context (the test seam of
// runWithHandlerContext, R-TOOL-27).
func WithContext(ctx context.Context, hc *Context) context.Context {
	return context.WithValue(ctx, ctxKey{}, hc)
}

// ErrNoHandlerContext is returned by FromContext outside a tool execution
// (R-TOOL-21).
var ErrNoHandlerContext = errors.New("tools: no handler context: call it inside a tool's Execute")

// FromContext returns the handler context of the running execution.
func FromContext(ctx context.Context) (*Context, error) {
	hc, ok := ctx.Value(ctxKey{}).(*Context)
	if !ok || hc == nil {
		return nil, ErrNoHandlerContext
	}
	return hc, nil
}

// ErrContractMismatch is returned by ContextFor when the tool runs for an
// agent of another contract (R-TOOL-22).
var ErrContractMismatch = errors.New("tools: the handler context belongs to an agent of another contract")

// ContextFor returns the handler context of the running execution for a
// tool written against contract (the shared value given to the agents that
// use the tool): the Go counterpart of handlerContext(contract), whose
// application events and state are contract's (R-TOOL-22). It fails with
// ErrNoHandlerContext outside a tool execution, and with
// ErrContractMismatch, naming both contracts, when the executing agent has
// another contract: a tool meant for one agent's events must not append
// them to another's log.
func ContextFor(ctx context.Context, contract *protocol.Contract) (*Context, error) {
	hc, err := FromContext(ctx)
	if err != nil {
		return nil, err
	}
	if !hc.Contract.Is(contract) {
		have, want := "none", "none"
		if hc.Contract != nil {
			have = fmt.Sprintf("%q (reducer %s)", hc.Contract.Name(), hc.Contract.ReducerName())
		}
		if contract != nil {
			want = fmt.Sprintf("%q (reducer %s)", contract.Name(), contract.ReducerName())
		}
		return nil, fmt.Errorf("%w: the tool expects contract %s, the executing agent has %s", ErrContractMismatch, want, have)
	}
	return hc, nil
}
