// Package providers chooses the model providers the environment configures,
// as the node does: AI_GATEWAY_API_KEY (the AI Gateway's OpenAI-compatible
// endpoint), OPENAI_API_KEY / OPENAI_BASE_URL (OpenAI or any compatible
// server), ANTHROPIC_API_KEY, else the offline demo model; a script (test
// mode) replaces them all. A Set routes a model ID to the provider that
// serves it: an agent's Models option is a Set's For.
package providers

import (
	"fmt"
	"strings"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/anthropic"
	"github.com/a2-runtime/a2/harness/demo"
	"github.com/a2-runtime/a2/harness/openai"
	"github.com/a2-runtime/a2/harness/script"
)

// demoName describes the demo model.
const demoName = "the offline demo model; set AI_GATEWAY_API_KEY, OPENAI_API_KEY or ANTHROPIC_API_KEY for a real one"

// Default model IDs of each provider, used when --model (A2_MODEL) is not
// given.
const (
	DefaultGatewayModel   = "openai/gpt-4o-mini"
	DefaultOpenAIModel    = "gpt-4o-mini"
	DefaultAnthropicModel = "claude-3-5-haiku-latest"
	ScriptModelID         = "script"
)

// Set holds the model providers the environment configures, and routes a
// model ID to one of them (For). The demo model is always there: it is the
// default when no provider key is set.
type Set struct {
	demo      *demo.Model
	script    *script.Model // test mode (--script)
	gateway   *openai.Model // AI_GATEWAY_API_KEY
	openai    *openai.Model // OPENAI_API_KEY or OPENAI_BASE_URL
	anthropic *anthropic.Model
	// model is the agent's model ID and name says which provider serves it
	// by default, for the banner.
	model string
	name  string
}

// FromEnv reads the provider keys from the environment:
// AI_GATEWAY_API_KEY (the AI Gateway's OpenAI-compatible endpoint),
// OPENAI_API_KEY and OPENAI_BASE_URL (OpenAI or any compatible server, a
// local one needs no key), ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL. The
// agent's model is model when given ("demo" forces the demo model), else
// the default of the first configured provider in that order, else the
// demo model. A script (test mode) replaces them all.
func FromEnv(getenv func(string) string, model string, sc *script.Script, wordDelay time.Duration) *Set {
	p := &Set{demo: demo.New(wordDelay)}
	if sc != nil {
		p.script = script.New(sc).StopRecording()
		p.model, p.name = ScriptModelID, "the script model, test mode"
		if model != "" {
			p.model = model
		}
		return p
	}
	if getenv("AI_GATEWAY_API_KEY") != "" {
		p.gateway = openai.New(openai.GatewayEnvOptions(getenv))
	}
	if o := openai.EnvOptions(getenv); o.APIKey != "" || o.BaseURL != "" {
		p.openai = openai.New(o)
	}
	if o := anthropic.EnvOptions(getenv); o.APIKey != "" {
		p.anthropic = anthropic.New(o)
	}
	switch {
	case p.gateway != nil:
		p.model, p.name = DefaultGatewayModel, "through the AI Gateway"
	case p.openai != nil:
		p.model, p.name = DefaultOpenAIModel, "served by an OpenAI-compatible provider"
	case p.anthropic != nil:
		p.model, p.name = DefaultAnthropicModel, "served by Anthropic"
	default:
		p.model, p.name = demo.ModelID, demoName
	}
	if model != "" && model != p.model {
		p.model = model
		p.name = p.NameFor(model)
	}
	return p
}

// Model is the agent's model ID: the one given, else the default of the
// first configured provider, else the demo model's.
func (p *Set) Model() string { return p.model }

// Name says which provider serves Model, for a banner.
func (p *Set) Name() string { return p.name }

// Script is the script model in test mode, else nil.
func (p *Set) Script() *script.Model { return p.script }

// Real reports whether the agent's model is served by a provider with a
// network API (the node then looks model limits up in the catalog).
func (p *Set) Real() bool {
	return p.script == nil && p.model != demo.ModelID && (p.gateway != nil || p.openai != nil || p.anthropic != nil)
}

// NameFor names the provider that serves a model ID.
func (p *Set) NameFor(modelID string) string {
	switch p.Route(modelID) {
	case "":
		return "no provider configured for it"
	case "demo":
		return demoName
	case "script":
		return "the script model, test mode"
	case "gateway":
		return "through the AI Gateway"
	case "anthropic":
		return "served by Anthropic"
	}
	return "served by an OpenAI-compatible provider"
}

// For returns the model serving a model ID (an agent's
// actors.ModelProvider, called for every model step):
//   - "demo" is the demo model; in test mode every ID is the script;
//   - a Gateway-style ID ("provider/model") goes to the AI Gateway when it
//     is configured;
//   - a Claude model ("claude-…", "anthropic/…") goes to Anthropic when it
//     is configured;
//   - any other ID goes to the OpenAI-compatible provider, then the
//     Gateway, then Anthropic, whichever is configured first.
func (p *Set) For(modelID string) (harness.Model, error) {
	switch {
	case modelID == demo.ModelID:
		return p.demo, nil
	case p.script != nil:
		return p.script, nil
	case p.gateway != nil && strings.Contains(modelID, "/"):
		return p.gateway, nil
	case p.anthropic != nil && (strings.HasPrefix(modelID, "claude") || strings.HasPrefix(modelID, "anthropic/")):
		return p.anthropic, nil
	case p.openai != nil:
		return p.openai, nil
	case p.gateway != nil:
		return p.gateway, nil
	case p.anthropic != nil:
		return p.anthropic, nil
	}
	return nil, fmt.Errorf("no provider serves model %q: set AI_GATEWAY_API_KEY, OPENAI_API_KEY (or OPENAI_BASE_URL) or ANTHROPIC_API_KEY, or use --model demo", modelID)
}

// Route names the provider a model ID goes to: demo, script, gateway,
// openai or anthropic; "" when none serves it.
func (p *Set) Route(modelID string) string {
	m, err := p.For(modelID)
	switch {
	case err != nil:
		return ""
	case m == harness.Model(p.demo):
		return "demo"
	case p.script != nil && m == harness.Model(p.script):
		return "script"
	case p.gateway != nil && m == harness.Model(p.gateway):
		return "gateway"
	case p.anthropic != nil && m == harness.Model(p.anthropic):
		return "anthropic"
	}
	return "openai"
}
