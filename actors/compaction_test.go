package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/catalog"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// summarizingModel answers summary requests with a short summary and
// everything else from a script; it records the size of every prompt.
type summarizingModel struct {
	answer *script.Model
	mu     sync.Mutex
	sizes  []int64
	kinds  []string
	reqs   []harness.Request
}

func (m *summarizingModel) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	b, _ := json.Marshal(req.Messages)
	size := protocol.TokensOf(int64(len(b)) + int64(len(req.System)))
	last := req.Messages[len(req.Messages)-1]
	summary := last.Role == harness.ModelRoleUser && len(last.Content) > 0 && strings.HasPrefix(last.Content[0].Text, protocol.SummaryInstructions)
	m.mu.Lock()
	m.sizes = append(m.sizes, size)
	m.reqs = append(m.reqs, req)
	if summary {
		m.kinds = append(m.kinds, "summary")
	} else {
		m.kinds = append(m.kinds, "step")
	}
	m.mu.Unlock()
	if summary {
		sc, _ := script.Parse([]byte(`{"default":{"text":"Summary: the user asked many questions about numbers; keep going."}}`))
		return script.New(sc).Stream(ctx, req)
	}
	return m.answer.Stream(ctx, req)
}

// R-COMPACT-02 R-COMPACT-03 R-COMPACT-04 R-COMPACT-07 R-COMPACT-12: a
// session scripted to exceed its window many times over: every model step
// stays under the threshold plus one turn, state.messages stays complete,
// tool calls keep their results paired in the prompt, and the summary
// request runs no tools.
func TestCompactionKeepsPromptsBounded(t *testing.T) {
	const threshold = 1000
	var toolRuns int
	count := tools.Tool{Name: "count", Execute: func(_ context.Context, in json.RawMessage) (json.RawMessage, error) {
		toolRuns++
		return json.RawMessage(`{"n":42}`), nil
	}}
	sc, _ := script.Parse([]byte(`{"default":{"toolCalls":[{"name":"count","input":{}}],
		"then":{"text":"` + strings.Repeat("This is a long answer that fills the context window quickly. ", 6) + `"}}}`))
	m := &summarizingModel{answer: script.New(sc)}
	f := newFixture(t, `{"replies":[]}`, func(a *AgentOptions) {
		a.Models = func(string) (harness.Model, error) { return m, nil }
		a.Tools = []tools.Tool{count}
		a.Harness.Compaction = protocol.CompactionOptions{ThresholdTokens: threshold, Instructions: "Keep numbers."}
	})
	const turns = 50
	for i := 0; i < turns; i++ {
		f.push("s1", protocol.Inputs.Text(fmt.Sprintf("m%02d", i), fmt.Sprintf("question %d: how many things are there?", i)))
		f.waitFor("s1", "turn done", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2*(i+1) })
	}
	st, _, _ := f.rt.State(context.Background(), "assistant", "s1")
	if len(st.AI.Messages) != 2*turns {
		t.Fatalf("state.messages lost messages: %d", len(st.AI.Messages))
	}
	compactions := 0
	for _, msg := range st.AI.Messages {
		for _, p := range msg.Parts {
			if protocol.IsCompactionPart(p) {
				compactions++
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// One turn's share of a prompt: how much the first step of turn 2 grew
	// over that of turn 1 (before any compaction).
	var firsts []int64
	maxStep := int64(0)
	for i, req := range m.reqs {
		if m.kinds[i] != "step" {
			continue
		}
		if m.sizes[i] > maxStep {
			maxStep = m.sizes[i]
		}
		if req.Messages[len(req.Messages)-1].Role == harness.ModelRoleUser {
			firsts = append(firsts, m.sizes[i])
		}
		// Every tool call in the prompt has its result paired after it.
		results := map[string]bool{}
		for _, msg := range req.Messages {
			for _, p := range msg.Content {
				if p.Type == harness.ContentToolResult {
					results[p.ToolCallID] = true
				}
			}
		}
		for _, msg := range req.Messages {
			for _, p := range msg.Content {
				if p.Type == harness.ContentToolCall && !results[p.ToolCallID] {
					t.Fatalf("call %d: tool call %s has no result in the prompt", i, p.ToolCallID)
				}
			}
		}
	}
	perTurn := firsts[1] - firsts[0]
	t.Logf("%d turns, %d model calls, %d compactions, largest step prompt %d tokens (threshold %d, one turn %d)",
		turns, len(m.sizes), compactions, maxStep, threshold, perTurn)
	if compactions < 5 {
		t.Fatalf("only %d compactions", compactions)
	}
	if maxStep > threshold+perTurn {
		t.Fatalf("a step prompt of %d tokens exceeds the threshold %d plus one turn (%d)", maxStep, threshold, perTurn)
	}
	if toolRuns != turns {
		t.Fatalf("tools ran %d times for %d turns: the summary request must run none", toolRuns, turns)
	}
	// R-COMPACT-12: the summary request is A2's instruction plus the
	// configured one, under the agent's own instructions. R-COMPACT-30:
	// the completed part carries the summary request's usage.
	for i, req := range m.reqs {
		if m.kinds[i] != "summary" {
			continue
		}
		last := req.Messages[len(req.Messages)-1]
		if got := last.Content[0].Text; got != protocol.SummaryInstructions+"\n\n"+"Keep numbers." {
			t.Fatalf("summary request %d asks %q", i, got)
		}
	}
	for _, d := range compactionParts(st.AI) {
		if d.Status == protocol.CompactionStatusCompleted && (d.Usage == nil || d.Usage.InputTokens == 0) {
			t.Fatalf("a completed compaction part has no usage: %+v", d)
		}
	}
}

// R-COMPACT-13 R-COMPACT-14: a compaction resolver runs once per
// generation, may read the session's state at the prompt frontier, and
// returns false for short sessions and a custom policy for longer ones; the
// policy sees the typed messages and the model-ready prompt, summary
// included, and its summary shapes later prompts like an automatic one.
func TestCustomCompactionPolicy(t *testing.T) {
	var mu sync.Mutex
	var resolves int
	var seen []CompactionContext
	var resolverMessages [][]string // the message IDs each resolver call saw (R-GEN-12)
	policy := &CustomCompaction{
		ShouldCompact: func(_ context.Context, cc CompactionContext) (bool, error) {
			mu.Lock()
			seen = append(seen, cc)
			mu.Unlock()
			// Compact once six messages follow the summary in force.
			n := len(cc.Messages)
			if n > 0 && strings.HasPrefix(cc.Messages[0].ID, "summary-") {
				n--
			}
			return n >= 6, nil
		},
		Compact: func(_ context.Context, cc CompactionContext) (string, error) {
			return fmt.Sprintf("custom summary of %d messages", len(cc.Messages)), nil
		},
	}
	f := newFixture(t, `{"default":{"text":"a fine answer"}}`, func(a *AgentOptions) {
		a.Harness.CompactionFunc = func(ctx context.Context, rc harness.ResolverContext) (CompactionChoice, error) {
			mu.Lock()
			resolves++
			var ids []string
			for _, m := range rc.Messages {
				ids = append(ids, m.ID)
			}
			resolverMessages = append(resolverMessages, ids)
			mu.Unlock()
			if rc.Session == nil {
				return CompactionChoice{}, fmt.Errorf("no session reader")
			}
			st, index, err := rc.Session.State(ctx)
			if err != nil || index == 0 {
				return CompactionChoice{}, fmt.Errorf("session state at index %d: %v", index, err)
			}
			if len(st.Messages) < 4 {
				return CompactionChoice{Options: protocol.CompactionOptions{Disabled: true}}, nil
			}
			return CompactionChoice{Custom: policy}, nil
		}
	})
	const turns = 8
	for i := 0; i < turns; i++ {
		f.push("s1", protocol.Inputs.Text(fmt.Sprintf("m%d", i), fmt.Sprintf("question number %d", i)))
		st := f.waitFor("s1", "turn done", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2*(i+1) })
		if st.Error != nil {
			t.Fatalf("turn %d failed: %s", i, st.Error.Message)
		}
	}
	st := f.waitFor("s1", "final", func(s *protocol.AIState) bool { return idle(s) })
	calls := f.model.Calls()
	mu.Lock()
	defer mu.Unlock()
	if resolves != len(calls) {
		t.Fatalf("the resolver ran %d times for %d generations", resolves, len(calls))
	}
	// Turns 1 and 2 see fewer than four messages: false, the policy is not asked.
	if len(seen) != turns-2 {
		t.Fatalf("the policy was asked %d times, want %d", len(seen), turns-2)
	}
	// R-GEN-12: resolvers see the prompt messages, already compacted: the
	// same typed context as the policy, the summary in force first.
	summarized := false
	for k, cc := range seen {
		var want []string
		for _, m := range cc.Messages {
			want = append(want, m.ID)
		}
		if got := resolverMessages[k+2]; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("generation %d: the resolver saw messages %v, the policy %v", k+2, got, want)
		}
		summarized = summarized || strings.HasPrefix(want[0], "summary-")
	}
	if !summarized {
		t.Fatal("no resolver saw a summary; the test checks nothing compacted")
	}
	var summaries []string
	for _, d := range compactionParts(st) {
		summaries = append(summaries, d.Summary)
	}
	if len(summaries) == 0 || !strings.HasPrefix(summaries[0], "custom summary of ") {
		t.Fatalf("compaction parts %q", summaries)
	}
	if len(st.Messages) != 2*turns {
		t.Fatalf("state.messages has %d messages, want %d", len(st.Messages), 2*turns)
	}
	// A context after the first compaction starts with the summary, typed
	// and model-ready.
	withSummary := 0
	for _, cc := range seen {
		if len(cc.ModelMessages) == 0 || cc.InputTokens <= 0 || cc.SessionID != "s1" || cc.GenerationID == "" {
			t.Fatalf("incomplete compaction context %+v", cc)
		}
		if !strings.HasPrefix(cc.Messages[0].ID, "summary-") {
			continue
		}
		withSummary++
		b, _ := json.Marshal(cc.ModelMessages)
		if !strings.Contains(cc.Messages[0].Parts[0].Text, summaries[0]) || !strings.Contains(string(b), summaries[0]) {
			t.Fatalf("the summary is missing from the policy's context: %s", b)
		}
	}
	if withSummary == 0 {
		t.Fatal("no policy context carried the summary")
	}
	// The last step's prompt starts from the summary: the first question is gone.
	last, _ := json.Marshal(calls[len(calls)-1].Messages)
	if strings.Contains(string(last), "question number 0") || !strings.Contains(string(last), "custom summary of ") {
		t.Fatalf("the last prompt did not start from the summary: %s", last)
	}
}

