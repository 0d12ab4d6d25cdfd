package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// progressChunks returns the chunks of every progress event of session's
// log, in order.
func (f *fixture) progressChunks(session string) []protocol.UIMessageChunk {
	f.t.Helper()
	log, err := f.store.Read(context.Background(), session, 0, 1<<20)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []protocol.UIMessageChunk
	for _, ev := range log {
		if ev.Type != protocol.TypeGenerationProgress {
			continue
		}
		var p protocol.GenerationProgress
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, p.Chunks...)
	}
	return out
}

// R-GEN-27 R-PROGRESS-06 R-GEN-13: harness.messageMetadata sees every
// chunk of the default generator with the step's context (model-ready
// prompt, settings with A2's Gateway defaults); what it returns for start
// and finish is recorded on those chunks in the progress and shallow-merged
// onto the assistant message; what it returns for other chunks is not.
func TestMessageMetadata(t *testing.T) {
	var (
		mu    sync.Mutex
		parts []string
		ctxs  []MetadataContext
	)
	f := newFixture(t, `{"default":{"text":"hello there world","usage":{"inputTokens":7,"outputTokens":3,"totalTokens":10}}}`, func(a *AgentOptions) {
		a.Model = harness.ModelID("openai/script")
		a.Harness.MessageMetadata = func(mc MetadataContext) any {
			mu.Lock()
			parts = append(parts, mc.Part.Type)
			ctxs = append(ctxs, mc)
			mu.Unlock()
			switch mc.Part.Type {
			case protocol.ChunkStart:
				return map[string]any{"status": "writing", "startedBy": mc.GenerationID}
			case protocol.ChunkFinish:
				return map[string]any{"status": "complete", "usage": mc.TotalUsage}
			}
			return map[string]any{"ignored": mc.Part.Type}
		}
	})
	f.push("s1", protocol.Inputs.Text("m1", "Hi"))
	st := f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })

	var meta map[string]any
	if err := json.Unmarshal(st.Messages[1].Metadata, &meta); err != nil {
		t.Fatalf("assistant metadata %s: %v", st.Messages[1].Metadata, err)
	}
	usage, _ := meta["usage"].(map[string]any)
	if meta["status"] != "complete" || meta["startedBy"] == "" || meta["startedBy"] == nil || usage["totalTokens"] != float64(10) {
		t.Fatalf("assistant metadata %s: want start's and finish's merged, finish winning, with the step's usage", st.Messages[1].Metadata)
	}
	if _, ok := meta["ignored"]; ok {
		t.Fatalf("metadata of a text chunk was recorded: %s", st.Messages[1].Metadata)
	}

	mu.Lock()
	defer mu.Unlock()
	if strings.Join(parts, " ") != "start start-step text-start text-delta text-delta text-delta text-end finish-step finish" {
		t.Fatalf("messageMetadata saw %v, want every chunk of the step", parts)
	}
	mc := ctxs[0]
	if mc.GenerationID == "" || mc.Model.Model != "openai/script" || len(mc.ModelMessages) == 0 ||
		len(mc.Messages) != 1 || mc.Messages[0].ID != "m1" || mc.Event.Type != protocol.TypeGenerationRequested {
		t.Fatalf("metadata context %+v", mc.GenerateContext)
	}
	if _, ok := mc.Generation.ProviderOptions["gateway"]["caching"]; !ok {
		t.Fatalf("messageMetadata's generation lacks A2's Gateway defaults: %+v", mc.Generation.ProviderOptions)
	}
	for i, c := range ctxs {
		if (c.TotalUsage != nil) != (c.Part.Type == protocol.ChunkFinish) {
			t.Fatalf("chunk %d (%s) has total usage %v; only finish should", i, c.Part.Type, c.TotalUsage)
		}
	}

	// Recorded with the progress (R-PROGRESS-06).
	var start, finish json.RawMessage
	for _, c := range f.progressChunks("s1") {
		switch c.Type {
		case protocol.ChunkStart:
			start = c.MessageMeta
		case protocol.ChunkFinish:
			finish = c.MessageMeta
		case protocol.ChunkTextDelta:
			if len(c.MessageMeta) > 0 {
				t.Fatalf("a text delta carries metadata %s", c.MessageMeta)
			}
		}
	}
	if !strings.Contains(string(start), `"status":"writing"`) || !strings.Contains(string(finish), `"status":"complete"`) {
		t.Fatalf("progress start metadata %s, finish %s", start, finish)
	}
}

