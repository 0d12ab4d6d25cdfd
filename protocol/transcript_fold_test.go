package protocol

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fold goldens: for each transcript of testdata/, its whole log and the
// state the fold makes of it, as JSON in testfolds/. Another build of the
// fold (the browser's, clients/wasm) folds the same logs and must make the
// same states; here the Go fold is held to them. `go test ./protocol
// -rewrite` regenerates them with the transcripts.

// foldGolden is one transcript's log and final state.
type foldGolden struct {
	Transcript string          `json:"transcript"`
	Events     []Event         `json:"events"`
	State      json.RawMessage `json:"state"`
}

// checkFoldGolden compares a transcript's log and state with its golden, or
// writes it under -rewrite.
func checkFoldGolden(t *testing.T, path string, log []Event, st *AIState) {
	t.Helper()
	state, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	file := filepath.Join("testfolds", name+".json")
	if f := flag.Lookup("rewrite"); f != nil && f.Value.String() == "true" {
		b, err := json.MarshalIndent(foldGolden{Transcript: filepath.ToSlash(path), Events: log, State: state}, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll("testfolds", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%s: no fold golden (go test ./protocol -rewrite writes it): %v", path, err)
	}
	var g foldGolden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	logJSON, _ := json.Marshal(log)
	goldenLog, _ := json.Marshal(g.Events)
	if !bytes.Equal(logJSON, goldenLog) {
		t.Fatalf("%s: the transcript's log differs from its fold golden's: go test ./protocol -rewrite, and review the diff", file)
	}
	// The golden's state, folded afresh from its events, is the state.
	fresh := NewAIState()
	for _, ev := range g.Events {
		if err := Fold(fresh, ev); err != nil {
			t.Fatalf("%s: event %d: %v", file, ev.Index, err)
		}
	}
	again, _ := json.Marshal(fresh)
	var want bytes.Buffer
	_ = json.Compact(&want, g.State)
	if !bytes.Equal(state, want.Bytes()) || !bytes.Equal(again, want.Bytes()) {
		t.Fatalf("%s: the fold's state differs from the golden's: go test ./protocol -rewrite, and review the diff", file)
	}
}

// Every fold golden belongs to a transcript: none is left from a
// transcript that was renamed or removed.
func TestEveryFoldGoldenHasItsTranscript(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testfolds", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fold goldens in testfolds/ (%v)", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if _, err := os.Stat(filepath.Join("testdata", name+".txt")); err != nil {
			t.Errorf("%s has no transcript testdata/%s.txt: remove it", f, name)
		}
	}
}
