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
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
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
	// Sessions, when more than Streams, is the number of sessions the
	// streams take turns in: stream s runs its turns in sessions s,
	// s+Streams, s+2*Streams, ... round robin (default Streams: a session
	// per stream).
	Sessions int
	// OneRequest sends each turn as one request, a push with stream=1
	// whose answer is the turn's stream (docs/http.md), instead of a
	// stream opened before a push.
	OneRequest bool
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
			var mine []string // this stream's sessions
			for n := s; n < max(o.Sessions, o.Streams); n += o.Streams {
				mine = append(mine, fmt.Sprintf("%s-%d", o.Prefix, n))
			}
			after := make([]uint64, len(mine))
			for k := range o.Turns {
				i := k % len(mine)
				session := mine[i]
				tctx, cancel := context.WithTimeout(ctx, o.Timeout)
				run := turn
				if o.OneRequest {
					run = pushTurn
				}
				t, err := run(tctx, o.Client, pusher, base, o.Agent, session, o.Text, fmt.Sprintf("q-%s-%d-%d", session, began.UnixNano(), k), after[i])
				cancel()
				after[i] = t.last
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/stream?after=%d", sessionURL(base, agent, session), after), nil)
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
	err = r.read(session, resp.Body, t0, false)
	return r, err
}

// sessionURL is the session's base URL on the node at base.
func sessionURL(base, agent, session string) string {
	return strings.TrimSuffix(base, "/") + "/v1/agents/" + url.PathEscape(agent) + "/sessions/" + url.PathEscape(session)
}

// pushTurn is turn as one request: a push with stream=1, whose answer
// starts at the pushed message's event and ends when the session is idle.
// It reads that answer to its end, so that its connection is kept for the
// next turn.
func pushTurn(ctx context.Context, hc *http.Client, _ *client.Client, base, agent, session, text, id string, after uint64) (turnResult, error) {
	r := turnResult{last: after}
	if text == "" {
		text = "hi"
	}
	ev := protocol.Inputs.Text(id, text)
	body, err := json.Marshal(map[string]any{"events": []any{map[string]any{"id": ev.ID, "type": ev.Type, "payload": ev.Payload}}})
	if err != nil {
		return r, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sessionURL(base, agent, session)+"/events?stream=1", bytes.NewReader(body))
	if err != nil {
		return r, err
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return r, fmt.Errorf("%s: push: %w", session, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("%s: push: %s", session, resp.Status)
	}
	err = r.read(session, resp.Body, t0, true)
	return r, err
}

// read reads a turn's stream until the answer's finish chunk (and, with
// toEnd, on to the stream's end), checking that its event IDs neither skip
// nor repeat an index. A stream that starts at its push (toEnd) may start
// after r.last: the previous turn's reader stopped at its finish.
func (r *turnResult) read(session string, body io.Reader, t0 time.Time, toEnd bool) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var last time.Time
	first := true
	for sc.Scan() {
		line := sc.Bytes()
		if v, ok := bytes.CutPrefix(line, []byte("id: ")); ok {
			n, err := strconv.ParseUint(string(v), 10, 64)
			if err != nil {
				return fmt.Errorf("%s: an event ID that is not an index: %q", session, v)
			}
			// Every durable event once, in order, whatever moved meanwhile.
			if n != r.last+1 && !(first && toEnd && n > r.last) {
				return fmt.Errorf("%s: the stream went from event %d to %d: a gap or a duplicate", session, r.last, n)
			}
			r.last, first = n, false
			continue
		}
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue
		}
		if n := bytes.Count(line, []byte(`"type":"text-delta"`)); n > 0 {
			now := time.Now()
			if r.complete != 0 {
				continue // after the answer's finish: not this turn's
			}
			if last.IsZero() {
				r.first = now.Sub(t0)
			} else {
				r.gaps = append(r.gaps, now.Sub(last))
			}
			last, r.deltas = now, r.deltas+n
		}
		// A step that calls tools finishes its message with "tool-calls";
		// the turn goes on with the next step.
		if r.complete == 0 && bytes.Contains(line, []byte(`"type":"finish"`)) && !bytes.Contains(line, []byte(`"finishReason":"tool-calls"`)) {
			r.complete = time.Since(t0)
			if !toEnd {
				return nil
			}
		}
	}
	err := sc.Err()
	if err == nil && r.complete != 0 {
		return nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%s: the stream ended before the answer finished: %w", session, err)
}

// ProcessCPU is the user and system CPU time of the processes so far, from
// /proc/PID/stat (in clock ticks of 10 ms, Linux's USER_HZ).
func ProcessCPU(pids []int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The command name (field 2) may hold spaces: count after its ')'.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			s = s[i+1:]
		}
		f := strings.Fields(s)
		if len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(utime+stime) * 10 * time.Millisecond
	}
	return total
}
