package protocol

import (
	"encoding/json"
	"errors"
	"testing"
)

// R-GEN-06: maxSteps is a positive integer; unset means no limit.
func TestPolicyValidate(t *testing.T) {
	var ce *ConfigError
	if err := (Policy{MaxSteps: -1}).Validate(); !errors.As(err, &ce) || ce.Option != "maxSteps" {
		t.Fatalf("negative maxSteps: %v", err)
	}
	if (Policy{}).Validate() != nil || (Policy{MaxSteps: 3}).Validate() != nil {
		t.Fatal("valid maxSteps refused")
	}
}

// R-PROGRESS-01: progress defaults to maxChunks 128 and maxDelayMs 0.
func TestProgressDefaults(t *testing.T) {
	o := ProgressOptions{}.WithDefaults()
	if o.MaxChunks != 128 || o.MaxDelayMs != 0 || DefaultMaxChunks != 128 {
		t.Fatalf("defaults %+v", o)
	}
	if (ProgressOptions{MaxChunks: 8, MaxDelayMs: 20}).WithDefaults().MaxChunks != 8 {
		t.Fatal("an explicit maxChunks was replaced")
	}
	var ce *ConfigError
	if err := (ProgressOptions{MaxChunks: -1}).Validate(); !errors.As(err, &ce) {
		t.Fatal(err)
	}
	if err := (ProgressOptions{MaxDelayMs: -1}).Validate(); !errors.As(err, &ce) {
		t.Fatal(err)
	}
	// Boundary chunks write sooner than maxDelayMs (OQ-33).
	for _, c := range []string{ChunkStart, ChunkFinish, ChunkStartStep, ChunkFinishStep, ChunkToolInputAvailable, ChunkToolApproval, ChunkTextEnd, ChunkError} {
		if !IsBoundaryChunk(UIMessageChunk{Type: c}) {
			t.Errorf("%s is a boundary chunk", c)
		}
	}
	if IsBoundaryChunk(UIMessageChunk{Type: ChunkTextDelta}) {
		t.Error("a text delta is not a boundary")
	}
}

// R-TOOL-12 R-TOOL-16: toolRecovery names known local tools (the harness's
// own included) with "rerun" or "report"; anything else is a construction
// error.
func TestValidateToolRecovery(t *testing.T) {
	tools := []ToolInfo{{Name: "shell", Local: true}, {Name: "fetchDocs", Local: true}, {Name: "web", Local: false}, {Name: "bash", Local: true}}
	report, err := ValidateToolRecovery(map[string]string{"shell": "report", "fetchDocs": "rerun", "bash": "report"}, tools)
	if err != nil || !report["shell"] || !report["bash"] || report["fetchDocs"] {
		t.Fatalf("%v %v", report, err)
	}
	var ce *ConfigError
	for _, bad := range []map[string]string{{"nope": "report"}, {"web": "report"}, {"shell": "skip"}} {
		if _, err := ValidateToolRecovery(bad, tools); !errors.As(err, &ce) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

// R-OPT-11 R-OPT-12: the plain fold never shows pending commands; a contract
// client's view folds pending application events after the AI view.
func TestContractView(t *testing.T) {
	c := deskContract(t)
	st := c.NewState()
	var o Overlay
	send := Inputs.Text("m1", "hi")
	o.Push(send)
	flag := Event{ID: "f1", Type: "ticket.flagged", Payload: json.RawMessage(`{"ticketId":"T-9"}`)}
	o.Push(flag)
	// The plain fold (reduceAIState) shows nothing optimistic (R-OPT-11).
	plain := NewAIState()
	if err := Fold(plain, send); err != nil {
		t.Fatal(err)
	}
	if plain.Starting || len(plain.Messages) != 0 {
		t.Fatal("the plain fold displayed a pending send")
	}
	v, err := c.View(st, &o)
	if err != nil {
		t.Fatal(err)
	}
	if !v.AI.Starting || len(v.AI.Messages) != 1 {
		t.Fatalf("AI view %+v", v.AI)
	}
	if got := v.App.(desk).Flagged; len(got) != 1 || got[0] != "T-9" {
		t.Fatalf("app view %+v", v.App)
	}
	if len(st.App.(desk).Flagged) != 0 {
		t.Fatal("the view changed the confirmed state")
	}
	// The confirmed event retires the pending one.
	o.Observe(flag)
	if len(o.Pending()) != 1 {
		t.Fatalf("pending %v", o.Pending())
	}
}