// R-COMPACT-17 R-COMPACT-15: an explicit automatic policy is rejected with
// structured output or a forced tool choice, statically at construction
// and, when resolvers return them, before the generation runs; a custom
// policy takes no automatic options and needs both callbacks.
func TestCompactionOptionRejections(t *testing.T) {
	models := func(string) (harness.Model, error) { return nil, fmt.Errorf("unused") }
	forced := harness.GenerationSettings{Extra: map[string]json.RawMessage{"toolChoice": json.RawMessage(`"required"`)}}
	keep := func(context.Context, CompactionContext) (bool, error) { return false, nil }
	cases := []struct {
		name string
		h    HarnessOptions
		want string
	}{
		{"threshold with a forced tool choice", HarnessOptions{Generation: forced, Compaction: protocol.CompactionOptions{ThresholdTokens: 1000}}, "forced tool choice"},
		{"instructions with a specific tool", HarnessOptions{Compaction: protocol.CompactionOptions{Instructions: "keep it"},
			Generation: harness.GenerationSettings{Extra: map[string]json.RawMessage{"toolChoice": json.RawMessage(`{"type":"tool","toolName":"x"}`)}}}, "forced tool choice"},
		{"threshold with structured output", HarnessOptions{Compaction: protocol.CompactionOptions{ThresholdTokens: 1000},
			Generation: harness.GenerationSettings{Extra: map[string]json.RawMessage{"output": json.RawMessage(`{"type":"object"}`)}}}, "structured output"},
		{"custom with a threshold", HarnessOptions{Compaction: protocol.CompactionOptions{ThresholdTokens: 10}, CustomCompaction: &CustomCompaction{ShouldCompact: keep, Compact: func(context.Context, CompactionContext) (string, error) { return "", nil }}}, "no automatic options"},
		{"fallback list without a threshold", HarnessOptions{Generation: harness.GenerationSettings{ProviderOptions: map[string]map[string]json.RawMessage{
			"gateway": {"models": json.RawMessage(`["openai/small","anthropic/other"]`)}}}}, "explicit thresholdTokens"},
		{"custom without Compact", HarnessOptions{CustomCompaction: &CustomCompaction{ShouldCompact: keep}}, "both"},
		{"resolver and static options", HarnessOptions{Compaction: protocol.CompactionOptions{Disabled: true},
			CompactionFunc: func(context.Context, harness.ResolverContext) (CompactionChoice, error) {
				return CompactionChoice{}, nil
			}}, "one or the other"},
	}
	for _, c := range cases {
		_, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script"), Models: models, Harness: c.h})
		var ce *protocol.ConfigError
		if !errors.As(err, &ce) || !strings.HasPrefix(ce.Option, "harness.compaction") || !strings.Contains(ce.Message, c.want) {
			t.Errorf("%s: %v, want a harness.compaction error saying %q", c.name, err, c.want)
		}
	}
	// A fallback list with an explicit threshold builds.
	if _, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script"), Models: models, Harness: HarnessOptions{
		Compaction: protocol.CompactionOptions{ThresholdTokens: 5000},
		Generation: harness.GenerationSettings{ProviderOptions: map[string]map[string]json.RawMessage{"gateway": {"models": json.RawMessage(`["a/b"]`)}}}}}); err != nil {
		t.Fatalf("a fallback list with a threshold: %v", err)
	}
	// Implicit compaction with a forced tool choice is fine and builds.
	if _, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script"), Models: models, Harness: HarnessOptions{Generation: forced}}); err != nil {
		t.Fatalf("implicit compaction with a forced tool choice: %v", err)
	}

	// Resolved options are validated before their generation: the turn
	// fails with the reason and the model is never called.
	f := newFixture(t, `{"default":{"text":"never"}}`, func(a *AgentOptions) {
		a.Harness.GenerationFunc = func(context.Context, harness.ResolverContext) (harness.GenerationSettings, error) { return forced, nil }
		a.Harness.CompactionFunc = func(context.Context, harness.ResolverContext) (CompactionChoice, error) {
			return CompactionChoice{Options: protocol.CompactionOptions{ThresholdTokens: 500}}, nil
		}
	})
	f.push("s1", protocol.Inputs.Text("m1", "hello"))
	st := f.waitFor("s1", "the rejected generation", func(s *protocol.AIState) bool { return s.Status == protocol.StatusFailed })
	if st.Error == nil || !strings.Contains(st.Error.Message, "use a custom policy or false") {
		t.Fatalf("error %+v", st.Error)
	}
	if n := len(f.model.Calls()); n != 0 {
		t.Fatalf("the model was called %d times", n)
	}
}

