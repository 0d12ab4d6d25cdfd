package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/a2-runtime/a2/internal/testutil"
	"github.com/a2-runtime/a2/protocol"
)

// report is what conformance.mjs prints.
type report struct {
	Transcripts  int      `json:"transcripts"`
	Events       int      `json:"events"`
	Failures     []string `json:"failures"`
	Bytes        int      `json:"bytes"`
	LoadMs       float64  `json:"loadMs"`
	EventsPerSec float64  `json:"eventsPerSec"`
}

// runConformance builds the fold for the browser (GOOS=js GOARCH=wasm)
// and runs conformance.mjs on it in Node.js, over every fold golden of
// protocol/testfolds; it skips where Node.js is missing (fails with
// A2_REQUIRE_NODE set, as .ci/run sets it).
func runConformance(tb testing.TB, bench bool) (report, string) {
	tb.Helper()
	node := testutil.NeedNode(tb, "go test ./clients/wasm")
	wasm, wasmExec := testutil.BuildFold(tb, filepath.Join("..", ".."))
	args := []string{"conformance.mjs", wasmExec, wasm, filepath.Join("..", "..", "protocol", "testfolds")}
	if bench {
		args = append(args, "--bench")
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(node, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var r report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		tb.Fatalf("conformance.mjs: %v (%v)\nstdout: %s\nstderr: %s", err, runErr, stdout.String(), stderr.String())
	}
	return r, wasm
}

// The fold in the browser is the Go fold: the WebAssembly build folds the
// log of every transcript of protocol/testdata (whole, and event by event)
// into the state the Go fold makes of it, and refuses what is not a log.
func TestTheBrowsersFoldIsTheGoFold(t *testing.T) {
	r, _ := runConformance(t, false)
	goldens, _ := filepath.Glob(filepath.Join("..", "..", "protocol", "testfolds", "*.json"))
	if r.Transcripts == 0 || r.Transcripts != len(goldens) || r.Events == 0 {
		t.Fatalf("folded %d transcripts (%d events); want all %d goldens", r.Transcripts, r.Events, len(goldens))
	}
	for _, f := range r.Failures {
		t.Error(f)
	}
}

// The fold in the browser against the Go fold, in one run: the module's
// size (and gzipped), its load in Node.js, and events folded per second by
// each over the same logs.
func BenchmarkFoldInTheBrowser(b *testing.B) {
	r, wasm := runConformance(b, true)
	if len(r.Failures) > 0 {
		b.Fatal(r.Failures)
	}
	mod, err := os.ReadFile(wasm)
	if err != nil {
		b.Fatal(err)
	}
	var gz bytes.Buffer
	w, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	_, _ = w.Write(mod)
	_ = w.Close()
	// The Go fold, natively, over the same logs for about as long.
	var logs [][]protocol.Event
	goldens, _ := filepath.Glob(filepath.Join("..", "..", "protocol", "testfolds", "*.json"))
	for _, f := range goldens {
		raw, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		var g struct {
			Events []protocol.Event `json:"events"`
		}
		if err := json.Unmarshal(raw, &g); err != nil {
			b.Fatal(err)
		}
		logs = append(logs, g.Events)
	}
	b.ResetTimer()
	folded, start := 0, time.Now()
	for time.Since(start) < 2*time.Second {
		for _, log := range logs {
			// As the browser does: from the log's JSON.
			raw, _ := json.Marshal(log)
			var evs []protocol.Event
			_ = json.Unmarshal(raw, &evs)
			st := protocol.NewAIState()
			for _, ev := range evs {
				_ = protocol.Fold(st, ev)
			}
			_, _ = json.Marshal(st)
			folded += len(evs)
		}
	}
	native := float64(folded) / time.Since(start).Seconds()
	b.ReportMetric(float64(len(mod)), "wasm-bytes")
	b.ReportMetric(float64(gz.Len()), "wasm-gzip-bytes")
	b.ReportMetric(r.LoadMs, "load-ms")
	b.ReportMetric(r.EventsPerSec, "wasm-events/s")
	b.ReportMetric(native, "go-events/s")
	b.ReportMetric(r.EventsPerSec/native, "wasm/go")
}
