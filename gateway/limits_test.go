package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/gateway/gatewaytest"
	"github.com/a2-runtime/a2/protocol"
)

// limitedRequest sends a request as client (the X-Client header) and
// returns the status, the Retry-After header and the body.
func limitedRequest(t *testing.T, f *fixture, client, method, path, body string) (int, string, []byte) {
	t.Helper()
	status, h, b := f.request(method, path, body, map[string]string{"X-Client": client})
	return status, h.Get("Retry-After"), b
}

// wantLimited checks a 429 RATE_LIMITED answer with a Retry-After of at
// least a second.
func wantLimited(t *testing.T, what string, status int, retry string, body []byte) {
	t.Helper()
	if status != http.StatusTooManyRequests {
		t.Fatalf("%s: %d %s, want 429", what, status, body)
	}
	if e := errorBody(t, body); e.Code != gateway.CodeRateLimited {
		t.Fatalf("%s: code %q, want %s", what, e.Code, gateway.CodeRateLimited)
	}
	if n, err := strconv.Atoi(retry); err != nil || n < 1 {
		t.Fatalf("%s: Retry-After %q, want whole seconds, at least 1", what, retry)
	}
}

// A client over its request rate, a session over its events a minute and
// a client over its live streams are each answered 429 RATE_LIMITED with
// Retry-After, and nothing changes: the session's log is as before. Other
// clients and sessions go on; a stream closed frees its place.
func TestLimitsAnswer429AndChangeNothing(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, gateway.Options{Limits: gateway.Limits{
		ClientHeader: "X-Client", RequestsPerMinute: 60, SessionEventsPerMinute: 30, SessionBytesPerMinute: 20_000, StreamsPerClient: 1}}, nil)
	passive := false
	note := func(id string) protocol.Event {
		return protocol.Inputs.Message(protocol.UIMessage{ID: id, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: id}}},
			protocol.MessageOptions{Generate: &passive})
	}

	t.Run("requests of one client", func(t *testing.T) {
		// A burst of a tenth of a minute's: 6.
		for i := range 6 {
			if status, _, b := limitedRequest(t, f, "reader", http.MethodGet, "/v1/agents", ""); status != http.StatusOK {
				t.Fatalf("request %d: %d %s", i+1, status, b)
			}
		}
		status, retry, b := limitedRequest(t, f, "reader", http.MethodGet, "/v1/agents", "")
		wantLimited(t, "the 7th request", status, retry, b)
		if status, _, b := limitedRequest(t, f, "other", http.MethodGet, "/v1/agents", ""); status != http.StatusOK {
			t.Fatalf("another client: %d %s", status, b)
		}
		if status, _, _ := limitedRequest(t, f, "reader", http.MethodGet, "/healthz", ""); status != http.StatusOK {
			t.Fatalf("the health check is limited: %d", status)
		}
	})

	t.Run("events of one session", func(t *testing.T) {
		// A burst of 3 events, from clients of their own (their request
		// rates are not what is measured).
		for i := range 3 {
			id := "e" + strconv.Itoa(i)
			if status, _, b := limitedRequest(t, f, "writer-"+id, http.MethodPost, sessionsPath+"quota/events", pushBody(note(id))); status != http.StatusOK {
				t.Fatalf("push %d: %d %s", i+1, status, b)
			}
		}
		before := f.lastIndex("quota")
		status, retry, b := limitedRequest(t, f, "writer-late", http.MethodPost, sessionsPath+"quota/events", pushBody(note("e-late")))
		wantLimited(t, "the 4th event", status, retry, b)
		if after := f.lastIndex("quota"); after != before {
			t.Fatalf("the refused push changed the log: index %d, was %d", after, before)
		}
		// More events at once than a burst: refused whole.
		status, retry, b = limitedRequest(t, f, "writer-big", http.MethodPost, sessionsPath+"big/events", pushBody(note("b1"), note("b2"), note("b3"), note("b4")))
		wantLimited(t, "4 events in one push", status, retry, b)
		if n := f.lastIndex("big"); n != 0 {
			t.Fatalf("the refused push wrote %d events", n)
		}
		// Another session is not affected.
		if status, _, b := limitedRequest(t, f, "writer-x", http.MethodPost, sessionsPath+"elsewhere/events", pushBody(note("x1"))); status != http.StatusOK {
			t.Fatalf("another session: %d %s", status, b)
		}
	})

	t.Run("bytes of one session", func(t *testing.T) {
		// A burst of 2,000 bytes: a message of 3,000 is refused whole, and
		// its event is not counted (a small one goes through after it).
		big := protocol.Inputs.Message(protocol.UIMessage{ID: "big", Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: strings.Repeat("x", 3000)}}},
			protocol.MessageOptions{Generate: &passive})
		status, retry, b := limitedRequest(t, f, "bytes-1", http.MethodPost, sessionsPath+"heavy/events", pushBody(big))
		wantLimited(t, "3,000 bytes", status, retry, b)
		if !strings.Contains(string(b), "too many bytes") {
			t.Fatalf("the refusal does not say bytes: %s", b)
		}
		if n := f.lastIndex("heavy"); n != 0 {
			t.Fatalf("the refused push wrote %d events", n)
		}
		for i := range 3 {
			id := "light" + strconv.Itoa(i)
			if status, _, b := limitedRequest(t, f, "bytes-"+id, http.MethodPost, sessionsPath+"heavy/events", pushBody(note(id))); status != http.StatusOK {
				t.Fatalf("small push %d after the refused one: %d %s", i+1, status, b)
			}
		}
	})

	t.Run("live streams of one client", func(t *testing.T) {
		f.push("streamed", note("s1"))
		open := func() (*http.Response, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.URL+sessionsPath+"streamed/stream", nil)
			req.Header.Set("X-Client", "watcher")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			return resp, cancel
		}
		first, stop := open()
		if first.StatusCode != http.StatusOK {
			t.Fatalf("the first stream: %d", first.StatusCode)
		}
		second, stop2 := open()
		b, _ := io.ReadAll(second.Body)
		second.Body.Close()
		stop2()
		wantLimited(t, "a second stream", second.StatusCode, second.Header.Get("Retry-After"), b)
		stop()
		first.Body.Close()
		// The first stream's end frees its place (the server notices the
		// client's close).
		deadline := time.Now().Add(10 * time.Second)
		for {
			third, stop3 := open()
			third.Body.Close()
			stop3()
			if third.StatusCode == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a stream after the first closed: %d", third.StatusCode)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// Without a client header, the machine's own processes (loopback) are not
// limited; a negative limit is off.
func TestLimitsSpareLoopbackAndTurnOff(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, gateway.Options{Limits: gateway.Limits{RequestsPerMinute: 6}}, nil)
	for i := range 20 {
		if status, b := f.do(http.MethodGet, "/v1/agents", "", nil); status != http.StatusOK {
			t.Fatalf("loopback request %d: %d %s", i+1, status, b)
		}
	}
	g := newFixture(t, `{"default":{"text":"ok"}}`, gateway.Options{Limits: gateway.Limits{ClientHeader: "X-Client", RequestsPerMinute: -1}}, nil)
	for i := range 20 {
		if status, _, b := limitedRequest(t, g, "many", http.MethodGet, "/v1/agents", ""); status != http.StatusOK {
			t.Fatalf("request %d with the limit off: %d %s", i+1, status, b)
		}
	}
}

// A session at its size quota answers a client's push 413 QUOTA_EXCEEDED,
// through a single node's router and a cluster's alike, and appends
// nothing.
func TestSessionQuotaIs413(t *testing.T) {
	n := gatewaytest.Start(t, gatewaytest.Options{Script: `{"default":{"text":"ok"}}`, Runtime: actors.Options{MaxSessionBytes: 600}})
	f := wrapNode(t, n)
	passive := false
	note := func(id string) protocol.Event {
		return protocol.Inputs.Message(protocol.UIMessage{ID: id, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: strings.Repeat("x", 200)}}},
			protocol.MessageOptions{Generate: &passive})
	}
	var status int
	var b []byte
	for i := 0; i < 20; i++ {
		if status, b = f.do(http.MethodPost, sessionsPath+"full/events", pushBody(note("q"+strconv.Itoa(i))), nil); status != http.StatusOK {
			break
		}
	}
	if status != http.StatusRequestEntityTooLarge {
		t.Fatalf("pushes past the quota: %d %s, want 413", status, b)
	}
	if e := errorBody(t, b); e.Code != gateway.CodeQuota || !strings.Contains(e.Message, "quota of 600") {
		t.Fatalf("the answer: %+v", e)
	}
	before := f.lastIndex("full")
	if status, _ := f.do(http.MethodPost, sessionsPath+"full/events", pushBody(note("again")), nil); status != http.StatusRequestEntityTooLarge || f.lastIndex("full") != before {
		t.Fatalf("a push at the quota: %d, index %d (was %d)", status, f.lastIndex("full"), before)
	}
}