// R-COMPACT-17: implicit automatic compaction skips steps with a forced
// tool choice: a Gateway model whose window would have compacted long ago
// (see TestAutomaticCompactionFromTheCatalog) never compacts.
func TestImplicitCompactionSkipsForcedToolChoice(t *testing.T) {
	f := catalogFixture(t, func(a *AgentOptions) {
		a.Harness.Generation = harness.GenerationSettings{Extra: map[string]json.RawMessage{"toolChoice": json.RawMessage(`"required"`)}}
	})
	var st *protocol.AIState
	for i := 0; i < 12; i++ {
		f.push("s1", protocol.Inputs.Text(fmt.Sprintf("m%d", i), "go on"))
		st = f.waitFor("s1", "turn done", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2*(i+1) })
		if i == 0 {
			f.waitLookup("s1", "openai/small", protocol.MetadataResolved)
		}
	}
	if md := st.ModelMetadata["openai/small"]; md.Status != protocol.MetadataResolved {
		t.Fatalf("the limits never became known: %+v", md)
	}
	if st.Compaction != nil {
		t.Fatalf("a step with a forced tool choice compacted: %+v", st.Compaction)
	}
}

// compactionParts returns the data of the transcript's compaction parts, in
// order.
func compactionParts(st *protocol.AIState) []protocol.CompactionData {
	var out []protocol.CompactionData
	for _, msg := range st.Messages {
		for _, p := range msg.Parts {
			if protocol.IsCompactionPart(p) {
				var d protocol.CompactionData
				_ = json.Unmarshal(p.Data, &d)
				out = append(out, d)
			}
		}
	}
	return out
}

