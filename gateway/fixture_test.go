package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/gateway/gatewaytest"
	"github.com/a2-runtime/a2/protocol"
)

// fixture is a node over real HTTP on loopback (gatewaytest.Node) with
// helpers for raw requests.
type fixture struct {
	*gatewaytest.Node
	t *testing.T
}

// newFixture starts a node; wrap, when set, wraps the Router the gateway
// serves.
func newFixture(t *testing.T, scriptJSON string, opts gateway.Options, wrap func(gateway.Router) gateway.Router) *fixture {
	t.Helper()
	return wrapNode(t, gatewaytest.Start(t, gatewaytest.Options{Script: scriptJSON, Gateway: opts, Wrap: wrap}))
}

func wrapNode(t *testing.T, n *gatewaytest.Node) *fixture {
	return &fixture{Node: n, t: t}
}

// do sends a request and returns the status and body.
func (f *fixture) do(method, path string, body string, header map[string]string) (int, []byte) {
	f.t.Helper()
	status, _, b := f.request(method, path, body, header)
	return status, b
}

// request is do that also returns the answer's headers.
func (f *fixture) request(method, path string, body string, header map[string]string) (int, http.Header, []byte) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, f.URL+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

const sessionsPath = "/v1/agents/assistant/sessions/"

// push pushes events to a session through browser ingress and requires 200.
func (f *fixture) push(session string, evs ...protocol.Event) []pushed {
	f.t.Helper()
	status, b := f.do(http.MethodPost, sessionsPath+session+"/events", pushBody(evs...), nil)
	if status != http.StatusOK {
		f.t.Fatalf("push: %d %s", status, b)
	}
	var out struct{ Events []pushed }
	if err := json.Unmarshal(b, &out); err != nil {
		f.t.Fatal(err)
	}
	return out.Events
}

type pushed struct {
	ID    string `json:"id"`
	Type  string `json:"type"`
	Index uint64 `json:"index"`
}

func pushBody(evs ...protocol.Event) string {
	type wire struct {
		ID      string          `json:"id"`
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload"`
	}
	var body struct {
		Events []wire `json:"events"`
	}
	for _, ev := range evs {
		body.Events = append(body.Events, wire{ev.ID, ev.Type, ev.Payload})
	}
	b, _ := json.Marshal(body)
	return string(b)
}

// state reads the session's state over HTTP.
func (f *fixture) state(session string) (*protocol.AIState, uint64) {
	f.t.Helper()
	status, b := f.do(http.MethodGet, sessionsPath+session+"/state", "", nil)
	if status != http.StatusOK {
		f.t.Fatalf("state: %d %s", status, b)
	}
	var out struct {
		Index uint64          `json:"index"`
		State json.RawMessage `json:"state"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		f.t.Fatal(err)
	}
	st, err := protocol.UnmarshalState(out.State)
	if err != nil {
		f.t.Fatal(err)
	}
	return st, out.Index
}

// waitState polls the state until cond holds (bounded: 10 s).
func (f *fixture) waitState(session, what string, cond func(*protocol.AIState) bool) (*protocol.AIState, uint64) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, index := f.state(session)
		if cond(st) {
			return st, index
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(st)
			f.t.Fatalf("timed out waiting for %s; state %s", what, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// history reads the whole log of a session over HTTP, page by page.
func (f *fixture) history(session string) []protocol.Event {
	f.t.Helper()
	var all []protocol.Event
	after := uint64(0)
	for {
		status, b := f.do(http.MethodGet, fmt.Sprintf("%s%s/events?after=%d&limit=1000", sessionsPath, session, after), "", nil)
		if status != http.StatusOK {
			f.t.Fatalf("history: %d %s", status, b)
		}
		var page struct {
			Events []protocol.Event `json:"events"`
			Next   uint64           `json:"next"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			f.t.Fatal(err)
		}
		all = append(all, page.Events...)
		if len(page.Events) == 0 {
			return all
		}
		after = page.Next
	}
}

func (f *fixture) lastIndex(session string) uint64 {
	f.t.Helper()
	n, err := f.Store.LastIndex(context.Background(), session)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func idle(s *protocol.AIState) bool { return s.Active == nil && len(s.Inbox.Items) == 0 }

func lastText(s *protocol.AIState) string {
	if len(s.Messages) == 0 {
		return ""
	}
	var b strings.Builder
	for _, p := range s.Messages[len(s.Messages)-1].Parts {
		if p.Type == protocol.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// sseItem is one thing read from a stream: an event, or a comment.
type sseItem struct {
	ID, Event, Data string
	Comment         string
}

// sseConn reads a stream in the background.
type sseConn struct {
	resp   *http.Response
	items  chan sseItem
	cancel context.CancelFunc
	done   chan struct{}
}

// openStream opens GET .../stream with an optional query and Last-Event-ID.
func (f *fixture) openStream(session, query, lastEventID string) *sseConn {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.URL+sessionsPath+session+"/stream"+query, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		f.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		f.t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		f.t.Fatalf("stream content type %q", ct)
	}
	c := &sseConn{resp: resp, items: make(chan sseItem, 1024), cancel: cancel, done: make(chan struct{})}
	go c.read()
	f.t.Cleanup(c.close)
	return c
}

func (c *sseConn) read() {
	defer close(c.done)
	defer close(c.items)
	rd := bufio.NewReader(c.resp.Body)
	var cur sseItem
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if cur.Data != "" {
				c.items <- cur
			}
			cur = sseItem{}
		case strings.HasPrefix(line, ":"):
			c.items <- sseItem{Comment: strings.TrimSpace(line[1:])}
		default:
			k, v, _ := strings.Cut(line, ": ")
			switch k {
			case "id":
				cur.ID = v
			case "event":
				cur.Event = v
			case "data":
				cur.Data = v
			}
		}
	}
}

func (c *sseConn) close() {
	c.cancel()
	c.resp.Body.Close()
	<-c.done
}

// nextEvent returns the next event (skipping comments), failing the test
// after the timeout. ok is false when the stream ended.
func (c *sseConn) nextEvent(t *testing.T, timeout time.Duration) (protocol.Event, bool) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case it, ok := <-c.items:
			if !ok {
				return protocol.Event{}, false
			}
			if it.Comment != "" || it.Data == "" {
				continue
			}
			var ev protocol.Event
			if err := json.NewDecoder(bytes.NewReader([]byte(it.Data))).Decode(&ev); err != nil {
				t.Fatalf("stream data does not decode: %v: %s", err, it.Data)
			}
			if it.ID != fmt.Sprint(ev.Index) || it.Event != ev.Type {
				t.Fatalf("SSE id %q / event %q do not match the envelope (index %d, type %s)", it.ID, it.Event, ev.Index, ev.Type)
			}
			return ev, true
		case <-timer.C:
			t.Fatalf("no stream event within %v", timeout)
		}
	}
}

// readUntil reads events until one has index last.
func (c *sseConn) readUntil(t *testing.T, last uint64) []protocol.Event {
	t.Helper()
	var out []protocol.Event
	for {
		ev, ok := c.nextEvent(t, 10*time.Second)
		if !ok {
			t.Fatalf("the stream ended after %d events, before index %d", len(out), last)
		}
		out = append(out, ev)
		if ev.Index >= last {
			return out
		}
	}
}

// errorBody decodes a JSON error answer.
func errorBody(t *testing.T, b []byte) gateway.Error {
	t.Helper()
	var e struct {
		Error *gateway.Error `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Error == nil {
		t.Fatalf("not a JSON error body: %s", b)
	}
	return *e.Error
}
