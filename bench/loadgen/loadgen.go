// Package loadgen drives concurrent turns through a node's HTTP API, each
// followed by its own client on the session's Server-Sent Events stream,
// and measures what the clients see: every text delta arrives, and the
// gaps between consecutive ones. bench/cmd/loadgen runs it against a node;
// the gateway's BenchmarkHTTPStreams runs it in-process.
package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/protocol"
)

// Options configure Run.
type Options struct {
	// URL is the node's base URL, such as http://127.0.0.1:8080.
	URL string
	// Agent is the agent's name (default "assistant").
	Agent string
	// Streams is the number of concurrent turns, each in a session of its
	// own named Prefix-<n>.
	Streams int
	Prefix  string
	// Spread is the time over which the streams start, evenly (default one
	// second), so that they do not tick in step.
	Spread time.Duration
	// Text is the user message of every turn (default "hi").
	Text string
	// Timeout bounds each turn (default one minute).
	Timeout time.Duration
	// Client is the HTTP client (default: one that keeps a connection per
	// stream).
	Client *http.Client
}

// Result is what the clients saw.
type Result struct {
	Turns  int             // turns that ended with their finish chunk
	Deltas int             // text deltas received, over all turns
	Gaps   []time.Duration // between consecutive deltas of a stream, sorted
	Errors []error         // one per failed turn
}

// Gap returns the q-quantile of the gaps (0 for none).
func (r Result) Gap(q float64) time.Duration {
	if len(r.Gaps) == 0 {
		return 0
	}
	return r.Gaps[int(q*float64(len(r.Gaps)-1))]
}

// Run runs the turns and waits for them all.
func Run(ctx context.Context, o Options) Result {
	if o.Agent == "" {
		o.Agent = "assistant"
	}
	if o.Spread == 0 {
		o.Spread = time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: max(o.Streams, 2)}}
	}
	var (
		mu  sync.Mutex
		res Result
		wg  sync.WaitGroup
	)
	pusher, err := client.New(o.URL, o.Agent, client.Options{HTTPClient: o.Client})
	if err != nil {
		res.Errors = append(res.Errors, err)
		return res
	}
	for s := 0; s < o.Streams; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-time.After(time.Duration(s) * o.Spread / time.Duration(o.Streams)):
			case <-ctx.Done():
				return
			}
			tctx, cancel := context.WithTimeout(ctx, o.Timeout)
			defer cancel()
			gaps, deltas, err := turn(tctx, o.Client, pusher, o.URL, o.Agent, fmt.Sprintf("%s-%d", o.Prefix, s), o.Text)
			mu.Lock()
			defer mu.Unlock()
			res.Deltas += deltas
			res.Gaps = append(res.Gaps, gaps...)
			if err != nil {
				res.Errors = append(res.Errors, err)
				return
			}
			res.Turns++
		}()
	}
	wg.Wait()
	slices.Sort(res.Gaps)
	return res
}

// turn opens session's stream, sends text as a user message (with the Go
// client), and reads the stream until the answer's finish chunk. It returns
// the gaps between consecutive text deltas (the deltas of one event arrive
// together: one gap) and the number of deltas; an error when the stream
// ends before the finish chunk or a request fails. The stream is read as
// raw server-sent events, not through the client's folding session, so
// that the clients cost little beside the node they measure.
func turn(ctx context.Context, hc *http.Client, pusher *client.Client, base, agent, session, text string) ([]time.Duration, int, error) {
	if text == "" {
		text = "hi"
	}
	prefix := strings.TrimSuffix(base, "/") + "/v1/agents/" + url.PathEscape(agent) + "/sessions/" + url.PathEscape(session)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, prefix+"/stream", nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: stream: %w", session, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("%s: stream: %s", session, resp.Status)
	}
	if _, err := pusher.Push(ctx, session, protocol.Inputs.Text("q-"+session, text)); err != nil {
		return nil, 0, fmt.Errorf("%s: push: %w", session, err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var (
		last   time.Time
		gaps   []time.Duration
		deltas int
	)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue
		}
		if n := bytes.Count(line, []byte(`"type":"text-delta"`)); n > 0 {
			now := time.Now()
			if !last.IsZero() {
				gaps = append(gaps, now.Sub(last))
			}
			last, deltas = now, deltas+n
		}
		if bytes.Contains(line, []byte(`"type":"finish"`)) {
			return gaps, deltas, nil
		}
	}
	err = sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return gaps, deltas, fmt.Errorf("%s: the stream ended before the answer finished: %w", session, err)
}