// R-COMPACT-16 R-META-07: a model outside AI Gateway has no catalog
// limits, so implicit compaction never runs for it (its metadata is
// unavailable); an explicit thresholdTokens makes the same session compact
// and disables the lookup.
func TestDirectProviderNeedsExplicitThreshold(t *testing.T) {
	run := func(threshold int64) *protocol.AIState {
		f := catalogFixture(t, func(a *AgentOptions) {
			a.Model = harness.ModelID("direct-model")
			a.Harness.Compaction = protocol.CompactionOptions{ThresholdTokens: threshold}
		})
		var st *protocol.AIState
		for i := 0; i < 10; i++ {
			f.push("s1", protocol.Inputs.Text(fmt.Sprintf("m%d", i), "go on"))
			st = f.waitFor("s1", "turn done", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2*(i+1) })
			if i == 0 && threshold == 0 {
				f.waitLookup("s1", "direct-model", protocol.MetadataUnavailable)
			}
		}
		return st
	}
	st := run(0)
	if md := st.ModelMetadata["direct-model"]; md.Status != protocol.MetadataUnavailable {
		t.Fatalf("metadata of a model outside the catalog: %+v", md)
	}
	if len(compactionParts(st)) != 0 {
		t.Fatal("compacted without known limits or a threshold")
	}
	st = run(400)
	if len(compactionParts(st)) == 0 {
		t.Fatal("an explicit threshold did not compact")
	}
	if len(st.ModelMetadata) != 0 {
		t.Fatalf("an explicit threshold still looked up limits: %+v", st.ModelMetadata)
	}
}