// R-GEN-27: messageMetadata that is not a JSON object fails the
// generation with a message naming the option, once; nil records nothing.
func TestMessageMetadataBadValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value any
		fails string
	}{
		{"a string", "writing", "metadata must be a JSON object"},
		{"a number", 42, "metadata must be a JSON object"},
		{"an array", []string{"a"}, "metadata must be a JSON object"},
		{"unencodable", map[string]any{"f": func() {}}, "harness.messageMetadata"},
		{"a nil map", map[string]any(nil), ""},
		{"nil", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, `{"default":{"text":"fine"}}`, func(a *AgentOptions) {
				a.Harness.MessageMetadata = func(mc MetadataContext) any {
					if mc.Part.Type == protocol.ChunkStart {
						return tc.value
					}
					return nil
				}
			})
			f.push("s1", protocol.Inputs.Text("m1", "Hi"))
			if tc.fails == "" {
				st := f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
				if lastText(st) != "fine" || len(st.Messages[1].Metadata) != 0 {
					t.Fatalf("answer %q, metadata %s", lastText(st), st.Messages[1].Metadata)
				}
				return
			}
			st := f.waitFor("s1", "the failure", func(s *protocol.AIState) bool { return s.Status == protocol.StatusFailed })
			if st.Error == nil || !strings.Contains(st.Error.Message, tc.fails) {
				t.Fatalf("error %+v, want %q", st.Error, tc.fails)
			}
			if n := len(f.model.Calls()); n != 1 {
				t.Fatalf("%d model calls; a metadata failure is not retried", n)
			}
		})
	}
}

