package pi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/catalog"
	"github.com/a2-runtime/a2/harness/external/externaltest"
	"github.com/a2-runtime/a2/protocol"
)

// Pi's own compaction is off in the sidecar (its summary call is a model
// call A2 could not record as a compaction): a Pi agent compacts as A2's
// own harness does, by default, once the model's limits are known. The
// compaction is a data-a2-compaction part with its summary, and the steps
// after it restore Pi's session from the summary and what followed it,
// cold (the saved session no longer matches the history).
func TestAPiAgentCompactsAsA2Does(t *testing.T) {
	// A catalog that gives the model a small window (threshold 2,025
	// tokens), served on loopback.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"acme/small","type":"language","context_window":2700}]}`))
	}))
	t.Cleanup(srv.Close)
	h := startPi(t, dirPool(t))
	models := externaltest.NewModels(t, `{"default":{"text":"`+strings.Repeat("A long answer that fills the window. ", 40)+`"}}`)
	rt := externaltest.StartWith(t, actors.AgentOptions{Model: harness.ModelID("acme/small"), Models: models.Provider, Tools: h.Tools(),
		Harness: h.HarnessOptions(models.Provider)}, actors.Options{Catalog: actors.CatalogCache{Source: srv.URL, Cache: &catalog.Cache{}}})
	var st *protocol.AIState
	for i := range 6 {
		if st = rt.Turn("s1", fmt.Sprintf("question %d", i), 60*time.Second); st.Status == protocol.StatusFailed {
			t.Fatalf("turn %d failed: %+v", i, st.Error)
		}
	}
	var summaries []string
	for _, m := range st.Messages {
		for _, p := range m.Parts {
			if protocol.IsCompactionPart(p) {
				var c struct{ Status, Summary string }
				_ = json.Unmarshal(p.Data, &c)
				if c.Status != "completed" || c.Summary == "" {
					t.Fatalf("a compaction part %s", p.Data)
				}
				summaries = append(summaries, c.Summary)
			}
		}
	}
	if len(summaries) == 0 {
		t.Fatal("no compaction in six turns past the window")
	}
	// The live calls after the first compaction: Pi's prompt, beginning
	// with the summary (A2's summary request itself has no system prompt).
	var after []harness.Request
	for i, r := range models.Requests() {
		if r.System == "" && i > 0 {
			after = nil
			continue
		}
		after = append(after, r)
	}
	if len(after) == 0 || len(after) == len(models.Requests()) {
		t.Fatalf("no Pi call after a summary request among %d calls", len(models.Requests()))
	}
	first := after[0]
	if !strings.Contains(first.System, "running inside pi") || len(first.Messages) == 0 || !strings.Contains(conversation(first.Messages[:1]), summaries[len(summaries)-1][:40]) {
		t.Fatalf("the call after the last compaction: system %d bytes, first message %q; want Pi's prompt and the summary first", len(first.System), conversation(first.Messages[:1]))
	}
}