// heldSummaryModel answers steps from a script and holds every summary
// request until release is closed; started receives one value per summary
// request that began.
type heldSummaryModel struct {
	answer  *script.Model
	started chan struct{}
	release chan struct{}
}

func (m *heldSummaryModel) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	last := req.Messages[len(req.Messages)-1]
	if len(last.Content) > 0 && strings.HasPrefix(last.Content[0].Text, protocol.SummaryInstructions) {
		m.started <- struct{}{}
		select {
		case <-m.release:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		sc, _ := script.Parse([]byte(`{"default":{"text":"late summary"}}`))
		return script.New(sc).Stream(ctx, req)
	}
	return m.answer.Stream(ctx, req)
}

// R-COMPACT-29 R-COMPACT-31: while a compaction's summary request is in
// flight, its ai.compaction.requested is durable (a client sees a running
// compaction part); a Stop or a Pause now that arrives first leaves the
// part interrupted in the response, not removed.
func TestCompactionIsVisibleWhileItsSummaryRuns(t *testing.T) {
	for _, end := range []string{"stop", "pause now"} {
		t.Run(end, func(t *testing.T) {
			sc, _ := script.Parse([]byte(`{"default":{"text":"answer"}}`))
			m := &heldSummaryModel{answer: script.New(sc), started: make(chan struct{}, 4), release: make(chan struct{})}
			defer close(m.release)
			f := newFixture(t, `{"replies":[]}`, func(a *AgentOptions) {
				a.Models = func(string) (harness.Model, error) { return m, nil }
				a.Harness.Compaction = protocol.CompactionOptions{ThresholdTokens: 1}
			})
			f.push("s1", protocol.Inputs.Text("m1", "a question long enough to pass a threshold of one token"))
			select {
			case <-m.started:
			case <-time.After(10 * time.Second):
				t.Fatal("the summary request did not start")
			}
			// The request is durable while the summary runs.
			deadline := time.Now().Add(10 * time.Second)
			for {
				evs, err := f.store.Read(context.Background(), "s1", 0, 1000)
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, ev := range evs {
					found = found || ev.Type == protocol.TypeCompactionRequested
				}
				if found {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("ai.compaction.requested is not in the store while the summary runs (%d events)", len(evs))
				}
				time.Sleep(5 * time.Millisecond)
			}
			st := f.waitFor("s1", "the running compaction part", func(s *protocol.AIState) bool {
				c := compactionParts(s)
				return len(c) == 1 && c[0].Status == protocol.CompactionStatusRunning
			})
			if end == "stop" {
				f.push("s1", withID(protocol.Inputs.Stop(st.Active.TurnID, nil), "stop-1"))
			} else {
				f.push("s1", withID(protocol.Inputs.Pause(protocol.PauseNow), "pause-1"))
			}
			f.waitFor("s1", "the interrupted compaction part", func(s *protocol.AIState) bool {
				c := compactionParts(s)
				return len(c) == 1 && c[0].Status == protocol.CompactionStatusInterrupted &&
					(s.Active == nil || s.Active.Phase == protocol.PhasePaused)
			})
		})
	}
}

