package tools

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/a2-runtime/a2/protocol"
)

func noop(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil }

// A tool set refuses bad definitions at construction.
func TestNewSetErrors(t *testing.T) {
	var ce *protocol.ConfigError
	for _, bad := range [][]Tool{
		{{Name: "", Execute: noop}},
		{{Name: "a", Execute: noop}, {Name: "a", Execute: noop}},
		{{Name: "a"}},
		{{Name: "a", Execute: noop, InputSchema: json.RawMessage(`{`)}},
		{{Name: "a", Execute: noop, InputSchema: json.RawMessage(`{"type":"nonsense"}`)}},
		{{Name: "a", Execute: noop, Recovery: "skip"}},
	} {
		if _, err := NewSet(bad...); !errors.As(err, &ce) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

// Input the schema rejects is an error the model sees; the tool does not
// run.
func TestValidate(t *testing.T) {
	s, err := NewSet(Tool{Name: "weather", Execute: noop,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate("weather", json.RawMessage(`{"city":"Oslo"}`)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`{}`, `{"city":5}`, `{"city":"x","extra":1}`, `not json`} {
		if err := s.Validate("weather", json.RawMessage(bad)); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if err := s.Validate("nope", json.RawMessage(`{}`)); !errors.Is(err, ErrInvalidInput) {
		t.Fatal(err)
	}
}

// R-TOOL-21 R-TOOL-27: the handler context is there inside Execute (the
// test seam WithContext provides it) and an error elsewhere.
func TestHandlerContextSeam(t *testing.T) {
	if _, err := FromContext(context.Background()); !errors.Is(err, ErrNoHandlerContext) {
		t.Fatal(err)
	}
	hc := &Context{Attempt: 2, Session: "s1"}
	got, err := FromContext(WithContext(context.Background(), hc))
	if err != nil || got != hc {
		t.Fatal(got, err)
	}
}
