package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2-runtime/a2/bench/loadgen"
	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/protocol"
)

// R-LOG-01 R-LOG-09: ten concurrent HTTP clients push 1,000 passive
// messages (generate:false, so no model runs) to 100 sessions, each push
// retried once as a transport retry would; every message is in its
// session's log exactly once, in the order its client sent it.
func TestThousandMessagesOverHTTP(t *testing.T) {
	f := newFixture(t, `{}`, gateway.Options{}, nil)
	const clients, sessions, perClient = 10, 100, 100
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
			defer hc.CloseIdleConnections()
			for i := range perClient {
				// Client c owns sessions c*10 .. c*10+9, round robin.
				session := fmt.Sprintf("load-%03d", c*sessions/clients+i%(sessions/clients))
				id := fmt.Sprintf("c%d-m%d", c, i)
				passive := false
				m := protocol.UIMessage{ID: id, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: id}}}
				body := pushBody(protocol.Inputs.Message(m, protocol.MessageOptions{Generate: &passive}))
				var first []byte
				for attempt := range 2 {
					b, err := postJSON(ctx, hc, fmtURL(f, session), body)
					if err != nil {
						errs <- fmt.Errorf("%s: %w", id, err)
						return
					}
					if attempt == 1 && !bytes.Equal(b, first) {
						errs <- fmt.Errorf("%s: the retry answered %s, the push %s", id, b, first)
						return
					}
					first = b
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for s := range sessions {
		session := fmt.Sprintf("load-%03d", s)
		seen := map[string]bool{}
		last := -1
		for _, ev := range f.history(session) {
			if ev.Type != protocol.TypeControlRequested {
				continue
			}
			if seen[ev.ID] {
				t.Fatalf("%s holds %s twice", session, ev.ID)
			}
			seen[ev.ID] = true
			var c, i int
			if _, err := fmt.Sscanf(ev.ID, "c%d-m%d", &c, &i); err != nil || c != s/(sessions/clients) {
				t.Fatalf("%s holds %s of another client", session, ev.ID)
			}
			if i <= last {
				t.Fatalf("%s holds %s after message %d", session, ev.ID, last)
			}
			last = i
		}
		if len(seen) != perClient*clients/sessions {
			t.Fatalf("%s holds %d messages, want %d", session, len(seen), perClient*clients/sessions)
		}
		total += len(seen)
	}
	if total != clients*perClient {
		t.Fatalf("%d messages stored, want %d", total, clients*perClient)
	}
	t.Logf("%d pushes (and as many replays) over HTTP in %v", total, time.Since(start))
}

func fmtURL(f *fixture, session string) string { return f.URL + sessionsPath + session + "/events" }

func postJSON(ctx context.Context, hc *http.Client, url, body string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	var out struct{ Events []pushed }
	if err := json.Unmarshal(b, &out); err != nil || len(out.Events) != 1 || out.Events[0].Index == 0 {
		return nil, fmt.Errorf("answer %s", b)
	}
	return b, nil
}

// Twenty concurrent turns, each followed by its own client on its
// session's SSE stream (bench/loadgen, the driver of cmd/loadgen and
// BenchmarkHTTPStreams): every client sees its answer's every text delta
// and the finish chunk. Also the check that the load driver itself counts
// right.
func TestConcurrentStreamsOverHTTP(t *testing.T) {
	const streams, words = 20, 15
	text := strings.TrimSpace(strings.Repeat("word ", words))
	f := newFixture(t, `{"default":{"text":"`+text+`","delayMs":2}}`, gateway.Options{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := loadgen.Run(ctx, loadgen.Options{URL: f.URL, Streams: streams, Prefix: "concurrent", Spread: 100 * time.Millisecond})
	if len(r.Errors) > 0 {
		t.Fatalf("%d turns failed, the first: %v", len(r.Errors), r.Errors[0])
	}
	if r.Turns != streams || r.Deltas != streams*words {
		t.Fatalf("%d turns finished with %d text deltas, want %d with %d", r.Turns, r.Deltas, streams, streams*words)
	}
	if len(r.Gaps) == 0 || len(r.Gaps) > streams*(words-1) || r.Gap(0) < 0 || r.Gap(0.5) > r.Gap(1) {
		t.Fatalf("%d gaps from %v to %v: not one per pair of arrivals, sorted", len(r.Gaps), r.Gap(0), r.Gap(1))
	}
	// Each session's log holds its completed generation.
	for s := range streams {
		session := fmt.Sprintf("concurrent-%d", s)
		completed := 0
		for _, ev := range f.history(session) {
			if ev.Type == protocol.TypeGenerationCompleted {
				completed++
			}
		}
		if completed != 1 {
			t.Fatalf("%s: %d completed generations in the log, want 1", session, completed)
		}
	}
}
