package providers

import "testing"

// The provider keys in the environment choose the default model; a model
// ID is routed to the provider that serves it; with no key the demo model
// answers.
func TestProviderSelection(t *testing.T) {
	cases := []struct {
		env       map[string]string
		model     string
		wantModel string
		route     map[string]string // model ID -> provider name ("" = error)
	}{
		{nil, "", "demo", map[string]string{"demo": "demo", "gpt-4o": ""}},
		{map[string]string{"OPENAI_API_KEY": "k"}, "", DefaultOpenAIModel, map[string]string{"gpt-4o": "openai", "demo": "demo"}},
		{map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"}, "llama3.2", "llama3.2", map[string]string{"llama3.2": "openai"}},
		{map[string]string{"AI_GATEWAY_API_KEY": "k"}, "", DefaultGatewayModel, map[string]string{"anthropic/claude-sonnet-4": "gateway", "gpt-4o": "gateway"}},
		{map[string]string{"ANTHROPIC_API_KEY": "k"}, "", DefaultAnthropicModel, map[string]string{"claude-sonnet-4-0": "anthropic", "gpt-4o": "anthropic"}},
		{map[string]string{"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}, "claude-sonnet-4-0", "claude-sonnet-4-0", map[string]string{"claude-sonnet-4-0": "anthropic", "gpt-4o": "openai"}},
		{map[string]string{"OPENAI_API_KEY": "k"}, "demo", "demo", map[string]string{"demo": "demo"}},
	}
	for i, tc := range cases {
		p := FromEnv(func(k string) string { return tc.env[k] }, tc.model, nil, 0)
		if p.Model() != tc.wantModel || p.Real() != (tc.wantModel != "demo") {
			t.Errorf("case %d: model %q (real %v), want %q", i, p.Model(), p.Real(), tc.wantModel)
		}
		for id, want := range tc.route {
			if got := p.Route(id); got != want {
				_, err := p.For(id)
				t.Errorf("case %d: %q goes to %q, want %q (%v)", i, id, got, want, err)
			}
		}
	}
}
