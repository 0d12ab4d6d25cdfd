package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/gateway/gatewaytest"
	"github.com/a2-runtime/a2/protocol"
)

// proxy serves a node through a handler of the test's choosing, on its own
// loopback server; intercept returns true when it answered the request
// itself.
func proxy(t *testing.T, n *gatewaytest.Node, intercept func(w http.ResponseWriter, r *http.Request) bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if intercept != nil && intercept(w, r) {
			return
		}
		n.Gateway.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		n.Gateway.Close()
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

func newClient(t *testing.T, url string, opts client.Options) *client.Client {
	t.Helper()
	if opts.MinBackoff == 0 {
		opts.MinBackoff = time.Millisecond
		opts.MaxBackoff = 20 * time.Millisecond
	}
	c, err := client.New(url, gatewaytest.Agent, opts)
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent() != gatewaytest.Agent {
		t.Fatalf("client for agent %q says %q", gatewaytest.Agent, c.Agent())
	}
	if a, b := c.NewID(), c.NewID(); a == "" || a == b {
		t.Fatalf("NewID gave %q then %q, want two fresh IDs", a, b)
	}
	return c
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dropConnection closes the client's connection without an answer.
func dropConnection(t *testing.T, w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	conn.Close()
}

// R-LOG-04 R-LOG-09: a push whose answer is lost after it was appended,
// then answered 503, is retried with the same event IDs (an ID assigned by
// the client included) and the retry replays: the log holds each event
// once, and the push returns the persisted events.
func TestPushRetriesWithTheSameIDs(t *testing.T) {
	n := gatewaytest.Start(t, gatewaytest.Options{Script: `{"default":{"text":"ok"}}`})
	var mu sync.Mutex
	var bodies [][]byte
	attempt := 0
	url := proxy(t, n, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost {
			return false
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		attempt++
		k := attempt
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		switch k {
		case 1: // appended, but the answer is lost
			n.Gateway.ServeHTTP(httptest.NewRecorder(), r)
			dropConnection(t, w)
			return true
		case 2:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"code":"UNAVAILABLE","message":"busy"}}`)
			return true
		}
		return false
	})
	c := newClient(t, url, client.Options{})
	pause := protocol.Inputs.Pause(protocol.PauseAfterTurn) // the client assigns its ID
	out, err := c.Push(testContext(t), "s1", protocol.Inputs.Text("m1", "Hi"), pause)
	if err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 3 || !bytes.Equal(bodies[0], bodies[1]) || !bytes.Equal(bodies[1], bodies[2]) {
		t.Fatalf("%d attempts, bodies differ:\n%s", len(bodies), bytes.Join(bodies, []byte("\n")))
	}
	// Index 2: the session's first write starts with ai.session.created.
	if len(out) != 2 || out[0].ID != "m1" || out[0].Index != 2 || out[1].ID == "" || out[1].Index <= out[0].Index || out[1].Session != "s1" {
		t.Fatalf("push returned %+v", out)
	}
	hist, _, err := c.History(testContext(t), "s1", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, ev := range hist {
		count[ev.ID]++
	}
	if count["m1"] != 1 || count[out[1].ID] != 1 {
		t.Fatalf("the log holds m1 %d times and the pause %d times", count["m1"], count[out[1].ID])
	}
}

// A push refused for its content is not retried; one that stays
// unavailable gives up after MaxAttempts with ErrUnavailable.
func TestPushErrors(t *testing.T) {
	n := gatewaytest.Start(t, gatewaytest.Options{})
	var posts atomic.Int64
	unavailable := atomic.Bool{}
	url := proxy(t, n, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost {
			posts.Add(1)
			if unavailable.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return true
			}
		}
		return false
	})
	c := newClient(t, url, client.Options{MaxAttempts: 3})
	bad := protocol.Event{ID: "x", Type: protocol.TypeGenerationRequested, Payload: []byte(`{}`)}
	_, err := c.Push(testContext(t), "s1", bad)
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Field != "events[0].type" || !errors.Is(err, client.ErrInvalid) || posts.Load() != 1 {
		t.Fatalf("bad push: %v after %d attempts", err, posts.Load())
	}
	unavailable.Store(true)
	posts.Store(0)
	_, err = c.Push(testContext(t), "s1", protocol.Inputs.Text("m1", "Hi"))
	if !errors.Is(err, client.ErrUnavailable) || posts.Load() != 3 {
		t.Fatalf("unavailable push: %v after %d attempts", err, posts.Load())
	}
	if _, _, err := newClient(t, url, client.Options{}).State(testContext(t), "a2.ai:bad"); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("state of a reserved session ID: %v", err)
	}
	if _, err := client.New("ftp://x", "a", client.Options{}); err == nil {
		t.Fatal("an ftp base URL was accepted")
	}
}

// cuttingWriter ends a stream's response in the middle of the event after
// the first `left` events, as a dropped connection would.
type cuttingWriter struct {
	http.ResponseWriter
	left int
	prev byte
	cut  bool
}

var errCut = errors.New("cut")

func (w *cuttingWriter) Write(b []byte) (int, error) {
	if w.cut {
		return 0, errCut
	}
	for i := range b {
		atLineStart := (i == 0 && w.prev == '\n') || (i > 0 && b[i-1] == '\n')
		if atLineStart && bytes.HasPrefix(b[i:], []byte("id: ")) {
			if w.left == 0 {
				end := min(i+20, len(b))
				_, _ = w.ResponseWriter.Write(b[:end])
				w.cut = true
				return end, errCut
			}
			w.left--
		}
	}
	w.prev = b[len(b)-1]
	return w.ResponseWriter.Write(b)
}

func (w *cuttingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *cuttingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// The client's stream reconnects by itself when the connection drops in
// the middle of an event, resuming with Last-Event-ID from the last event
// it delivered: across many cuts during a live turn it delivers every event
// of the log exactly once, in order.
func TestStreamReconnectsFromTheLastEvent(t *testing.T) {
	n := gatewaytest.Start(t, gatewaytest.Options{Script: `{"default":{"text":"one two three four five six seven eight nine ten","delayMs":2}}`})
	var mu sync.Mutex
	var resumes []string
	url := proxy(t, n, func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasSuffix(r.URL.Path, "/stream") {
			return false
		}
		mu.Lock()
		resumes = append(resumes, r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		n.Gateway.ServeHTTP(&cuttingWriter{ResponseWriter: w, left: 3}, r)
		return true
	})
	c := newClient(t, url, client.Options{})
	ctx := testContext(t)
	events, errc := c.Stream(ctx, "s1", 0)
	if _, err := c.Push(ctx, "s1", protocol.Inputs.Text("m1", "Hi")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Push(ctx, "s1", protocol.Inputs.Text("m2", "Again")); err != nil {
		t.Fatal(err)
	}
	var got []protocol.Event
	var last uint64
	for {
		if st, index, err := c.State(ctx, "s1"); err != nil {
			t.Fatal(err)
		} else if st.AI.Active == nil && len(st.AI.Messages) == 4 {
			last = index
		}
		if last != 0 && len(got) > 0 && got[len(got)-1].Index >= last {
			break
		}
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended: %v", <-errc)
			}
			got = append(got, ev)
		case <-ctx.Done():
			t.Fatalf("timed out with %d events", len(got))
		}
	}
	for i, ev := range got {
		if ev.Index != uint64(i+1) {
			t.Fatalf("event %d has index %d", i, ev.Index)
		}
	}
	hist, _, _ := c.History(ctx, "s1", 0, 1000)
	if len(hist) != len(got) {
		t.Fatalf("delivered %d events, the log has %d", len(got), len(hist))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(resumes) < int(last)/3 || resumes[0] != "" || resumes[1] != "3" || resumes[2] != "6" {
		t.Fatalf("%d connections for %d events, Last-Event-ID %v", len(resumes), last, resumes)
	}
}

// A stream that goes quiet (no event, no heartbeat) is reconnected after
// StreamIdleTimeout; a stream the node refuses (4xx) ends with its error.
func TestStreamIdleTimeoutAndPermanentError(t *testing.T) {
	n := gatewaytest.Start(t, gatewaytest.Options{})
	var conns atomic.Int64
	url := proxy(t, n, func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasSuffix(r.URL.Path, "/stream") && conns.Add(1) == 1 {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			<-r.Context().Done() // silent until the client gives up
			return true
		}
		return false
	})
	c := newClient(t, url, client.Options{StreamIdleTimeout: 100 * time.Millisecond})
	ctx := testContext(t)
	events, _ := c.Stream(ctx, "s1", 0)
	if _, err := c.Push(ctx, "s1", protocol.Inputs.Text("m1", "Hi")); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.Type == protocol.TypeSessionCreated {
			ev = <-events // the runtime creates the session in its first write
		}
		if ev.ID != "m1" || conns.Load() < 2 {
			t.Fatalf("first event %s over %d connections", ev.ID, conns.Load())
		}
	case <-ctx.Done():
		t.Fatal("the quiet stream was not reconnected")
	}

	other, err := client.New(url, "nobody", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	events, errc := other.Stream(ctx, "s1", 0)
	if _, ok := <-events; ok {
		t.Fatal("a stream of an unknown agent delivered an event")
	}
	if err := <-errc; !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("unknown agent's stream: %v", err)
	}
}

// Turn is a push and its stream in one request: it delivers the session's
// events from the first pushed one to the end of the turn, each once and
// in order, resuming with a bounded GET when the connection drops, then
// closes; a refused push ends with its error and appends nothing.
func TestTurnStreamsItsEventsAndResumes(t *testing.T) {
	n := gatewaytest.Start(t, gatewaytest.Options{Script: `{"default":{"text":"one two three four five six seven eight","delayMs":2}}`})
	var mu sync.Mutex
	var requests []string
	url := proxy(t, n, func(w http.ResponseWriter, r *http.Request) bool {
		streaming := r.URL.Query().Get("stream") == "1" || strings.HasSuffix(r.URL.Path, "/stream")
		if !streaming {
			return false
		}
		mu.Lock()
		requests = append(requests, r.Method+" "+r.URL.RawQuery)
		mu.Unlock()
		n.Gateway.ServeHTTP(&cuttingWriter{ResponseWriter: w, left: 3}, r)
		return true
	})
	c := newClient(t, url, client.Options{})
	ctx := testContext(t)
	if _, err := c.Push(ctx, "s1", protocol.Inputs.Text("m1", "first")); err != nil {
		t.Fatal(err)
	}
	for {
		st, _, err := c.State(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		if st.AI.Active == nil && len(st.AI.Messages) == 2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, before, _ := c.State(ctx, "s1")
	events, errc := c.Turn(ctx, "s1", protocol.Inputs.Text("m2", "second"))
	var got []protocol.Event
	for ev := range events {
		got = append(got, ev)
	}
	select {
	case err := <-errc:
		t.Fatalf("the turn failed: %v", err)
	default:
	}
	st, last, err := c.State(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[0].Index != before+1 || got[len(got)-1].Index != last || st.AI.Active != nil {
		t.Fatalf("the turn delivered %d events (first %v), want %d to %d", len(got), got[:min(1, len(got))], before+1, last)
	}
	for i, ev := range got {
		if ev.Index != before+1+uint64(i) {
			t.Fatalf("event %d has index %d", i, ev.Index)
		}
	}
	mu.Lock()
	if len(requests) < 2 || !strings.HasPrefix(requests[0], "POST stream=1") || !strings.HasPrefix(requests[1], "GET until=idle") {
		t.Fatalf("the turn's requests: %v, want the push that streams, then bounded resumptions", requests)
	}
	mu.Unlock()

	// A refused push: its error, nothing appended, the channel closed.
	bad := protocol.Inputs.Text("m3", "third")
	bad.Payload = []byte(`{"action":"send","message":{"id":"m3","role":"robot","parts":[]}}`)
	events, errc = c.Turn(ctx, "s1", bad)
	for range events {
		t.Fatal("a refused turn delivered an event")
	}
	if err := <-errc; !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("a refused turn: %v, want ErrInvalid", err)
	}
	if _, now, _ := c.State(ctx, "s1"); now != last {
		t.Fatalf("a refused turn moved the log from %d to %d", last, now)
	}
}
