package gateway_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/protocol"
)

// TestIngressValidatesMessagesLikeTheAISDK: a user message is refused where
// the ai package's validateUIMessages (version 7) refuses it, with the JSON
// path of the offending field, and the log is unchanged; every valid
// version 7 part and field is accepted.
func TestIngressValidatesMessagesLikeTheAISDK(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, gateway.Options{}, nil)
	f.push("v1", protocol.Inputs.Text("m0", "Hi"))
	f.waitState("v1", "idle", idle)
	before := f.lastIndex("v1")
	const push = sessionsPath + "v1/events"
	msg := func(id, parts string) string {
		return events(cmd(id, fmt.Sprintf(`{"action":"send","message":{"id":%q,"role":"user","parts":%s}}`, id, parts)))
	}
	bad := []struct{ name, parts, field string }{
		{"no parts", `[]`, "events[0].payload.message.parts"},
		{"parts not an array", `{}`, "events[0].payload.message.parts"},
		{"parts null", `null`, "events[0].payload.message.parts"},
		{"unknown part type", `[{"type":"text","text":"a"},{"type":"banana"}]`, "events[0].payload.message.parts[1].type"},
		{"part without a type", `[{"text":"a"}]`, "events[0].payload.message.parts[0].type"},
		{"part not an object", `["text"]`, "events[0].payload.message.parts[0]"},
		{"text part without text", `[{"type":"text"}]`, "events[0].payload.message.parts[0].text"},
		{"text of the wrong type", `[{"type":"text","text":7}]`, "events[0].payload.message.parts[0].text"},
		{"text state outside its values", `[{"type":"text","text":"a","state":"half"}]`, "events[0].payload.message.parts[0].state"},
		{"file without a media type", `[{"type":"file","url":"data:,a"}]`, "events[0].payload.message.parts[0].mediaType"},
		{"providerReference not of strings", `[{"type":"file","url":"u","mediaType":"text/plain","providerReference":{"openai":1}}]`, "events[0].payload.message.parts[0].providerReference.openai"},
		{"providerMetadata not of objects", `[{"type":"text","text":"a","providerMetadata":{"openai":1}}]`, "events[0].payload.message.parts[0].providerMetadata.openai"},
		{"citation without a source", `[{"type":"text","text":"a","citations":[{}]}]`, "events[0].payload.message.parts[0].citations[0].source"},
		{"custom part without kind", `[{"type":"custom"}]`, "events[0].payload.message.parts[0].kind"},
		{"steering message with a tool part", `[{"type":"steering-message","id":"s","parts":[{"type":"tool-x","toolCallId":"c","state":"input-available"}]}]`, "events[0].payload.message.parts[0].parts[0].type"},
		{"tool part in an unknown state", `[{"type":"tool-calc","toolCallId":"c","state":"done"}]`, "events[0].payload.message.parts[0].state"},
		{"tool part without a call ID", `[{"type":"tool-calc","state":"input-available","input":{}}]`, "events[0].payload.message.parts[0].toolCallId"},
		{"error output without errorText", `[{"type":"tool-calc","toolCallId":"c","state":"output-error"}]`, "events[0].payload.message.parts[0].errorText"},
		{"output in a state that has none", `[{"type":"tool-calc","toolCallId":"c","state":"input-available","output":1}]`, "events[0].payload.message.parts[0].output"},
		{"denied without an approval", `[{"type":"tool-calc","toolCallId":"c","state":"output-denied","input":{}}]`, "events[0].payload.message.parts[0].approval"},
		{"denied but approved", `[{"type":"tool-calc","toolCallId":"c","state":"output-denied","input":{},"approval":{"id":"a","approved":true}}]`, "events[0].payload.message.parts[0].approval.approved"},
		{"dynamic tool without its name", `[{"type":"dynamic-tool","toolCallId":"c","state":"input-available","input":{}}]`, "events[0].payload.message.parts[0].toolName"},
		{"the compaction part", `[{"type":"data-a2-compaction","data":{}}]`, "events[0].payload.message.parts[0].type"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			status, b := f.do(http.MethodPost, push, msg("bad1", tc.parts), nil)
			if status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", status, b)
			}
			if e := errorBody(t, b); e.Code != gateway.CodeInvalid || e.Field != tc.field {
				t.Fatalf("error %+v, want INVALID at %s", e, tc.field)
			}
		})
	}
	if got := f.lastIndex("v1"); got != before {
		t.Fatalf("the log moved from %d to %d after refused messages", before, got)
	}
	good := []struct{ name, parts string }{
		{"text with citations and state", `[{"type":"text","text":"a","state":"done","citations":[{"source":{"type":"source","sourceType":"url","id":"s","url":"https://example.com"},"startIndex":0}]}]`},
		{"file with a provider reference", `[{"type":"text","text":"see"},{"type":"file","mediaType":"image/png","url":"data:image/png;base64,AA==","filename":"a.png","providerReference":{"openai":"file-1"}}]`},
		{"custom and reasoning-file parts", `[{"type":"custom","kind":"acme.note"},{"type":"reasoning-file","mediaType":"image/png","url":"data:,a"}]`},
		{"steering-message part", `[{"type":"steering-message","id":"s1","parts":[{"type":"text","text":"faster"}]}]`},
		{"data part", `[{"type":"text","text":"a"},{"type":"data-weather","id":"w","data":{"t":1}}]`},
		{"a field the SDK does not know", `[{"type":"text","text":"a","somethingNew":1}]`},
	}
	for i, tc := range good {
		t.Run("accepts "+tc.name, func(t *testing.T) {
			id := fmt.Sprintf("good%d", i)
			status, b := f.do(http.MethodPost, push, msg(id, tc.parts), nil)
			if status != http.StatusOK {
				t.Fatalf("status %d, want 200: %s", status, b)
			}
		})
	}
}
