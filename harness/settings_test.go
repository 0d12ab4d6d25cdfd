package harness

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/a2-runtime/a2/protocol"
)

// R-GEN-23: every reasoning level, in order.
func TestReasoningLevels(t *testing.T) {
	want := []string{"provider-default", "none", "minimal", "low", "medium", "high", "xhigh"}
	if !reflect.DeepEqual(ReasoningLevels, want) {
		t.Fatalf("%v", ReasoningLevels)
	}
}

// R-GEN-10 R-GEN-20: the model is a value or a resolver; static values are
// validated at construction, resolved ones before use (R-GEN-16: an invalid
// resolved value is an error the caller records as the turn's failure).
func TestModelOption(t *testing.T) {
	var ce *protocol.ConfigError
	if err := ModelID("openai/gpt-5-mini").Validate(); err != nil {
		t.Fatal(err)
	}
	if err := ModelWith(ModelSettings{Model: "x", Reasoning: "extreme"}).Validate(); !errors.As(err, &ce) || ce.Option != "model.reasoning" {
		t.Fatalf("bad reasoning: %v", err)
	}
	if err := ModelWith(ModelSettings{Model: "x", Speed: "ludicrous"}).Validate(); !errors.As(err, &ce) {
		t.Fatalf("bad speed: %v", err)
	}
	if err := (ModelOption{}).Validate(); !errors.As(err, &ce) {
		t.Fatal("a missing model must be a construction error")
	}
	plan := "free"
	opt := ModelFunc(func(_ context.Context, rc ResolverContext) (ModelSettings, error) {
		if rc.State.(string) == "pro" {
			return ModelSettings{Model: "openai/gpt-5.6-terra", Reasoning: "high"}, nil
		}
		if rc.State.(string) == "bad" {
			return ModelSettings{}, nil
		}
		return ModelSettings{}, errors.New("plan unknown")
	})
	if err := opt.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := opt.Resolve(context.Background(), ResolverContext{State: plan}); err == nil || err.Error() != "plan unknown" {
		t.Fatalf("resolver error must come back with its message: %v", err)
	}
	if _, err := opt.Resolve(context.Background(), ResolverContext{State: "bad"}); !errors.As(err, &ce) {
		t.Fatalf("an invalid resolved value: %v", err)
	}
	m, err := opt.Resolve(context.Background(), ResolverContext{State: "pro"})
	if err != nil || m.Model != "openai/gpt-5.6-terra" {
		t.Fatal(m, err)
	}
}

// R-GEN-11: instructions are a value or a resolver.
func TestInstructionsOption(t *testing.T) {
	if s, _ := Instructions("be brief").Resolve(context.Background(), ResolverContext{}); s != "be brief" {
		t.Fatal(s)
	}
	f := InstructionsFunc(func(_ context.Context, rc ResolverContext) (string, error) {
		return "messages: " + string(rune('0'+len(rc.Messages))), nil
	})
	if s, _ := f.Resolve(context.Background(), ResolverContext{Messages: make([]protocol.TranscriptMessage, 2)}); s != "messages: 2" {
		t.Fatal(s)
	}
}

// R-GEN-14: resolver contexts carry the request event, prompt messages, the
// application state and a session reader, never raw history or an
// execution argument.
func TestResolverContextShape(t *testing.T) {
	typ := reflect.TypeOf(ResolverContext{})
	var names []string
	for i := 0; i < typ.NumField(); i++ {
		names = append(names, typ.Field(i).Name)
	}
	if strings.Join(names, ",") != "Event,Messages,State,Session" {
		t.Fatalf("resolver context fields %v", names)
	}
}

// R-GEN-18 R-GEN-20 R-APPROVAL-13: generation settings exclude the tool
// loop's own options and the approval secret; everything else passes.
func TestGenerationSettingsValidate(t *testing.T) {
	var ce *protocol.ConfigError
	neg := int64(-1)
	for _, bad := range []GenerationSettings{
		{MaxOutputTokens: &neg},
		{Extra: map[string]json.RawMessage{"stopWhen": json.RawMessage(`1`)}},
		{Extra: map[string]json.RawMessage{"toolApprovalSecret": json.RawMessage(`"s"`)}},
		{Reasoning: "max"},
	} {
		if err := bad.Validate(); !errors.As(err, &ce) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	ok := GenerationSettings{Extra: map[string]json.RawMessage{"toolsContext": json.RawMessage(`{"a":1}`)}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

// R-GEN-21: speed fast sets providerOptions.gateway.speed, standard removes
// it; both override the generation settings.
func TestWithModelSettings(t *testing.T) {
	g := GenerationSettings{Reasoning: "low"}
	fast := WithModelSettings(g, ModelSettings{Model: "m", Reasoning: "high", Speed: SpeedFast})
	if string(fast.ProviderOptions["gateway"]["speed"]) != `"fast"` || fast.Reasoning != "high" {
		t.Fatalf("%+v", fast)
	}
	if g.ProviderOptions != nil || g.Reasoning != "low" {
		t.Fatal("the input settings changed")
	}
	std := WithModelSettings(fast, ModelSettings{Model: "m", Speed: SpeedStandard})
	if _, ok := std.ProviderOptions["gateway"]["speed"]; ok {
		t.Fatal("standard must remove a configured speed")
	}
}

// R-GEN-24 R-GEN-25 R-GEN-26: Gateway defaults: caching auto unless set,
// other options kept; a stable session-affinity header without the raw
// session ID, overridable or suppressible in any casing; model headers
// cannot override it; the original settings are left for a custom generate.
func TestGatewayDefaults(t *testing.T) {
	g := GenerationSettings{ProviderOptions: map[string]map[string]json.RawMessage{"gateway": {"order": json.RawMessage(`["a"]`)}}}
	d := WithGatewayDefaults(g, "session-123")
	if string(d.ProviderOptions["gateway"]["caching"]) != `"auto"` || string(d.ProviderOptions["gateway"]["order"]) != `["a"]` {
		t.Fatalf("%+v", d.ProviderOptions)
	}
	if _, changed := g.ProviderOptions["gateway"]["caching"]; changed || g.Headers != nil {
		t.Fatal("the original settings changed (R-GEN-25)")
	}
	own := WithGatewayDefaults(GenerationSettings{ProviderOptions: map[string]map[string]json.RawMessage{"gateway": {"caching": json.RawMessage(`"none"`)}}}, "s")
	if string(own.ProviderOptions["gateway"]["caching"]) != `"none"` {
		t.Fatal("the application's caching must win")
	}
	aff := *d.Headers[SessionAffinityHeader]
	if aff != SessionAffinity("session-123") || strings.Contains(aff, "session-123") || aff == SessionAffinity("session-124") {
		t.Fatalf("affinity %q", aff)
	}
	custom := "mine"
	over := WithGatewayDefaults(GenerationSettings{Headers: map[string]*string{"X-Session-Affinity": &custom}}, "s")
	if h := RequestHeaders(nil, over); h["x-session-affinity"] != "mine" || len(h) != 1 {
		t.Fatalf("override: %v", h)
	}
	off := WithGatewayDefaults(GenerationSettings{Headers: map[string]*string{"X-SESSION-AFFINITY": nil}}, "s")
	if h := RequestHeaders(map[string]string{"x-session-affinity": "model"}, off); len(h) != 0 {
		t.Fatalf("suppress: %v", h)
	}
	if h := RequestHeaders(map[string]string{"X-Session-Affinity": "model", "x-other": "1"}, d); h["x-session-affinity"] != aff || h["x-other"] != "1" {
		t.Fatalf("model headers must not override A2's default: %v", h)
	}
}
