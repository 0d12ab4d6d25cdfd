// Model metadata discovery: the lookup in the start write, its retries,
// and automatic compaction from the catalog's limits.

package actors

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/catalog"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/protocol"
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
	after := fetches.Load()
	f.push("s1", protocol.Inputs.Text("m2", "two"))
	st := f.waitFor("s1", "turn 2", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 4 })
	// A lookup runs for an ai.model.metadata.requested in the log: the
	// second turn wrote none.
	evs, err := f.store.Read(context.Background(), "s1", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	requests := 0
	for _, ev := range evs {
		if ev.Type == protocol.TypeModelMetaRequested {
			requests++
		}
	}
	if requests != 1 {
		t.Fatalf("%d lookups requested in the log, want the first turn's only", requests)
	}
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
