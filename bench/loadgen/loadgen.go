// Package loadgen drives concurrent turns through a node's HTTP API (or
// through a cluster's gateways, round robin), each session followed by its
// own client on its Server-Sent Events stream, and measures what the
// clients see: every text delta arrives, the gaps between consecutive
// ones, and each turn's time from its push to its first token and to its
// completion. bench/cmd/loadgen runs it against a running node or cluster;
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
	"strconv"
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
	// URLs, when set, are the base URLs of several gateways (or nodes):
	// the sessions are spread over them round robin, and URL is ignored.
	URLs []string
	// Turns is the number of turns of each session, one after the other
	// (default 1).
	Turns int
	// Progress, when set, receives a line each second while the load runs.
	Progress io.Writer
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
	// FirstToken and Completion are, per finished turn, the time from its
	// push to its first text delta and to its finish chunk, sorted.
	FirstToken []time.Duration
	Completion []time.Duration
	// Elapsed is the load's wall time.
	Elapsed time.Duration
}

// Quantile returns the q-quantile of sorted durations (0 for none).
func Quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[int(q*float64(len(d)-1))]
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
	if o.Turns <= 0 {
		o.Turns = 1
	}
	urls := o.URLs
	if len(urls) == 0 {
		urls = []string{o.URL}
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: max(o.Streams, 2)}}
	}
	var (
		mu  sync.Mutex
		res Result
		wg  sync.WaitGroup
	)
	pushers := make([]*client.Client, len(urls))
	for i, u := range urls {
		p, err := client.New(u, o.Agent, client.Options{HTTPClient: o.Client})
		if err != nil {
			res.Errors = append(res.Errors, err)
			return res
		}
		pushers[i] = p
	}
	began := time.Now()
	done := make(chan struct{})
	if o.Progress != nil {
		go func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					mu.Lock()
					fmt.Fprintf(o.Progress, "%6s  turns %d/%d  text deltas %d  errors %d\n", time.Since(began).Round(time.Second),
						res.Turns, o.Streams*o.Turns, res.Deltas, len(res.Errors))
					mu.Unlock()
				case <-done:
					return
				}
			}
		}()
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
			base, pusher := urls[s%len(urls)], pushers[s%len(urls)]
			session := fmt.Sprintf("%s-%d", o.Prefix, s)
			var after uint64
			for k := range o.Turns {
				tctx, cancel := context.WithTimeout(ctx, o.Timeout)
				t, err := turn(tctx, o.Client, pusher, base, o.Agent, session, o.Text, fmt.Sprintf("q-%s-%d", session, k), after)
				cancel()
				after = t.last
				mu.Lock()
				res.Deltas += t.deltas
				res.Gaps = append(res.Gaps, t.gaps...)
				if err != nil {
					res.Errors = append(res.Errors, err)
					mu.Unlock()
					return
				}
				res.Turns++
				res.FirstToken = append(res.FirstToken, t.first)
				res.Completion = append(res.Completion, t.complete)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(done)
	res.Elapsed = time.Since(began)
	slices.Sort(res.Gaps)
	slices.Sort(res.FirstToken)
	slices.Sort(res.Completion)
	return res
}

// turnResult is what one turn's client saw.
type turnResult struct {
	gaps            []time.Duration
	deltas          int
	first, complete time.Duration
	last            uint64 // the last event ID read
}

// turn opens session's stream after the event after (the last one the
// session's previous turn read), sends text as a user
// message with the ID id (with the Go client), and reads the stream until
// the answer's finish chunk. It returns the gaps between consecutive text
// deltas (the deltas of one event arrive together: one gap), the number of
// deltas and the times from the push to the first delta and to the finish;
// an error when the stream ends before the finish chunk, when its event
// IDs skip or repeat an index (an event lost or delivered twice), or when a
// request fails. The stream is read as raw server-sent events, not through the
// client's folding session, so that the clients cost little beside the
// node they measure.
func turn(ctx context.Context, hc *http.Client, pusher *client.Client, base, agent, session, text, id string, after uint64) (turnResult, error) {
	r := turnResult{last: after}
	if text == "" {
		text = "hi"
	}
	prefix := strings.TrimSuffix(base, "/") + "/v1/agents/" + url.PathEscape(agent) + "/sessions/" + url.PathEscape(session)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/stream?after=%d", prefix, after), nil)
	if err != nil {
		return r, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return r, fmt.Errorf("%s: stream: %w", session, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("%s: stream: %s", session, resp.Status)
	}
	t0 := time.Now()
	if _, err := pusher.Push(ctx, session, protocol.Inputs.Text(id, text)); err != nil {
		return r, fmt.Errorf("%s: push: %w", session, err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var last time.Time
	for sc.Scan() {
		line := sc.Bytes()
		if v, ok := bytes.CutPrefix(line, []byte("id: ")); ok {
			n, err := strconv.ParseUint(string(v), 10, 64)
			if err != nil {
				return r, fmt.Errorf("%s: an event ID that is not an index: %q", session, v)
			}
			// Every durable event once, in order, whatever moved meanwhile.
			if n != r.last+1 {
				return r, fmt.Errorf("%s: the stream went from event %d to %d: a gap or a duplicate", session, r.last, n)
			}
			r.last = n
			continue
		}
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue
		}
		if n := bytes.Count(line, []byte(`"type":"text-delta"`)); n > 0 {
			now := time.Now()
			if last.IsZero() {
				r.first = now.Sub(t0)
			} else {
				r.gaps = append(r.gaps, now.Sub(last))
			}
			last, r.deltas = now, r.deltas+n
		}
		if bytes.Contains(line, []byte(`"type":"finish"`)) {
			r.complete = time.Since(t0)
			return r, nil
		}
	}
	err = sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return r, fmt.Errorf("%s: the stream ended before the answer finished: %w", session, err)
}