// R-META-01 R-META-07: the first step's start write asks for the model's
// limits only when the generation's resolved compaction needs them: not for
// an explicit threshold, compaction false or a custom policy, even when a
// resolver answers them.
func TestMetadataDiscoveryOnlyWhenAThresholdIsNeeded(t *testing.T) {
	custom := &CustomCompaction{
		ShouldCompact: func(context.Context, CompactionContext) (bool, error) { return false, nil },
		Compact:       func(context.Context, CompactionContext) (string, error) { return "", nil },
	}
	cases := []struct {
		name   string
		choice CompactionChoice
		want   bool
	}{
		{"automatic, no threshold", CompactionChoice{}, true},
		{"explicit threshold", CompactionChoice{Options: protocol.CompactionOptions{ThresholdTokens: 1000}}, false},
		{"compaction false", CompactionChoice{Options: protocol.CompactionOptions{Disabled: true}}, false},
		{"custom policy", CompactionChoice{Custom: custom}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, `{"default":{"text":"ok"}}`, func(a *AgentOptions) {
				a.Harness.CompactionFunc = func(context.Context, harness.ResolverContext) (CompactionChoice, error) {
					return tc.choice, nil
				}
			})
			// A catalog that is never reached: the request is what counts.
			f.rt.opts.Catalog = CatalogCache{Source: "http://127.0.0.1:1/catalog.json", Cache: &catalog.Cache{}}
			f.push("s1", protocol.Inputs.Text("m1", "hi"))
			st := f.waitFor("s1", "the turn's end", idle)
			if lastText(st) != "ok" || st.Error != nil {
				t.Fatalf("the turn did not answer: %q, error %+v", lastText(st), st.Error)
			}
			evs, err := f.store.Read(context.Background(), "s1", 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			requested := false
			for _, ev := range evs {
				requested = requested || ev.Type == protocol.TypeModelMetaRequested
			}
			if requested != tc.want {
				t.Fatalf("ai.model.metadata.requested written: %v, want %v", requested, tc.want)
			}
		})
	}
}

