// Package anthropic is the model provider for Anthropic's messages API
// (POST /v1/messages with stream: true). It speaks plain JSON and
// server-sent events over net/http and turns the message stream events
// into AI SDK UI message stream chunks. See docs/providers.md for the
// mappings.
package anthropic

import (
	"context"
	"net/http"
	"strings"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/internal/provider"
)

// DefaultBaseURL is Anthropic's API.
const DefaultBaseURL = "https://api.anthropic.com"

// APIVersion is the anthropic-version header A2 sends.
const APIVersion = "2023-06-01"

// Options configure a provider.
type Options struct {
	// BaseURL is the API base: requests go to {BaseURL}/v1/messages
	// (DefaultBaseURL when empty). A base that already ends in /v1 is
	// accepted too.
	BaseURL string
	// APIKey is sent as the x-api-key header.
	APIKey string
	// HTTPClient sends the requests (http.DefaultClient when nil). Leave
	// its Timeout zero: the request's context bounds a stream.
	HTTPClient *http.Client
	// Headers are sent with every request, before the request's own
	// headers, which win (anthropic-beta, for example).
	Headers map[string]string
	// ProviderOptionsKey is the key of GenerationSettings.ProviderOptions
	// whose entries are merged into the request body ("anthropic" when
	// empty).
	ProviderOptionsKey string
}

// EnvOptions returns the options of the usual environment variables:
// ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL. getenv is os.Getenv in
// production.
func EnvOptions(getenv func(string) string) Options {
	return Options{APIKey: getenv("ANTHROPIC_API_KEY"), BaseURL: getenv("ANTHROPIC_BASE_URL")}
}

// Model is an Anthropic messages provider; it implements harness.Model.
type Model struct {
	opts     Options
	endpoint string
	client   *http.Client
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
		opts.ProviderOptionsKey = "anthropic"
	}
	endpoint := base + "/v1/messages"
	if strings.HasSuffix(base, "/v1") {
		endpoint = base + "/messages"
	}
	m := &Model{opts: opts, endpoint: endpoint, client: opts.HTTPClient}
	if m.client == nil {
		m.client = http.DefaultClient
	}
	return m
}

// Stream sends the request and returns the stream of its response. An
// HTTP error status is returned here as an *APIError; a cancelled ctx as
// ctx.Err(). The returned harness.Stream is a *Stream.
func (m *Model) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	body, err := m.requestBody(req)
	if err != nil {
		return nil, err
	}
	auth := map[string]string{"anthropic-version": APIVersion}
	if m.opts.APIKey != "" {
		auth["x-api-key"] = m.opts.APIKey
	}
	stream, err := provider.Post(ctx, m.client, provider.Request{Name: "anthropic", Endpoint: m.endpoint, Body: body,
		Auth: auth, Headers: provider.Headers(m.opts.Headers, req.Headers, req.Settings), StatusError: statusError})
	if err != nil {
		return nil, err
	}
	return newStream(ctx, stream, req.GenerationID), nil
}

// modelID is the model as Anthropic knows it: "anthropic/claude-sonnet-4.5"
// (a Gateway model ID) becomes "claude-sonnet-4.5".
func modelID(id string) string { return strings.TrimPrefix(id, "anthropic/") }
