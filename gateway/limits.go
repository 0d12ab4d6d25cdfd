package gateway

import (
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/a2-runtime/a2/internal/netaddr"
	"github.com/a2-runtime/a2/protocol"
	"golang.org/x/time/rate"
)

// Limits bound what one client, and what the clients of one session, can
// ask of a gateway (docs/security.md, "Limits"). A request over a limit is
// answered 429 RATE_LIMITED with Retry-After, and changes nothing. Zero
// values take the defaults; a negative value turns that limit off. Each
// gateway counts on its own: a client that spreads its requests over the
// gateways of a cluster gets each gateway's allowance.
type Limits struct {
	// RequestsPerMinute bounds one client's requests to the API's routes
	// (default 1,200: 20 a second on average, in bursts of up to a tenth
	// of a minute's).
	RequestsPerMinute int
	// SessionEventsPerMinute bounds the events pushed to one session, by
	// all its clients together, untrusted pushes only (default 600).
	SessionEventsPerMinute int
	// SessionBytesPerMinute bounds the bytes of those events
	// (protocol.Event.Size: IDs, types, causes and payloads; default
	// 16 MiB), so that no client grows a session's log faster.
	SessionBytesPerMinute int
	// StreamsPerClient bounds one client's live streams at once (the
	// stream route, pushes with stream=1 and the chat routes; default 64).
	StreamsPerClient int
	// ClientHeader, when set, names the request header that identifies
	// the client (a proxy's X-Forwarded-For, say, or its authenticated
	// user); otherwise a client is its IP address. Without a header,
	// clients on loopback (the machine's own processes, or a proxy on the
	// same machine, which must then pass the header) are not limited.
	ClientHeader string
}

// Defaults of Limits.
const (
	DefaultRequestsPerMinute      = 1200
	DefaultSessionEventsPerMinute = 600
	DefaultSessionBytesPerMinute  = 16 << 20
	DefaultStreamsPerClient       = 64
)

// CodeRateLimited is the error code of a request over a limit (429).
const CodeRateLimited = "RATE_LIMITED"

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.RequestsPerMinute, DefaultRequestsPerMinute)
	def(&l.SessionEventsPerMinute, DefaultSessionEventsPerMinute)
	def(&l.SessionBytesPerMinute, DefaultSessionBytesPerMinute)
	def(&l.StreamsPerClient, DefaultStreamsPerClient)
	return l
}

// limiter holds the counters of Limits.
type limiter struct {
	l        Limits
	now      func() time.Time
	mu       sync.Mutex
	requests map[string]*bucket // by client
	events   map[string]*bucket // by agent and session
	bytes    map[string]*bucket // by agent and session
	streams  map[string]int     // live streams by client
	swept    time.Time
}

type bucket struct {
	lim  *rate.Limiter
	used time.Time
}

// sweepEvery is how often buckets unused for a minute (full again) are
// dropped, so that the maps hold only the recent clients and sessions.
const sweepEvery = time.Minute

func newLimiter(l Limits) *limiter {
	return &limiter{l: l.withDefaults(), now: time.Now, requests: map[string]*bucket{}, events: map[string]*bucket{}, bytes: map[string]*bucket{}, streams: map[string]int{}}
}

