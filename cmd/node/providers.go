package main

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

// demoName describes the demo model in the banner.
const demoName = "the offline demo model; set AI_GATEWAY_API_KEY, OPENAI_API_KEY or ANTHROPIC_API_KEY for a real one"

// Default model IDs of each provider, used when --model (A2_MODEL) is not
// given.
const (
	defaultGatewayModel   = "openai/gpt-4o-mini"
	defaultOpenAIModel    = "gpt-4o-mini"
	defaultAnthropicModel = "claude-3-5-haiku-latest"
	scriptModelID         = "script"
)

// providers holds the model providers the environment configures, and
// routes a model ID to one of them (providerFor). The demo model is always
// there: it is the default when no provider key is set.
type providers struct {
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

// selectProviders reads the provider keys from the environment:
// AI_GATEWAY_API_KEY (the AI Gateway's OpenAI-compatible endpoint),
// OPENAI_API_KEY and OPENAI_BASE_URL (OpenAI or any compatible server, a
// local one needs no key), ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL. The
// agent's model is model when given ("demo" forces the demo model), else
// the default of the first configured provider in that order, else the
// demo model. A script (test mode) replaces them all.
func selectProviders(getenv func(string) string, model string, sc *script.Script, wordDelay time.Duration) providers {
	p := providers{demo: demo.New(wordDelay)}
	if sc != nil {
		p.script = script.New(sc)
		p.model, p.name = scriptModelID, "the script model, test mode"
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
		p.model, p.name = defaultGatewayModel, "through the AI Gateway"
	case p.openai != nil:
		p.model, p.name = defaultOpenAIModel, "served by an OpenAI-compatible provider"
	case p.anthropic != nil:
		p.model, p.name = defaultAnthropicModel, "served by Anthropic"
	default:
		p.model, p.name = demo.ModelID, demoName
	}
	if model != "" && model != p.model {
		p.model = model
		p.name = p.nameFor(model)
	}
	return p
}

// real reports whether the agent's model is served by a provider with a
// network API (the node then looks model limits up in the catalog).
func (p providers) real() bool {
	return p.script == nil && p.model != demo.ModelID && (p.gateway != nil || p.openai != nil || p.anthropic != nil)
}

// nameFor names the provider that serves a model ID.
func (p providers) nameFor(modelID string) string {
	m, err := p.providerFor(modelID)
	switch {
	case err != nil:
		return "no provider configured for it"
	case m == harness.Model(p.demo):
		return demoName
	case p.script != nil && m == harness.Model(p.script):
		return "the script model, test mode"
	case p.gateway != nil && m == harness.Model(p.gateway):
		return "through the AI Gateway"
	case p.anthropic != nil && m == harness.Model(p.anthropic):
		return "served by Anthropic"
	}
	return "served by an OpenAI-compatible provider"
}

// providerFor returns the model serving a model ID (the agent's
// actors.ModelProvider, called for every model step):
//   - "demo" is the demo model; in test mode every ID is the script;
//   - a Gateway-style ID ("provider/model") goes to the AI Gateway when it
//     is configured;
//   - a Claude model ("claude-…", "anthropic/…") goes to Anthropic when it
//     is configured;
//   - any other ID goes to the OpenAI-compatible provider, then the
//     Gateway, then Anthropic, whichever is configured first.
func (p providers) providerFor(modelID string) (harness.Model, error) {
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
