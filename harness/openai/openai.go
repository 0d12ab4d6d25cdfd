// Package openai is the model provider for OpenAI-compatible chat
// completions: api.openai.com, the AI Gateway's OpenAI-compatible endpoint
// and local or self-hosted servers (Ollama, vLLM, llama.cpp, LM Studio,
// OpenRouter, ...). It speaks plain JSON and server-sent events over
// net/http and turns the streamed chat completion chunks into AI SDK UI
// message stream chunks. See docs/providers.md for the mappings.
package openai

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/internal/provider"
)

// Base URLs.
const (
	// DefaultBaseURL is OpenAI's API.
	DefaultBaseURL = "https://api.openai.com/v1"
	// GatewayBaseURL is the AI Gateway's OpenAI-compatible endpoint.
	GatewayBaseURL = "https://ai-gateway.vercel.sh/v1"
)

// gatewayHost is the host of the AI Gateway.
const gatewayHost = "ai-gateway.vercel.sh"

// Options configure a provider.
type Options struct {
	// BaseURL is the API base, without /chat/completions
	// (DefaultBaseURL when empty). Ollama: http://localhost:11434/v1.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <key>" when not empty
	// (local servers usually need none).
	APIKey string
	// HTTPClient sends the requests (http.DefaultClient when nil). Leave
	// its Timeout zero: a stream lasts as long as the model writes; the
	// request's context bounds it.
	HTTPClient *http.Client
	// Headers are sent with every request, before the request's own
	// headers, which win.
	Headers map[string]string
	// ProviderOptionsKey is the key of GenerationSettings.ProviderOptions
	// whose entries are merged into the request body ("openai" when
	// empty).
	ProviderOptionsKey string
	// Gateway marks BaseURL as the AI Gateway even when its host is not
	// ai-gateway.vercel.sh (a proxy in front of it): providerOptions.gateway
	// is then sent in the body.
	Gateway bool
}

// EnvOptions returns the options of the usual environment variables:
// OPENAI_API_KEY and OPENAI_BASE_URL. getenv is os.Getenv in production.
func EnvOptions(getenv func(string) string) Options {
	return Options{APIKey: getenv("OPENAI_API_KEY"), BaseURL: getenv("OPENAI_BASE_URL")}
}

// GatewayEnvOptions returns the options of the AI Gateway's
// OpenAI-compatible endpoint with AI_GATEWAY_API_KEY.
func GatewayEnvOptions(getenv func(string) string) Options {
	return Options{APIKey: getenv("AI_GATEWAY_API_KEY"), BaseURL: GatewayBaseURL}
}

// Model is an OpenAI-compatible chat completions provider; it implements
// harness.Model.
type Model struct {
	opts     Options
	endpoint string
	client   *http.Client
	host     string
	gateway  bool
}

var _ harness.Model = (*Model)(nil)

// New returns a provider of the options.
func New(opts Options) *Model {
	base := strings.TrimRight(strings.TrimSpace(opts.BaseURL), "/")
	if base == "" {
		base = DefaultBaseURL
	}
	opts.BaseURL = base
	if opts.ProviderOptionsKey == "" {
		opts.ProviderOptionsKey = "openai"
	}
	m := &Model{opts: opts, endpoint: base + "/chat/completions", client: opts.HTTPClient}
	if m.client == nil {
		m.client = http.DefaultClient
	}
	if u, err := url.Parse(base); err == nil {
		m.host = strings.ToLower(u.Hostname())
	}
	m.gateway = opts.Gateway || IsGatewayURL(base)
	return m
}

// IsGatewayURL reports whether a base URL is the AI Gateway's.
func IsGatewayURL(base string) bool {
	u, err := url.Parse(strings.TrimSpace(base))
	return err == nil && strings.EqualFold(u.Hostname(), gatewayHost)
}

// openAIHost reports whether the provider talks to OpenAI's own API.
func (m *Model) openAIHost() bool { return m.host == "api.openai.com" }

// Stream sends the request and returns the stream of its response. An
// HTTP error status is returned here as an *APIError; a cancelled ctx as
// ctx.Err(). The returned harness.Stream is a *Stream.
func (m *Model) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	body, err := m.requestBody(req)
	if err != nil {
		return nil, err
	}
	var auth map[string]string
	if m.opts.APIKey != "" {
		auth = map[string]string{"Authorization": "Bearer " + m.opts.APIKey}
	}
	stream, err := provider.Post(ctx, m.client, provider.Request{Name: "openai", Endpoint: m.endpoint, Body: body,
		Auth: auth, Headers: provider.Headers(m.opts.Headers, req.Headers, req.Settings), StatusError: statusError})
	if err != nil {
		return nil, err
	}
	return newStream(ctx, stream, req.GenerationID), nil
}

// modelID is the model as the server knows it: a Gateway model ID keeps
// its "provider/" prefix; OpenAI's API takes "gpt-5" for "openai/gpt-5".
func (m *Model) modelID(id string) string {
	if m.openAIHost() {
		return strings.TrimPrefix(id, "openai/")
	}
	return id
}