// client identifies a request's client; "" is a client that is not
// limited (loopback without ClientHeader).
func (lm *limiter) client(r *http.Request) string {
	if h := lm.l.ClientHeader; h != "" {
		v := strings.TrimSpace(r.Header.Get(h))
		if i := strings.IndexByte(v, ','); i >= 0 {
			v = strings.TrimSpace(v[:i]) // a forwarding chain's first: the client
		}
		if v != "" {
			return "h:" + v
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if lm.l.ClientHeader == "" && netaddr.Loopback(host) {
		return ""
	}
	return "ip:" + host
}

// take takes n tokens of the bucket of key in m, at perMinute (a burst of
// a tenth of it, at least one); it returns how long to wait when there are
// not enough (and takes nothing then), and otherwise a function that gives
// the tokens back.
func (lm *limiter) take(m map[string]*bucket, key string, perMinute, n int) (wait time.Duration, giveBack func()) {
	if perMinute < 0 {
		return 0, func() {}
	}
	now := lm.now()
	lm.mu.Lock()
	defer lm.mu.Unlock()
	lm.sweep(now)
	b := m[key]
	if b == nil {
		burst := max(perMinute/10, 1)
		b = &bucket{lim: rate.NewLimiter(rate.Limit(float64(perMinute)/60), burst)}
		m[key] = b
	}
	b.used = now
	if n > b.lim.Burst() {
		// More than a burst at once can never be taken: wait as if the
		// bucket were empty and held the rest.
		return time.Duration(float64(n-b.lim.Burst()) / float64(b.lim.Limit()) * float64(time.Second)), nil
	}
	res := b.lim.ReserveN(now, n)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d, nil
	}
	return 0, func() { res.CancelAt(now) } // at the reservation's own time: a later one counts it as used
}

func (lm *limiter) sweep(now time.Time) {
	if now.Sub(lm.swept) < sweepEvery {
		return
	}
	lm.swept = now
	for _, m := range []map[string]*bucket{lm.requests, lm.events, lm.bytes} {
		for k, b := range m {
			if now.Sub(b.used) > time.Minute {
				delete(m, k)
			}
		}
	}
}

// request admits one request of r's client.
func (lm *limiter) request(r *http.Request) error {
	c := lm.client(r)
	if c == "" {
		return nil
	}
	if d, _ := lm.take(lm.requests, c, lm.l.RequestsPerMinute, 1); d > 0 {
		return limited(d, "", "too many requests from this client: at most %d a minute (Limits.RequestsPerMinute)", lm.l.RequestsPerMinute)
	}
	return nil
}

// pushEvents admits n events of size bytes pushed to agent's session: both
// the events and the bytes are counted, or neither.
func (lm *limiter) pushEvents(r *http.Request, agent, session string, n, size int) error {
	if lm.client(r) == "" {
		return nil
	}
	key := agent + "\x00" + session
	d, giveBack := lm.take(lm.events, key, lm.l.SessionEventsPerMinute, n)
	if d > 0 {
		return limited(d, "events", "too many events pushed to session %q: at most %d a minute (Limits.SessionEventsPerMinute); nothing was appended", session, lm.l.SessionEventsPerMinute)
	}
	if d, _ := lm.take(lm.bytes, key, lm.l.SessionBytesPerMinute, size); d > 0 {
		giveBack()
		return limited(d, "events", "too many bytes pushed to session %q: at most %d a minute (Limits.SessionBytesPerMinute); nothing was appended", session, lm.l.SessionBytesPerMinute)
	}
	return nil
}

// stream admits a live stream of r's client; done ends it.
func (lm *limiter) stream(r *http.Request) (done func(), err error) {
	c := lm.client(r)
	if c == "" || lm.l.StreamsPerClient < 0 {
		return func() {}, nil
	}
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if lm.streams[c] >= lm.l.StreamsPerClient {
		return nil, limited(time.Second, "", "too many live streams from this client: at most %d at once (Limits.StreamsPerClient); close one", lm.l.StreamsPerClient)
	}
	lm.streams[c]++
	var once sync.Once
	return func() {
		once.Do(func() {
			lm.mu.Lock()
			defer lm.mu.Unlock()
			if lm.streams[c]--; lm.streams[c] <= 0 {
				delete(lm.streams, c)
			}
		})
	}, nil
}

func limited(wait time.Duration, field, format string, args ...any) *Error {
	e := errorf(http.StatusTooManyRequests, CodeRateLimited, field, format, args...)
	e.RetryAfter = time.Duration(math.Ceil(wait.Seconds())) * time.Second
	return e
}

// eventBytes is the size SessionBytesPerMinute counts of a push.
func eventBytes(events []protocol.Event) int {
	n := 0
	for _, ev := range events {
		n += ev.Size()
	}
	return n
}
