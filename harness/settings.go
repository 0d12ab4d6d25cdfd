// Package harness is the agent loop of one generation: model settings and
// their resolution, prompt assembly, compaction and the Model interface.
// This file holds the model and generation settings, pure values and
// functions that the generation lane applies before each model step.
package harness

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/a2-runtime/a2/protocol"
)

// ReasoningLevels lists every reasoning level, in order, for pickers
// (R-GEN-23).
var ReasoningLevels = []string{"provider-default", "none", "minimal", "low", "medium", "high", "xhigh"}

// Speeds of ModelSettings.Speed.
const (
	SpeedFast     = "fast"
	SpeedStandard = "standard"
)

// ModelSettings is a model with its reasoning level and speed (R-GEN-21):
// Model is an AI Gateway model ID such as "openai/gpt-5-mini".
type ModelSettings struct {
	Model     string `json:"model"`
	Reasoning string `json:"reasoning,omitempty"`
	Speed     string `json:"speed,omitempty"`
}

// Validate checks the settings.
func (m ModelSettings) Validate() error {
	if strings.TrimSpace(m.Model) == "" {
		return &protocol.ConfigError{Option: "model", Message: "is required"}
	}
	if m.Reasoning != "" && !contains(ReasoningLevels, m.Reasoning) {
		return &protocol.ConfigError{Option: "model.reasoning", Message: fmt.Sprintf("must be one of %s, not %q", strings.Join(ReasoningLevels, ", "), m.Reasoning)}
	}
	if m.Speed != "" && m.Speed != SpeedFast && m.Speed != SpeedStandard {
		return &protocol.ConfigError{Option: "model.speed", Message: fmt.Sprintf("must be %q or %q, not %q", SpeedFast, SpeedStandard, m.Speed)}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// ResolverContext is what model, instructions and generation resolvers
// receive (R-GEN-12): the triggering request event, the prompt messages
// (already compacted), the application state at the captured snapshot, and
// a reader of the session. It exposes no raw history and no execution
// argument (R-GEN-14); the abort signal is the context passed beside it.
type ResolverContext struct {
	Event protocol.Event
	// Messages are the step's typed model context, copied when the step
	// starts for an agent with a function that reads them (nil otherwise).
	// They are read-only: their parts are shared with the session's state
	// (protocol.StepMessages), which a change would corrupt.
	Messages []protocol.TranscriptMessage
	State    any
	Session  SessionReader
}

// SessionReader reads a session's state at the captured prompt frontier.
type SessionReader interface {
	// State returns AIState with its log index.
	State(ctx context.Context) (*protocol.AIState, uint64, error)
	// Reducer reads the session through any reducer, the contract's or
	// another (R-CONTRACT-19): r's state folded over the log up to the
	// frontier, or up to through when it is not 0, with that index.
	Reducer(ctx context.Context, r protocol.AppReducer, through uint64) (any, uint64, error)
}

// ModelOption is the agent's model: a value or a per-generation resolver
// (R-GEN-10). Build it with ModelID, ModelWith or ModelFunc.
type ModelOption struct {
	static  *ModelSettings
	resolve func(context.Context, ResolverContext) (ModelSettings, error)
}

// ModelID is a model option of a model ID.
func ModelID(id string) ModelOption { return ModelOption{static: &ModelSettings{Model: id}} }

// ModelWith is a model option of full settings.
func ModelWith(s ModelSettings) ModelOption { return ModelOption{static: &s} }

// ModelFunc is a model option resolved per model step (R-GEN-15).
func ModelFunc(f func(context.Context, ResolverContext) (ModelSettings, error)) ModelOption {
	return ModelOption{resolve: f}
}

// IsZero reports whether o names no model (neither an ID nor a resolver).
func (o ModelOption) IsZero() bool { return o.static == nil && o.resolve == nil }

// Resolves reports whether o is a resolver, which reads the step's
// ResolverContext.
func (o ModelOption) Resolves() bool { return o.resolve != nil }

// Validate checks a static model at construction (R-GEN-20).
func (o ModelOption) Validate() error {
	switch {
	case o.static != nil:
		return o.static.Validate()
	case o.resolve == nil:
		return &protocol.ConfigError{Option: "model", Message: "is required"}
	}
	return nil
}

// Resolve returns the model for one step. A resolver's error or invalid
// value fails the turn once, like a provider error (R-GEN-16): the caller
// records it as the generation's failure and does not retry.
func (o ModelOption) Resolve(ctx context.Context, rc ResolverContext) (ModelSettings, error) {
	if o.static != nil {
		return *o.static, nil
	}
	if o.resolve == nil {
		return ModelSettings{}, &protocol.ConfigError{Option: "model", Message: "is required"}
	}
	m, err := o.resolve(ctx, rc)
	if err != nil {
		return ModelSettings{}, err
	}
	if err := m.Validate(); err != nil {
		return ModelSettings{}, fmt.Errorf("the model resolver returned an invalid value: %w", err)
	}
	return m, nil
}

// InstructionsOption is the agent's instructions: a value or a
// per-generation resolver (R-GEN-11).
type InstructionsOption struct {
	static  string
	resolve func(context.Context, ResolverContext) (string, error)
}

// Instructions is a static instructions option.
func Instructions(s string) InstructionsOption { return InstructionsOption{static: s} }

// InstructionsFunc resolves the instructions per model step.
func InstructionsFunc(f func(context.Context, ResolverContext) (string, error)) InstructionsOption {
	return InstructionsOption{resolve: f}
}

// Resolves reports whether o is a resolver, which reads the step's
// ResolverContext.
func (o InstructionsOption) Resolves() bool { return o.resolve != nil }

// Resolve returns the instructions of one step.
func (o InstructionsOption) Resolve(ctx context.Context, rc ResolverContext) (string, error) {
	if o.resolve != nil {
		return o.resolve(ctx, rc)
	}
	return o.static, nil
}

// GenerationSettings are the per-step settings of harness.generation
// (R-GEN-18): sampling settings, provider options and headers, plus Extra
// settings passed to the model untouched. They exclude stopWhen, tool
// execution callbacks, tool callers, sandbox execution and the tool approval
// secret; Validate refuses those names in Extra.
type GenerationSettings struct {
	Temperature     *float64 `json:"temperature,omitempty"`
	TopP            *float64 `json:"topP,omitempty"`
	TopK            *int64   `json:"topK,omitempty"`
	MaxOutputTokens *int64   `json:"maxOutputTokens,omitempty"`
	Seed            *int64   `json:"seed,omitempty"`
	StopSequences   []string `json:"stopSequences,omitempty"`
	Reasoning       string   `json:"reasoning,omitempty"`
	// ProviderOptions are keyed by provider, then option.
	ProviderOptions map[string]map[string]json.RawMessage `json:"providerOptions,omitempty"`
	// Headers are extra request headers; a nil value suppresses a header A2
	// would send (for example x-session-affinity).
	Headers map[string]*string `json:"headers,omitempty"`
	// Extra holds every other setting, passed through untouched (toolsContext
	// among them).
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
	// ToolApproval is the generation's tool approval policy (R-APPROVAL-10):
	// when it returns true for a local call, the call waits for the user's
	// approval as if the tool's own NeedsApproval had asked. A Generation
	// resolver returns it per step, so a resolver governs approvals too. It
	// is evaluated once per durable call and again on recovery, so it must
	// be deterministic over its arguments (R-APPROVAL-09). It is never sent
	// to a provider.
	ToolApproval func(toolName string, input json.RawMessage) bool `json:"-"`
}

// excludedSettings are the settings harness.generation never takes
// (R-GEN-18, R-APPROVAL-13).
var excludedSettings = []string{"stopWhen", "onStepFinish", "onFinish", "experimental_toolCallRepair",
	"toolExecution", "toolCallers", "sandbox", "experimental_sandbox", "toolApprovalSecret", "approvalSecret"}

// Validate checks settings, statically at construction and after a
// resolver returned them (R-GEN-20).
func (g GenerationSettings) Validate() error {
	bad := func(opt, msg string) error {
		return &protocol.ConfigError{Option: "harness.generation." + opt, Message: msg}
	}
	if g.MaxOutputTokens != nil && *g.MaxOutputTokens <= 0 {
		return bad("maxOutputTokens", "must be a positive integer")
	}
	if g.Temperature != nil && *g.Temperature < 0 {
		return bad("temperature", "must not be negative")
	}
	if g.TopP != nil && (*g.TopP < 0 || *g.TopP > 1) {
		return bad("topP", "must be between 0 and 1")
	}
	if g.Reasoning != "" && !contains(ReasoningLevels, g.Reasoning) {
		return bad("reasoning", fmt.Sprintf("must be one of %s", strings.Join(ReasoningLevels, ", ")))
	}
	keys := make([]string, 0, len(g.Extra))
	for k := range g.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if contains(excludedSettings, k) {
			return bad(k, "is not a generation setting: A2 owns the tool loop, tool execution and approvals")
		}
	}
	return nil
}

// Clone returns a deep copy of the settings.
func (g GenerationSettings) Clone() GenerationSettings {
	c := g
	c.StopSequences = append([]string(nil), g.StopSequences...)
	if g.ProviderOptions != nil {
		c.ProviderOptions = map[string]map[string]json.RawMessage{}
		for p, opts := range g.ProviderOptions {
			m := map[string]json.RawMessage{}
			for k, v := range opts {
				m[k] = v
			}
			c.ProviderOptions[p] = m
		}
	}
	if g.Headers != nil {
		c.Headers = map[string]*string{}
		for k, v := range g.Headers {
			c.Headers[k] = v
		}
	}
	if g.Extra != nil {
		c.Extra = map[string]json.RawMessage{}
		for k, v := range g.Extra {
			c.Extra[k] = v
		}
	}
	return c
}

func (g *GenerationSettings) setOption(provider, key string, value json.RawMessage) {
	if g.ProviderOptions == nil {
		g.ProviderOptions = map[string]map[string]json.RawMessage{}
	}
	if g.ProviderOptions[provider] == nil {
		g.ProviderOptions[provider] = map[string]json.RawMessage{}
	}
	g.ProviderOptions[provider][key] = value
}

// WithModelSettings applies a model's reasoning and speed over the
// generation settings, overriding the same settings there (R-GEN-21):
// speed "fast" sets providerOptions.gateway.speed, "standard" removes a
// configured speed. g is not modified.
func WithModelSettings(g GenerationSettings, m ModelSettings) GenerationSettings {
	c := g.Clone()
	if m.Reasoning != "" {
		c.Reasoning = m.Reasoning
	}
	switch m.Speed {
	case SpeedFast:
		c.setOption("gateway", "speed", json.RawMessage(`"fast"`))
	case SpeedStandard:
		if c.ProviderOptions != nil && c.ProviderOptions["gateway"] != nil {
			delete(c.ProviderOptions["gateway"], "speed")
		}
	}
	return c
}

// SessionAffinityHeader is the header that lets providers reuse a cache
// across a session's requests (R-GEN-26).
const SessionAffinityHeader = "x-session-affinity"

// SessionAffinity is the session's stable affinity value: derived from the
// session ID without revealing it.
func SessionAffinity(sessionID string) string {
	sum := sha256.Sum256([]byte("a2.session-affinity\x00" + sessionID))
	return "a2-" + base64.RawURLEncoding.EncodeToString(sum[:16])
}

// WithGatewayDefaults returns the settings of a Gateway model call
// (R-GEN-24, R-GEN-26): caching "auto" merged into
// providerOptions.gateway unless the application set its own (other options
// kept), and the session's x-session-affinity header unless the
// application's headers name it in any casing (a nil value suppresses it).
// g is not modified: a custom generate receives the original settings
// (R-GEN-25).
func WithGatewayDefaults(g GenerationSettings, sessionID string) GenerationSettings {
	c := g.Clone()
	if _, set := c.ProviderOptions["gateway"]["caching"]; !set {
		c.setOption("gateway", "caching", json.RawMessage(`"auto"`))
	}
	for k := range c.Headers {
		if strings.EqualFold(k, SessionAffinityHeader) {
			return c
		}
	}
	if c.Headers == nil {
		c.Headers = map[string]*string{}
	}
	v := SessionAffinity(sessionID)
	c.Headers[SessionAffinityHeader] = &v
	return c
}

// RequestHeaders returns the headers to send: model headers first, then the
// generation headers, whose values win; nil values remove the header. A2's
// per-call defaults are in the generation headers, so setting
// x-session-affinity on the model has no effect (R-GEN-26).
func RequestHeaders(model map[string]string, g GenerationSettings) map[string]string {
	out := map[string]string{}
	for k, v := range model {
		out[strings.ToLower(k)] = v
	}
	for k, v := range g.Headers {
		if v == nil {
			delete(out, strings.ToLower(k))
			continue
		}
		out[strings.ToLower(k)] = *v
	}
	return out
}

// ImplicitCompactionSkip names why these settings skip implicit automatic
// compaction, or "" (R-COMPACT-17): structured output (Extra "output" or
// "experimental_output") and a forced tool choice (Extra "toolChoice" of
// "required" or a specific tool) need a prompt the summary request would
// not honour.
func (g GenerationSettings) ImplicitCompactionSkip() string {
	for _, k := range []string{"output", "experimental_output"} {
		if v, ok := g.Extra[k]; ok && string(v) != "null" {
			return "structured output (" + k + ")"
		}
	}
	raw, ok := g.Extra["toolChoice"]
	if !ok {
		return ""
	}
	var choice string
	if json.Unmarshal(raw, &choice) == nil {
		if choice == "required" {
			return `a forced tool choice ("required")`
		}
		return ""
	}
	var obj struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Type == "tool" {
		return "a forced tool choice (a specific tool)"
	}
	return ""
}
