package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/internal/testutil"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/catalog"
	"github.com/a2-runtime/a2/harness/script"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// catalogServer serves an AI Gateway models catalog on loopback and counts
// its fetches; failing makes it answer 500.
func catalogServer(t *testing.T, failing bool) (*httptest.Server, *atomic.Int64) {
	var fetches atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		if failing {
			http.Error(w, `{"error":"down"}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"openai/gpt-5.6-terra","type":"language","context_window":400000,"max_tokens":128000}]}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &fetches
}

// R-META-01 R-META-02 R-META-04 R-META-06: the first generation with a
// model records the metadata request in its start write; a separate lookup
// records the limits without delaying the generation; two sessions share
// one catalog fetch; an unlisted model is unavailable.
func TestModelMetadataDiscovery(t *testing.T) {
	srv, fetches := catalogServer(t, false)
	cache := &catalog.Cache{}
	f := newFixture(t, `{"default":{"text":"ok"}}`, func(a *AgentOptions) {
		a.Model = harness.ModelFunc(func(_ context.Context, rc harness.ResolverContext) (harness.ModelSettings, error) {
			if len(rc.Messages) > 0 && textOf(rc.Messages[len(rc.Messages)-1]) == "luna" {
				return harness.ModelSettings{Model: "openai/gpt-5.6-luna"}, nil
			}
			return harness.ModelSettings{Model: "openai/gpt-5.6-terra"}, nil
		})
	})
	f.rt.opts.Catalog = CatalogCache{Source: srv.URL, Cache: cache}
	f.push("s1", protocol.Inputs.Text("m1", "terra"))
	st := f.waitFor("s1", "resolved", func(s *protocol.AIState) bool {
		return idle(s) && s.ModelMetadata["openai/gpt-5.6-terra"].Status == protocol.MetadataResolved
	})
	if md := st.ModelMetadata["openai/gpt-5.6-terra"]; md.ContextWindow != 400000 || md.MaxOutputTokens != 128000 {
		t.Fatalf("metadata %+v", md)
	}
	// The request rode in the start write.
	evs, _ := f.store.Read(context.Background(), "s1", 0, 1000)
	startIndex, requestIndex := uint64(0), uint64(0)
	for _, ev := range evs {
		switch ev.Type {
		case protocol.TypeGenerationStarted:
			startIndex = ev.Index
		case protocol.TypeModelMetaRequested:
			requestIndex = ev.Index
		}
	}
	if requestIndex != startIndex+1 {
		t.Fatalf("metadata request at %d, start at %d", requestIndex, startIndex)
	}
	f.push("s2", protocol.Inputs.Text("m2", "terra"))
	f.waitFor("s2", "resolved", func(s *protocol.AIState) bool {
		return idle(s) && s.ModelMetadata["openai/gpt-5.6-terra"].Status == protocol.MetadataResolved
	})
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d catalog fetches for two sessions, want 1 (shared cache)", n)
	}
	f.push("s1", protocol.Inputs.Text("m3", "luna"))
	f.waitFor("s1", "luna unavailable", func(s *protocol.AIState) bool {
		return idle(s) && s.ModelMetadata["openai/gpt-5.6-luna"].Status == protocol.MetadataUnavailable
	})
}

// R-META-05 R-META-07 R-COMPACT-23: a lookup that exhausts its retries
// leaves the entry pending and no new lookup runs each turn; an explicit
// threshold disables discovery.
func TestMetadataLookupExhausted(t *testing.T) {
	lookupBackoff = time.Millisecond
	srv, fetches := catalogServer(t, true)
	f := newFixture(t, `{"default":{"text":"ok"}}`, nil)
	f.rt.opts.Catalog = CatalogCache{Source: srv.URL, Cache: &catalog.Cache{ErrorTTL: time.Nanosecond}}
	f.push("s1", protocol.Inputs.Text("m1", "one"))
	f.waitFor("s1", "turn", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	deadline := time.Now().Add(5 * time.Second)
	for fetches.Load() < int64(lookupAttempts) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	after := fetches.Load()
	f.push("s1", protocol.Inputs.Text("m2", "two"))
	st := f.waitFor("s1", "turn 2", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 4 })
	time.Sleep(20 * time.Millisecond)
	if fetches.Load() != after || after != int64(lookupAttempts) {
		t.Fatalf("%d fetches after the first turn, %d after the second: no new lookup per turn", after, fetches.Load())
	}
	if st.ModelMetadata["script/test"].Status != protocol.MetadataPending {
		t.Fatalf("metadata %+v", st.ModelMetadata)
	}
	g := newFixture(t, `{"default":{"text":"ok"}}`, func(a *AgentOptions) {
		a.Harness.Compaction = protocol.CompactionOptions{ThresholdTokens: 80000}
	})
	g.push("s1", protocol.Inputs.Text("m1", "one"))
	st = g.waitFor("s1", "turn", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	if len(st.ModelMetadata) != 0 {
		t.Fatalf("an explicit threshold must disable discovery: %+v", st.ModelMetadata)
	}
}

// R-APPROVAL-01 R-APPROVAL-09 R-TOOL-02: a tool whose predicate asks for
// approval waits in pendingApprovals; an approval runs it, a denial records
// a denied result the model sees; independent calls run concurrently.
func TestApprovalFlow(t *testing.T) {
	var deploys, lookups atomic.Int64
	var inFlight, maxInFlight atomic.Int64
	gate := make(chan struct{})
	deploy := tools.Tool{Name: "deploy",
		NeedsApproval: func(in json.RawMessage) bool { return true },
		Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			deploys.Add(1)
			return json.RawMessage(`"deployed"`), nil
		}}
	lookup := tools.Tool{Name: "lookup", Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		n := inFlight.Add(1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-gate:
		case <-time.After(2 * time.Second):
		}
		inFlight.Add(-1)
		lookups.Add(1)
		return json.RawMessage(`1`), nil
	}}
	f := newFixture(t, `{"replies":[
		{"match":"ship","toolCalls":[{"name":"deploy","input":{}},{"name":"lookup","input":{}},{"name":"lookup","input":{}}],"then":{"text":"shipped"}},
		{"match":"again","toolCalls":[{"name":"deploy","input":{}}],"then":{"text":"not shipped"}}]}`,
		func(a *AgentOptions) { a.Tools = []tools.Tool{deploy, lookup} })
	f.push("s1", protocol.Inputs.Text("m1", "ship it"))
	st := f.waitFor("s1", "approval pending", func(s *protocol.AIState) bool { return len(s.PendingApprovals) == 1 })
	deadline := time.Now().Add(5 * time.Second)
	for maxInFlight.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	close(gate)
	if maxInFlight.Load() != 2 {
		t.Fatalf("independent tool calls ran %d at a time", maxInFlight.Load())
	}
	if deploys.Load() != 0 {
		t.Fatal("the tool ran before approval")
	}
	approvalID := onlyApproval(t, st)
	f.push("s1", protocol.Actions{View: st, NewID: func() string { return "x" }}.Approve(approvalID)...)
	f.waitFor("s1", "shipped", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "shipped" })
	if deploys.Load() != 1 || lookups.Load() != 2 {
		t.Fatalf("deploys %d lookups %d", deploys.Load(), lookups.Load())
	}
	f.push("s1", protocol.Inputs.Text("m2", "again"))
	st = f.waitFor("s1", "approval pending", func(s *protocol.AIState) bool { return len(s.PendingApprovals) == 1 })
	approvalID = onlyApproval(t, st)
	f.push("s1", protocol.Actions{View: st, NewID: func() string { return "y" }}.Deny(approvalID, "not today")...)
	f.waitFor("s1", "denied", func(s *protocol.AIState) bool { return idle(s) && lastText(s) == "not shipped" })
	if deploys.Load() != 1 {
		t.Fatal("a denied tool ran")
	}
	calls := f.model.Calls()
	last := calls[len(calls)-1]
	found := false
	for _, m := range last.Messages {
		for _, p := range m.Content {
			if p.Type == harness.ContentToolResult && p.Output != nil && p.Output.Type == "error-text" && p.Output.Text() == "not today" {
				found = true
			}
		}
	}
	if !found {
		t.Fatal("the model did not see the denial")
	}
}

// toolCrashOnce runs a turn whose step calls a "report" and a "rerun" tool
// (each counting its runs per call), crashes after a seeded number of
// synced writes, recovers, and checks the recovery policies.
func toolCrashOnce(seed uint64, runs *sync.Map, reported *int) error {
	r := rand.New(rand.NewPCG(seed, 11))
	var crashed, never atomic.Bool
	count := func(name string, crashed *atomic.Bool) tools.Tool {
		return tools.Tool{Name: name, Execute: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
			hc, err := tools.FromContext(ctx)
			if err != nil {
				return nil, err
			}
			if !crashed.Load() { // a crashed process runs nothing
				v, _ := runs.LoadOrStore(hc.Call.ToolCallID, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			}
			select {
			case <-time.After(time.Duration(seed%3) * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return json.RawMessage(`"done"`), nil
		}}
	}
	sc, _ := script.Parse([]byte(`{"default":{"toolCalls":[{"id":"shell-` + strconv.FormatUint(seed, 10) + `","name":"shell","input":{}},{"id":"fetch-` + strconv.FormatUint(seed, 10) + `","name":"fetchDocs","input":{}}],"then":{"text":"finished"}}}`))
	agent := func(model harness.Model, crashed *atomic.Bool) *Agent {
		a, _ := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script"),
			Models: func(string) (harness.Model, error) { return model, nil },
			Tools:  []tools.Tool{count("shell", crashed), count("fetchDocs", crashed)}, ToolRecovery: map[string]string{"shell": "report"}})
		return a
	}
	fs := vfs.NewCrashableMem()
	st, err := pebblestore.Open("data", pebblestore.Options{FS: testutil.CrashSafe(fs), Logger: quietPebble{}})
	if err != nil {
		return err
	}
	cs := &crashStore{Store: st, at: 2 + r.IntN(5), fs: fs, taken: make(chan struct{}), crashed: &crashed}
	rt, _ := New(cs, []*Agent{agent(script.New(sc), &crashed)}, Options{})
	go func() {
		_, _ = rt.Push(context.Background(), "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m1", "go")}, false)
	}()
	// The turn may take fewer writes than the crash point (batches grow
	// with what queues meanwhile): then the crash comes after it ended.
	for waited := time.Duration(0); ; waited += 5 * time.Millisecond {
		done := waited >= 3*time.Second
		if !done {
			select {
			case <-cs.taken:
			case <-time.After(5 * time.Millisecond):
				s, _, err := rt.State(context.Background(), "assistant", "s1")
				done = err == nil && len(s.AI.Messages) > 1 && s.AI.Active == nil
			}
		}
		cs.mu.Lock()
		if done && cs.clone == nil {
			cs.crash()
		}
		taken := cs.clone != nil
		cs.mu.Unlock()
		if taken {
			break
		}
	}
	rt.Close()
	_ = st.Close()
	st2, err := pebblestore.Open("data", pebblestore.Options{FS: cs.clone, Logger: quietPebble{}})
	if err != nil {
		return err
	}
	defer st2.Close()
	var logs testutil.SyncBuffer
	rt2, _ := New(st2, []*Agent{agent(script.New(sc), &never)}, Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	defer rt2.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, _, err := rt2.State(context.Background(), "assistant", "s1")
		if err != nil {
			return err
		}
		if len(s.AI.Messages) == 0 {
			return nil // the send itself was lost with the crash: nothing ran
		}
		if s.AI.Active == nil {
			break
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(map[string]any{"status": s.AI.Status, "active": s.AI.Active, "tools": s.AI.Tools,
				"request": s.AI.ActiveRequestID, "generation": s.AI.ActiveGeneration})
			evs, _ := st2.Read(context.Background(), "s1", 0, 1000)
			var types []string
			for _, ev := range evs {
				types = append(types, fmt.Sprintf("%d:%s", ev.Index, ev.Type))
			}
			return fmt.Errorf("the turn did not complete after recovery: %s; log %v; runtime log: %s", b, types, logs.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	id := strconv.FormatUint(seed, 10)
	if s, _, err := rt2.State(context.Background(), "assistant", "s1"); err == nil {
		for _, m := range s.AI.Messages {
			for _, p := range m.Parts {
				if p.ToolCallID == "shell-"+id && p.ErrorText == protocol.InterruptedToolError {
					*reported++
				}
			}
		}
	}
	shell, fetch := int64(0), int64(0)
	if v, ok := runs.Load("shell-" + id); ok {
		shell = v.(*atomic.Int64).Load()
	}
	if v, ok := runs.Load("fetch-" + id); ok {
		fetch = v.(*atomic.Int64).Load()
	}
	if shell > 1 {
		return fmt.Errorf("the report tool ran %d times for one call", shell)
	}
	if fetch < 1 {
		return fmt.Errorf("the rerun tool never ran")
	}
	return nil
}

// R-TOOL-13 R-TOOL-17 R-DELIVERY-05: at seeded crash points during a tool
// batch, a "report" tool runs at most once per call (a lapsed claim is
// reported as interrupted) and a "rerun" tool at least once per call. Set
// A2_TOOL_CRASH_POINTS to run more, A2_TOOL_CRASH_SEED to replay one.
func TestToolRecoveryAtCrashPoints(t *testing.T) {
	points := 200
	if v := os.Getenv("A2_TOOL_CRASH_POINTS"); v != "" {
		points, _ = strconv.Atoi(v)
	}
	first := uint64(1)
	if v := os.Getenv("A2_TOOL_CRASH_SEED"); v != "" {
		first, _ = strconv.ParseUint(v, 10, 64)
		points = 1
	}
	if testing.Short() {
		points = 20
	}
	var runs sync.Map
	reported := 0
	for seed := first; seed < first+uint64(points); seed++ {
		if err := toolCrashOnce(seed, &runs, &reported); err != nil {
			t.Fatalf("seed %d (replay with A2_TOOL_CRASH_SEED=%d): %v", seed, seed, err)
		}
	}
	t.Logf("%d crash points; at %d the report tool's lapsed call was reported as interrupted", points, reported)
	if points >= 20 && reported == 0 {
		t.Fatal("no crash point lapsed a report tool's claim: the test does not exercise recovery")
	}
}

// failingStore fails its n-th append with an I/O-like error, writing
// nothing.
type failingStore struct {
	*countingStore
	failAt int64
}

func (f *failingStore) Append(ctx context.Context, session string, expected uint64, events []protocol.Event) ([]protocol.Event, error) {
	if f.countingStore.appends.Load()+1 == f.failAt {
		f.countingStore.appends.Add(1)
		return nil, fmt.Errorf("injected: disk full")
	}
	return f.countingStore.Append(ctx, session, expected, events)
}

// AppendAsync injects as Append does.
func (f *failingStore) AppendAsync(ctx context.Context, session string, expected uint64, events []protocol.Event, done func([]protocol.Event, error)) {
	go func() { done(f.Append(ctx, session, expected, events)) }()
}

// R-GEN-17 R-DELIVERY-08: a store failure is not a turn failure: the
// session actor stops, reactivates from the store on the next request, and
// the durable work goes on (the model step runs again) until the turn
// completes; nothing the failed write held is visible.
func TestStoreFailureRetriesDurably(t *testing.T) {
	for failAt := int64(1); failAt <= 5; failAt++ {
		f := newFixture(t, `{"default":{"text":"answer after a store failure"}}`, nil)
		fs := &failingStore{countingStore: f.store, failAt: f.store.appends.Load() + failAt}
		f.recovered() // the start-up scan reads the store field
		f.rt.store = fs
		_, err := f.rt.Push(context.Background(), "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m1", "hi")}, false)
		if failAt <= 2 {
			// The push's own write failed (1: the session's claim, owner.go;
			// 2: its batch): the caller gets an error and may retry with the
			// same event (R-LOG-09 makes it safe).
			if err == nil {
				t.Fatal("a failed write was acknowledged")
			}
			f.push("s1", protocol.Inputs.Text("m1", "hi"))
		} else if err != nil {
			t.Fatalf("fail at %d: %v", failAt, err)
		}
		// No request pokes the session: it must resume by itself.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var done bool
		for after := uint64(0); !done; {
			last, err := f.store.Wait(ctx, "s1", after)
			if err != nil {
				cancel()
				t.Fatalf("fail at %d: the session did not resume by itself: %v", failAt, err)
			}
			evs, _ := f.store.Read(ctx, "s1", after, 1000)
			for _, ev := range evs {
				done = done || ev.Type == protocol.TypeGenerationCompleted
			}
			after = last
		}
		cancel()
		st := f.waitFor("s1", "turn completed after the failure", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
		if lastText(st) != "answer after a store failure" {
			t.Fatalf("fail at %d: %q", failAt, lastText(st))
		}
		if st.Error != nil {
			t.Fatalf("fail at %d: a store failure became a turn failure: %+v", failAt, st.Error)
		}
	}
}

// R-COMPACT-01 R-META-08 R-COMPACT-18 R-COMPACT-23: with compaction
// omitted, a Gateway model compacts automatically once its limits are
// known: the catalog's context window sets the default threshold (75%),
// and no compaction happens before the lookup lands.
func TestAutomaticCompactionFromTheCatalog(t *testing.T) {
	f := catalogFixture(t, nil)
	compacted := func(s *protocol.AIState) bool {
		return s.Compaction != nil && s.Compaction.Status == protocol.CompactionStatusCompleted
	}
	var st *protocol.AIState
	for i := 0; i < 12; i++ {
		f.push("s1", protocol.Inputs.Text(fmt.Sprintf("m%d", i), "go on"))
		st = f.waitFor("s1", "turn done", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2*(i+1) })
		if i == 0 {
			if compacted(st) {
				t.Fatal("compacted before the catalog lookup landed")
			}
			f.waitLookup("s1", "openai/small", protocol.MetadataResolved)
		}
		if compacted(st) {
			break
		}
	}
	if !compacted(st) {
		t.Fatalf("no automatic compaction; metadata %+v", st.ModelMetadata)
	}
	if md := st.ModelMetadata["openai/small"]; md.Status != protocol.MetadataResolved || md.ContextWindow != 800 {
		t.Fatalf("metadata %+v", md)
	}
	var threshold int64
	for _, d := range compactionParts(st) {
		if d.ThresholdTokens != nil {
			threshold = *d.ThresholdTokens
		}
	}
	if threshold != 600 {
		t.Fatalf("threshold %d, want 75%% of 800", threshold)
	}
}

// waitLookup waits until the session's catalog lookup of model has
// status: the lookup runs beside the turns, and on a loaded machine it may
// take longer than several of them.
func (f *fixture) waitLookup(session, model, status string) {
	f.t.Helper()
	f.waitFor(session, "the catalog lookup of "+model, func(s *protocol.AIState) bool {
		return s.ModelMetadata[model].Status == status
	})
}

// catalogFixture serves a Gateway model of an 800-token window from a
// local catalog, answering long enough for it to need compaction soon.
func catalogFixture(t *testing.T, mod func(*AgentOptions)) *fixture {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"openai/small","type":"language","context_window":800,"max_tokens":100}]}`))
	}))
	t.Cleanup(srv.Close)
	sc, _ := script.Parse([]byte(`{"default":{"text":"` + strings.Repeat("a fairly long answer that fills a small window. ", 4) + `"}}`))
	m := &summarizingModel{answer: script.New(sc)}
	f := newFixture(t, `{}`, func(a *AgentOptions) {
		a.Model = harness.ModelID("openai/small")
		a.Models = func(string) (harness.Model, error) { return m, nil }
		if mod != nil {
			mod(a)
		}
	})
	f.rt.opts.Catalog = CatalogCache{Source: srv.URL, Cache: &catalog.Cache{}}
	return f
}