// R-GEN-29 R-GEN-28 R-GEN-13 R-GEN-25: a custom generate replaces only the
// model-facing step: it gets the resolver context with the step's
// generation ID, model-ready prompt and resolved settings (the user's,
// without A2's caching default), and its stream is written as the
// response; A2 still runs the tool the stream calls and asks for the
// continuation, which generate serves as a second step. No model provider
// is needed, and messageMetadata is not called.
func TestCustomGenerate(t *testing.T) {
	sc, err := script.Parse([]byte(`{"default":{"text":"Let me look.","toolCalls":[{"name":"lookup","input":{"q":"x"}}],"then":{"text":"Found it."}}}`))
	if err != nil {
		t.Fatal(err)
	}
	model := script.New(sc)
	var (
		mu        sync.Mutex
		calls     []GenerateContext
		metaCalls int
	)
	f := newFixture(t, `{}`, func(a *AgentOptions) {
		a.Model = harness.ModelID("openai/custom")
		a.Models = nil
		a.Instructions = harness.Instructions("Be brief.")
		a.Tools = []tools.Tool{{Name: "lookup", Description: "looks things up", Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`{"found":true}`), nil
		}}}
		a.Harness.Generate = func(ctx context.Context, gc GenerateContext) (harness.Stream, error) {
			mu.Lock()
			calls = append(calls, gc)
			mu.Unlock()
			return model.Stream(ctx, harness.Request{Model: gc.Model.Model, System: gc.Instructions, Messages: gc.ModelMessages,
				Tools: gc.Tools, Settings: gc.Generation, SessionID: gc.Event.Session, GenerationID: gc.GenerationID})
		}
		a.Harness.MessageMetadata = func(MetadataContext) any {
			mu.Lock()
			metaCalls++
			mu.Unlock()
			return map[string]any{"never": true}
		}
	})
	f.push("s1", protocol.Inputs.Text("m1", "find x"))
	st := f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	if got := lastText(st); got != "Let me look.Found it." {
		t.Fatalf("response %q", got)
	}
	if tl := st.Tools; len(tl) != 1 {
		t.Fatalf("tools %+v: A2 should have run the call", tl)
	}
	for _, tl := range st.Tools {
		if tl.Status != protocol.ToolStatusCompleted {
			t.Fatalf("tool %+v", tl)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if metaCalls != 0 || len(st.Messages[1].Metadata) != 0 {
		t.Fatalf("messageMetadata ran %d times with a custom generate", metaCalls)
	}
	if len(calls) != 2 {
		t.Fatalf("generate ran %d times, want the step and its continuation", len(calls))
	}
	first, second := calls[0], calls[1]
	if first.GenerationID == "" || first.GenerationID == second.GenerationID || first.Instructions != "Be brief." ||
		len(first.Tools) != 1 || first.Tools[0].Name != "lookup" || first.Model.Model != "openai/custom" ||
		first.Event.Type != protocol.TypeGenerationRequested || len(first.Messages) != 1 {
		t.Fatalf("first generate context %+v", first)
	}
	if _, ok := first.Generation.ProviderOptions["gateway"]["caching"]; ok {
		t.Fatalf("generate received A2's caching default: %+v", first.Generation.ProviderOptions)
	}
	prompt, _ := json.Marshal(second.ModelMessages)
	if !strings.Contains(string(prompt), "find x") || !strings.Contains(string(prompt), `found`) {
		t.Fatalf("the continuation's model messages lack the request or the tool result: %s", prompt)
	}
	log, err := f.store.Read(context.Background(), "s1", 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var started []string
	for _, ev := range log {
		if ev.Type == protocol.TypeGenerationStarted {
			var p protocol.GenerationStarted
			_ = json.Unmarshal(ev.Payload, &p)
			started = append(started, p.GenerationID)
		}
	}
	if len(started) != 2 || started[0] != first.GenerationID || started[1] != second.GenerationID {
		t.Fatalf("generate ran generations %q and %q, the log started %v", first.GenerationID, second.GenerationID, started)
	}
}

// R-GEN-29 R-GEN-16: a custom generate that fails, returns no stream, or
// streams another message than the response fails the turn once, with a
// message that says so; nothing is retried.
func TestCustomGenerateFailures(t *testing.T) {
	other := func(context.Context, GenerateContext) (harness.Stream, error) {
		return &chunkStream{chunks: []protocol.UIMessageChunk{{Type: protocol.ChunkStart, MessageID: "someone-else"}, {Type: protocol.ChunkFinish}}}, nil
	}
	for _, tc := range []struct {
		name     string
		generate func(context.Context, GenerateContext) (harness.Stream, error)
		fails    string
	}{
		{"an error", func(context.Context, GenerateContext) (harness.Stream, error) { return nil, fmt.Errorf("routing down") }, "routing down"},
		{"no stream", func(context.Context, GenerateContext) (harness.Stream, error) { return nil, nil }, "harness.generate returned no stream"},
		{"another message", other, `writes message "someone-else"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n int
			var mu sync.Mutex
			f := newFixture(t, `{}`, func(a *AgentOptions) {
				a.Models = nil
				a.Harness.Generate = func(ctx context.Context, gc GenerateContext) (harness.Stream, error) {
					mu.Lock()
					n++
					mu.Unlock()
					return tc.generate(ctx, gc)
				}
			})
			f.push("s1", protocol.Inputs.Text("m1", "Hi"))
			st := f.waitFor("s1", "the failure", func(s *protocol.AIState) bool { return s.Status == protocol.StatusFailed })
			if st.Error == nil || !strings.Contains(st.Error.Message, tc.fails) {
				t.Fatalf("error %+v, want %q", st.Error, tc.fails)
			}
			mu.Lock()
			defer mu.Unlock()
			if n != 1 {
				t.Fatalf("generate ran %d times; a failed step is not retried", n)
			}
		})
	}
}

// R-GEN-30 R-META-07: a custom generate keeps compaction off unless it is
// configured explicitly: over the turns that compact the default generator
// (TestAutomaticCompactionFromTheCatalog), nothing compacts and no model
// limits are looked up; with an explicit threshold it compacts.
func TestCustomGenerateCompactsOnlyWhenConfigured(t *testing.T) {
	run := func(t *testing.T, explicit bool) *protocol.AIState {
		var m *summarizingModel
		f := catalogFixture(t, func(a *AgentOptions) {
			sm, _ := a.Models("openai/small")
			m = sm.(*summarizingModel)
			if explicit {
				a.Harness.Compaction = protocol.CompactionOptions{ThresholdTokens: 600}
			}
			a.Harness.Generate = func(ctx context.Context, gc GenerateContext) (harness.Stream, error) {
				return m.answer.Stream(ctx, harness.Request{Messages: gc.ModelMessages, SessionID: gc.Event.Session, GenerationID: gc.GenerationID})
			}
		})
		var st *protocol.AIState
		for i := 0; i < 12; i++ {
			f.push("s1", protocol.Inputs.Text(fmt.Sprintf("m%d", i), "go on"))
			st = f.waitFor("s1", "turn done", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2*(i+1) })
		}
		return st
	}
	t.Run("unconfigured", func(t *testing.T) {
		st := run(t, false)
		if st.Compaction != nil || len(compactionParts(st)) != 0 {
			t.Fatalf("a custom generate compacted without being asked to: %+v", st.Compaction)
		}
		if len(st.ModelMetadata) != 0 {
			t.Fatalf("model limits looked up for a custom generate without compaction: %+v", st.ModelMetadata)
		}
	})
	t.Run("explicit threshold", func(t *testing.T) {
		st := run(t, true)
		if st.Compaction == nil || st.Compaction.Status != protocol.CompactionStatusCompleted {
			t.Fatalf("no compaction with an explicit threshold: %+v", st.Compaction)
		}
	})
}

// R-GEN-29: without a model provider an agent needs a custom generate, and
// automatic compaction, which sends its summary request to the model,
// needs the provider; both are construction errors naming the option.
func TestGenerateOptionErrors(t *testing.T) {
	generate := func(context.Context, GenerateContext) (harness.Stream, error) { return nil, nil }
	keep := func(context.Context, CompactionContext) (bool, error) { return false, nil }
	summary := func(context.Context, CompactionContext) (string, error) { return "s", nil }
	for _, tc := range []struct {
		name   string
		h      HarnessOptions
		option string // "" builds
	}{
		{"no models, no generate", HarnessOptions{}, "models"},
		{"no models, generate", HarnessOptions{Generate: generate}, ""},
		{"no models, generate, explicit automatic compaction", HarnessOptions{Generate: generate, Compaction: protocol.CompactionOptions{ThresholdTokens: 1000}}, "harness.compaction"},
		{"no models, generate, compaction off", HarnessOptions{Generate: generate, Compaction: protocol.CompactionOptions{Disabled: true}}, ""},
		{"no models, generate, custom compaction", HarnessOptions{Generate: generate, CustomCompaction: &CustomCompaction{ShouldCompact: keep, Compact: summary}}, ""},
	} {
		_, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script"), Harness: tc.h})
		var ce *protocol.ConfigError
		switch {
		case tc.option == "" && err != nil:
			t.Errorf("%s: %v, want it to build", tc.name, err)
		case tc.option != "" && (!errors.As(err, &ce) || ce.Option != tc.option):
			t.Errorf("%s: %v, want a %s error", tc.name, err, tc.option)
		}
	}
}

// R-GEN-08: the default harness's options (generation, messageMetadata,
// generate, compaction) exist only in AgentOptions.Harness, whose zero
// value is the default AI SDK harness. The agent's own options have no
// field of those names, so passing one to the agent directly does not
// compile: Go's form of the construction error naming where it belongs.
func TestHarnessOptionsExistOnlyInTheHarness(t *testing.T) {
	agent, h := reflect.TypeOf(AgentOptions{}), reflect.TypeOf(HarnessOptions{})
	if f, ok := agent.FieldByName("Harness"); !ok || f.Type != h || f.Anonymous {
		t.Fatalf("AgentOptions.Harness is %+v, want a named HarnessOptions field", f)
	}
	for _, name := range []string{"Generation", "GenerationFunc", "MessageMetadata", "Generate", "Compaction", "CustomCompaction", "CompactionFunc"} {
		if _, ok := agent.FieldByName(name); ok {
			t.Errorf("AgentOptions has %s: harness options belong in AgentOptions.Harness only", name)
		}
		if _, ok := h.FieldByName(name); !ok {
			t.Errorf("HarnessOptions has no %s", name)
		}
	}
}