// R-COMPACT-21: a step's prompt estimate counts the summary in force: after
// a custom policy's compaction with an 8,000-byte summary, every step's
// recorded inputBytes covers at least the summary (mutant lane.go:440
// subtracted it).
func TestPromptEstimateCountsTheSummary(t *testing.T) {
	summary := strings.Repeat("s", 8000)
	policy := &CustomCompaction{
		ShouldCompact: func(_ context.Context, cc CompactionContext) (bool, error) {
			for _, m := range cc.Messages {
				if strings.HasPrefix(m.ID, "summary-") {
					return false, nil // once
				}
			}
			return len(cc.Messages) >= 4, nil
		},
		Compact: func(context.Context, CompactionContext) (string, error) { return summary, nil },
	}
	f := newFixture(t, `{"default":{"text":"ok"}}`, func(a *AgentOptions) { a.Harness.CustomCompaction = policy })
	for i := range 4 {
		f.push("s1", protocol.Inputs.Text(fmt.Sprintf("m%d", i), "hi"))
		f.waitFor("s1", "the turn done", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2*(i+1) })
	}
	evs, err := f.store.Read(context.Background(), "s1", 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	compacted, after := false, 0
	for _, ev := range evs {
		switch ev.Type {
		case protocol.TypeCompactionCompleted:
			compacted = true
		case protocol.TypeGenerationCompleted:
			if !compacted {
				continue
			}
			var c protocol.GenerationCompleted
			if err := json.Unmarshal(ev.Payload, &c); err != nil {
				t.Fatal(err)
			}
			after++
			if c.InputBytes < int64(len(summary)) || c.InputTokenEstimate < protocol.TokensOf(int64(len(summary))) {
				t.Fatalf("a step after the compaction estimated %d bytes (%d tokens), under its %d-byte summary", c.InputBytes, c.InputTokenEstimate, len(summary))
			}
		}
	}
	if !compacted || after == 0 {
		t.Fatalf("compacted %v, %d steps after it: the policy did not compact", compacted, after)
	}
}

// A step's recorded inputBytes counts the tool definitions it offers, as
// they serialize (R-COMPACT-19): an agent with a tool of a 6,000-byte
// description records exactly their JSON's size more than the same agent
// without it, for the same first step (mutant lanerun.go: the toolbox's
// size left out).
func TestPromptEstimateCountsTheTools(t *testing.T) {
	tool := tools.Tool{Name: "lookup", Description: strings.Repeat("d", 6000), InputSchema: json.RawMessage(`{"type":"object"}`),
		Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`"x"`), nil }}
	inputBytes := func(with bool) int64 {
		f := newFixture(t, `{"default":{"text":"ok"}}`, func(a *AgentOptions) {
			if with {
				a.Tools = []tools.Tool{tool}
			}
		})
		f.push("s1", protocol.Inputs.Text("m1", "hi"))
		f.waitFor("s1", "the turn done", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
		evs, err := f.store.Read(context.Background(), "s1", 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == protocol.TypeGenerationCompleted {
				var c protocol.GenerationCompleted
				if err := json.Unmarshal(ev.Payload, &c); err != nil {
					t.Fatal(err)
				}
				return c.InputBytes
			}
		}
		t.Fatal("no completed generation")
		return 0
	}
	defs, err := json.Marshal([]harness.ToolDefinition{{Name: tool.Name, Description: tool.Description, InputSchema: tool.InputSchema}})
	if err != nil {
		t.Fatal(err)
	}
	without, with := inputBytes(false), inputBytes(true)
	// Without tools the definitions serialize as null.
	if got, want := with-without, int64(len(defs)-len("null")); got != want {
		t.Fatalf("inputBytes %d with the tool, %d without: %d more, want the definitions' %d bytes", with, without, got, want)
	}
}
