package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/telemetry/otlpview"
)

// waitTrace waits (bounded: 20 s) until the spans of trace id satisfy cond.
func waitTrace(t *testing.T, r *otlpview.Receiver, id, what string, cond func([]otlpview.Span) bool) []otlpview.Span {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		spans := r.Trace(id)
		if cond(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; trace %s has:\n%s", what, id, otlpview.Tree(spans))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Two node processes, a gateway and a member, export by the standard
// OTEL_* variables to an OTLP endpoint: a push through the gateway is one
// trace across both, from the gateway's HTTP span to the member's model
// call, the member's spans the remote children of the gateway's forward
// span. The member also serves Prometheus metrics behind --metrics-addr.
func TestTelemetryAcrossNodeProcesses(t *testing.T) {
	recv := &otlpview.Receiver{}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + srv.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME=a2-test"}
	scriptFile := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(scriptFile, []byte(`{"default":{"text":"traced answer"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	metricsAddr, pprofAddr := freePort(t), freePort(t)
	memberBind := "127.0.0.1:" + strconv.Itoa(freePortPair(t))
	member := startClusterProcEnv(t, "member", "", env, "--role", "member", "--cluster", "otel", "--bind", memberBind,
		"--allow-local-store", "--data", t.TempDir(), "--script", scriptFile, "--metrics-addr", metricsAddr, "--pprof-addr", pprofAddr)
	gw := startClusterProcEnv(t, "gateway", "", env, "--role", "gateway", "--cluster", "otel",
		"--bind", "127.0.0.1:"+strconv.Itoa(freePortPair(t)), "--join", memberBind)
	gw.waitHosts(t, 1)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	body := `{"events":[{"id":"otel-m1","type":"ai.control.requested","payload":{"action":"send","message":{"id":"otel-m1","role":"user","parts":[{"type":"text","text":"hello"}]}}}]}`
	req, _ := http.NewRequest(http.MethodPost, gw.url+"/v1/agents/assistant/sessions/traced/events", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("push: %d %s", resp.StatusCode, b)
	}
	named := otlpview.Named
	spans := waitTrace(t, recv, traceID, "the member's model call in the gateway's trace", func(s []otlpview.Span) bool {
		return len(named(s, "chat")) == 1 && len(named(s, "invoke_agent")) == 1 && len(named(s, "a2.cluster.forward")) == 1
	})
	t.Logf("the trace:\n%s", otlpview.Tree(spans))
	instances := map[string]bool{}
	for _, s := range spans {
		if s.Service != "a2-test" {
			t.Fatalf("span %q has service.name %q, want OTEL_SERVICE_NAME's", s.Name, s.Service)
		}
		instances[s.Instance] = true
	}
	if !instances["gateway@"+gw.gossip] || !instances["member@"+memberBind] {
		t.Fatalf("the trace's spans come from %v, want both processes", instances)
	}
	server := named(spans, "POST")
	if len(server) != 1 || server[0].Parent != "00f067aa0ba902b7" || server[0].Instance != "gateway@"+gw.gossip {
		t.Fatalf("the gateway's server span does not continue the client's traceparent: %+v", server)
	}
	fwd, serve := named(spans, "a2.cluster.forward")[0], named(spans, "a2.cluster.serve")
	if len(serve) != 1 || serve[0].Parent != fwd.ID || serve[0].Instance != "member@"+memberBind {
		t.Fatalf("the member's serve span is not the child of the gateway's forward span: forward %+v, serve %+v", fwd, serve)
	}
	chat := named(spans, "chat")[0]
	if chat.Attrs["gen_ai.provider.name"] != "script" || chat.Attrs["gen_ai.conversation.id"] != "traced" {
		t.Fatalf("the chat span has %v", chat.Attrs)
	}

	// The member's profiler, behind --pprof-addr: its index lists the
	// profiles, and a heap profile answers.
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1"} {
		res, err := http.Get("http://" + pprofAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(page), "heap") {
			t.Fatalf("GET %s: %d %.200s", path, res.StatusCode, page)
		}
	}

	// The member's metrics, scraped.
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(res.Body)
		res.Body.Close()
		text := string(page)
		missing := ""
		for _, want := range []string{"a2_store_synced_writes", "gen_ai_client_token_usage", "http_server_request_duration_seconds",
			"a2_sessions_active", `gen_ai_provider_name="script"`} {
			if !strings.Contains(text, want) {
				missing = want
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /metrics lacks %s:\n%s", missing, tail(text, 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if member.cmd.Process == nil {
		t.Fatal("the member did not start")
	}
}
