package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2"
	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/protocol"
)

// The example serves a turn: the model (a script, A2_SCRIPT) looks a
// ticket up and escalates it; the escalation waits for the user's
// approval, runs once approved, records its application event, and the
// reducer's state shows it.
func TestHelpdeskServesATurn(t *testing.T) {
	dir := t.TempDir()
	// The script the example ships, which docs/embedding.md runs it with.
	t.Setenv("A2_SCRIPT", "script.json")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	served := make(chan error, 1)
	srvCtx, stop := context.WithCancel(ctx)
	go func() { served <- run(srvCtx, a2.Options{Listener: ln, Data: filepath.Join(dir, "data")}) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("the example's Serve returned %v", err)
		}
	}()
	url := "http://" + ln.Addr().String()
	c, err := client.New(url, "helpdesk", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Open(ctx, "ticket-chat")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Send(ctx, "Please escalate T-7"); err != nil {
		t.Fatal(err)
	}
	var approval string
	if err := s.Wait(ctx, func(st *protocol.AIState) bool {
		for id := range st.PendingApprovals {
			approval = id
		}
		return approval != ""
	}); err != nil {
		t.Fatalf("no approval was asked for: %v", err)
	}
	if _, err := s.Approve(ctx, approval); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(ctx, func(st *protocol.AIState) bool { return st.Active == nil && len(st.Messages) == 2 }); err != nil {
		t.Fatalf("the turn did not end: %v", err)
	}
	st := s.State()
	var text string
	outputs := map[string]string{}
	for _, p := range st.Messages[1].Parts {
		if p.Type == protocol.PartText {
			text += p.Text
		}
		if p.IsToolPart() {
			outputs[p.ToolNameOf()] = string(p.Output)
		}
	}
	if !strings.HasSuffix(text, "the on-call engineer is paged.") || outputs["escalate_ticket"] != `{"paged":true}` || outputs["lookup_ticket"] == "" {
		t.Fatalf("the answer %q with tool outputs %v", text, outputs)
	}
	resp, err := http.Get(url + "/v1/agents/helpdesk/sessions/ticket-chat/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		State struct {
			Escalated []string `json:"escalated"`
		} `json:"state"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if len(body.State.Escalated) != 1 || body.State.Escalated[0] != "T-7" {
		t.Fatalf("the reducer's state lists %v escalated, want [T-7]", body.State.Escalated)
	}
}

// The example runs beside a node: its address and data directory are not
// the node's (127.0.0.1:8080, ./data), unless the environment says so.
func TestHelpdeskRunsBesideANode(t *testing.T) {
	o := options(func(string) string { return "" })
	if o.Addr == "127.0.0.1:8080" || o.Data == "./data" || o.Addr == "" || o.Data == "" {
		t.Fatalf("the example's defaults are the node's: %+v", o)
	}
	env := map[string]string{"A2_ADDR": "127.0.0.1:9999", "A2_DATA": "/tmp/x"}
	if o := options(func(k string) string { return env[k] }); o.Addr != "127.0.0.1:9999" || o.Data != "/tmp/x" {
		t.Fatalf("A2_ADDR and A2_DATA are not taken: %+v", o)
	}
}
