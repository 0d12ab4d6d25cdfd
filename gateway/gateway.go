// Package gateway is A2's HTTP API: pushes of events (browser ingress and
// trusted admin appends), session state, history pages and live streams as
// server-sent events with resume, over a Router (a single node's runtime,
// or the cluster's router). docs/http.md is its reference.
//
// Every request is answered with JSON, errors as
// {"error":{"code","message","field"}} with a status that says whose fault
// it is: client input is never answered 500, and nothing is appended when a
// push is refused. Untrusted routes pass every read and push through the
// Authorize hook; the admin route is trusted and requires the admin token.
package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/protocol"
)

// Defaults of Options.
const (
	DefaultMaxBodyBytes      = 1 << 20
	DefaultMaxEvents         = 100
	DefaultHeartbeatInterval = 15 * time.Second
	DefaultHistoryLimit      = 100
	MaxHistoryLimit          = 1000
)

// Operation types seen by Authorize.
const (
	OpRead = "read"
	OpPush = "push"
	// OpListAgents is GET /v1/agents (no agent, no session).
	OpListAgents = "list-agents"
)

// Operation is what an untrusted request asks to do, as Authorize sees it
// (R-FETCH-05, OQ-35): a read (state, history or a stream) or a push with
// its events as decoded from the body (before the Router validates them).
type Operation struct {
	Type    string
	Agent   string
	Session string
	// Events are the pushed events (push only).
	Events []protocol.Event
}

// GateReleaser opens a named gate of a test model (script.Model).
type GateReleaser interface {
	Release(gate string)
}

// Options configure a Gateway. The zero value serves with the defaults, no
// admin route and no authorization policy.
type Options struct {
	// MaxBodyBytes bounds a push body (default 1 MiB); a larger one is 413.
	MaxBodyBytes int64
	// MaxEvents bounds the events of one push (default 100); more is 413.
	MaxEvents int
	// HeartbeatInterval is how often an idle stream sends the comment
	// ": ping" (default 15 s).
	HeartbeatInterval time.Duration
	// WriteTimeout bounds each write to a stream; a client that does not
	// read for this long is disconnected (default 30 s).
	WriteTimeout time.Duration
	// AdminToken enables the admin route (trusted appends) for requests
	// carrying "Authorization: Bearer <AdminToken>". Empty disables it: the
	// route answers 403 saying how to enable it.
	AdminToken string
	// Authorize, when set, sees every read and push of the untrusted routes
	// before it reaches the Router; an error denies it with 403 and the
	// error's text as the message. Trusted admin appends skip it
	// (R-INPUT-24, R-FETCH-06).
	Authorize func(ctx context.Context, op Operation) error
	// Gates, when set (test mode: the node runs the script model), serves
	// POST /v1/test/gates/{name}, which releases a gate.
	Gates GateReleaser
	// Logger receives internal errors and recovered panics (default:
	// discard).
	Logger *slog.Logger
	// Assets, when set, serves GET /fold.wasm, /wasm_exec.js, /client/,
	// / and /playground/: the fold's WebAssembly build, the JavaScript
	// client and the playground, which a browser loads from the node
	// (clients/assets, docs/clients.md).
	Assets http.Handler
	// ClusterStatus, when set (a cluster node), serves GET /v1/cluster:
	// the node's view of the cluster as JSON (cluster.Status).
	ClusterStatus func() any
	// Tokens, when set, admits to the untrusted routes only requests with a
	// bearer token it verifies, for the agents and sessions the token
	// names (auth.go); Authorize then runs too, with the identity in its
	// context (IdentityFrom).
	Tokens *Tokens
	// Limits bound what one client, and one session's clients, can ask
	// (limits.go; the zero value takes the defaults).
	Limits Limits
	// Agents are the names of the agents the Router serves: GET /v1/agents
	// lists them, and the error of an unknown agent names them. Empty: the
	// Router's, when it is an AgentLister (RuntimeRouter is).
	Agents []string
}

// AgentLister is a Router that can name its agents (Options.Agents).
type AgentLister interface {
	Agents() []string
}

func (o Options) withDefaults() Options {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxEvents <= 0 {
		o.MaxEvents = DefaultMaxEvents
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// Gateway is the HTTP handler of the API. Create it with New; call Close
// when the server shuts down so that live streams end (http.Server.Shutdown
// does not end them: register Close with RegisterOnShutdown).
type Gateway struct {
	router  Router
	opts    Options
	handler http.Handler
	limit   *limiter

	closeOnce sync.Once
	done      chan struct{}
}

// New returns the gateway serving router.
func New(router Router, opts Options) *Gateway {
	g := &Gateway{router: router, opts: opts.withDefaults(), done: make(chan struct{})}
	g.limit = newLimiter(g.opts.Limits)
	if l, ok := router.(AgentLister); ok && len(g.opts.Agents) == 0 {
		g.opts.Agents = l.Agents()
	}
	g.opts.Agents = slices.Sorted(slices.Values(g.opts.Agents))
	mux := http.NewServeMux()
	mux.Handle("/v1/agents", methods{http.MethodGet: g.agents})
	const sessions = "/v1/agents/{agent}/sessions/{session}"
	mux.Handle(sessions+"/events", methods{http.MethodPost: g.push(false), http.MethodGet: g.history})
	mux.Handle(sessions+"/state", methods{http.MethodGet: g.state})
	mux.Handle(sessions+"/stream", methods{http.MethodGet: g.stream})
	mux.Handle("/v1/agents/{agent}/chat", methods{http.MethodPost: g.chat})
	mux.Handle("/v1/agents/{agent}/chat/{session}/stream", methods{http.MethodGet: g.chatResume})
	mux.Handle("/v1/admin/agents/{agent}/sessions/{session}/events", methods{http.MethodPost: g.push(true)})
	mux.Handle("/healthz", methods{http.MethodGet: healthz, http.MethodHead: healthz})
	if g.opts.Gates != nil {
		mux.Handle("/v1/test/gates/{name}", methods{http.MethodPost: g.releaseGate})
	}
	if g.opts.Assets != nil {
		mux.Handle("/fold.wasm", g.opts.Assets)
		mux.Handle("/wasm_exec.js", g.opts.Assets)
		mux.Handle("/client/", g.opts.Assets)
		mux.Handle("/{$}", g.opts.Assets)
		mux.Handle("/playground/", g.opts.Assets)
	}
	if g.opts.ClusterStatus != nil {
		mux.Handle("/v1/cluster", methods{http.MethodGet: func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, g.opts.ClusterStatus())
		}})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusNotFound, CodeNotFound, "", "no route for %s %s; docs/http.md lists the routes", r.Method, r.URL.Path))
	})
	g.handler = g.serveObserved(g.limitRequests(mux))
	return g
}

// limitRequests answers 429 to a client over its request rate (Limits),
// on every route but the health check.
func (g *Gateway) limitRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			if err := g.limit.request(r); err != nil {
				g.fail(w, r, err)
				return
			}
		}
		if strings.HasPrefix(r.URL.Path, "/v1/agents") {
			var err error
			if r, err = g.authenticate(r); err != nil {
				g.fail(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// limitStream admits a live stream of r's client (Limits.StreamsPerClient);
// the caller calls done when the stream ends. On a refusal it has answered.
func (g *Gateway) limitStream(w http.ResponseWriter, r *http.Request) (done func(), ok bool) {
	done, err := g.limit.stream(r)
	if err != nil {
		g.fail(w, r, err)
		return nil, false
	}
	return done, true
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.handler.ServeHTTP(w, r) }

// Close ends every live stream (their clients reconnect elsewhere or
// later) and makes new streams end at once. Other requests are not
// affected. It is safe to call more than once.
func (g *Gateway) Close() { g.closeOnce.Do(func() { close(g.done) }) }

// methods dispatches a route by method and answers any other method 405
// with an Allow header, as JSON.
type methods map[string]http.HandlerFunc

func (m methods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, ok := m[r.Method]; ok {
		h(w, r)
		return
	}
	allow := make([]string, 0, len(m))
	for _, k := range []string{http.MethodGet, http.MethodHead, http.MethodPost} {
		if _, ok := m[k]; ok {
			allow = append(allow, k)
		}
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, errorf(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "", "%s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(allow, " or ")))
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

// fail answers an error unless the client went away; internal errors are
// logged, with the request, since their message is not shown.
func (g *Gateway) fail(w http.ResponseWriter, r *http.Request, err error) {
	if err == errClientGone || r.Context().Err() != nil {
		return
	}
	e := g.classify(err)
	if e.Status == http.StatusInternalServerError {
		g.opts.Logger.ErrorContext(r.Context(), "gateway: internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, e)
}

// classify is the package's classify, with the agents served named in
// the error of an unknown agent.
func (g *Gateway) classify(err error) *Error {
	e := classify(err)
	if errors.Is(err, actors.ErrUnknownAgent) && len(g.opts.Agents) > 0 {
		named := *e
		quoted := make([]string, len(g.opts.Agents))
		for i, a := range g.opts.Agents {
			quoted[i] = strconv.Quote(a)
		}
		named.Message += "; the agents here are " + strings.Join(quoted, ", ") + " (GET /v1/agents lists them)"
		return &named
	}
	return e
}

// agents serves GET /v1/agents: the agents this gateway serves.
func (g *Gateway) agents(w http.ResponseWriter, r *http.Request) {
	if err := g.authorize(r, Operation{Type: OpListAgents}); err != nil {
		g.fail(w, r, err)
		return
	}
	type agent struct {
		Name string `json:"name"`
	}
	out := struct {
		Agents []agent `json:"agents"`
	}{Agents: []agent{}}
	id := IdentityFrom(r.Context())
	for _, name := range g.opts.Agents {
		if id == nil || id.Allows(name, "") {
			out.Agents = append(out.Agents, agent{Name: name})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// authorize checks an untrusted operation against the request's token
// (Tokens), then runs the Authorize hook.
func (g *Gateway) authorize(r *http.Request, op Operation) error {
	if g.opts.Tokens != nil {
		id := IdentityFrom(r.Context())
		if id == nil {
			return errorf(http.StatusUnauthorized, CodeUnauthorized, "Authorization", "this node admits its users only: send Authorization: Bearer <token>")
		}
		switch {
		case op.Type == OpListAgents:
		case !id.Allows(op.Agent, ""):
			return errorf(http.StatusForbidden, CodeForbidden, "agent", "%s of agent %q: the token of %q names other agents (%s)",
				op.Type, op.Agent, id.Subject, strings.Join(id.Agents, ", "))
		case !id.Allows(op.Agent, op.Session):
			return errorf(http.StatusForbidden, CodeForbidden, "session", "%s of session %q: the token of %q does not name it (its a2 claim's sessions; without them, the IDs that start with %q)",
				op.Type, op.Session, id.Subject, id.Subject+":")
		}
	}
	if g.opts.Authorize == nil {
		return nil
	}
	if err := g.opts.Authorize(r.Context(), op); err != nil {
		msg := err.Error()
		if msg == "" {
			msg = "denied"
		}
		return errorf(http.StatusForbidden, CodeForbidden, "", "%s %s denied by the authorize policy: %s", op.Type, op.Session, msg)
	}
	return nil
}

// checkAdmin checks the admin token of a trusted append.
func (g *Gateway) checkAdmin(r *http.Request) error {
	if g.opts.AdminToken == "" {
		return errorf(http.StatusForbidden, CodeForbidden, "",
			"the admin route is disabled: start the node with --admin-token <token> (or A2_ADMIN_TOKEN=<token>) and send Authorization: Bearer <token>")
	}
	auth := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		return errorf(http.StatusUnauthorized, CodeUnauthorized, "Authorization", "the admin route requires Authorization: Bearer <admin token>")
	}
	want := sha256.Sum256([]byte(g.opts.AdminToken))
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	if subtle.ConstantTimeCompare(want[:], got[:]) != 1 {
		return errorf(http.StatusUnauthorized, CodeUnauthorized, "Authorization", "the admin token is wrong")
	}
	return nil
}

// pushedEvent is one event of a push answer.
type pushedEvent struct {
	ID    string `json:"id"`
	Type  string `json:"type"`
	Index uint64 `json:"index"`
}

// push serves POST .../events: browser ingress (untrusted, authorized) or
// the admin route's trusted appends. It answers once the events are
// durable; an identical resubmission answers the same.
func (g *Gateway) push(trusted bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		agent, session := r.PathValue("agent"), r.PathValue("session")
		if trusted {
			if err := g.checkAdmin(r); err != nil {
				g.fail(w, r, err)
				return
			}
		}
		stream := false
		switch v := r.URL.Query().Get("stream"); v {
		case "":
		case "1", "true":
			stream = true
		default:
			g.fail(w, r, invalid("stream", "must be 1 (answer with the session's stream from the pushed events until it is idle) or absent, not %q", v))
			return
		}
		events, err := g.decodeEvents(w, r)
		if err != nil {
			g.fail(w, r, err)
			return
		}
		if !trusted {
			if err := g.authorize(r, Operation{Type: OpPush, Agent: agent, Session: session, Events: events}); err != nil {
				g.fail(w, r, err)
				return
			}
			if err := g.limit.pushEvents(r, agent, session, len(events), eventBytes(events)); err != nil {
				g.fail(w, r, err)
				return
			}
			// A push that streams reads the session too: refused before
			// anything is written.
			if stream {
				if err := g.authorize(r, Operation{Type: OpRead, Agent: agent, Session: session}); err != nil {
					g.fail(w, r, err)
					return
				}
			}
		}
		if stream {
			done, ok := g.limitStream(w, r)
			if !ok {
				return
			}
			defer done()
		}
		if ps, ok := g.router.(PushStreamer); ok && stream {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			stored, evs, errc, err := ps.PushUntilIdle(ctx, agent, session, events, trusted)
			switch {
			case errors.Is(err, errors.ErrUnsupported):
				// Nothing pushed: push, then subscribe, below.
			case err != nil:
				g.fail(w, r, err)
				return
			case len(stored) > 0:
				g.serveStream(w, r, agent, session, stored[0].Index-1, true, true, &opened{evs, errc})
				return
			default:
				g.writePushed(w, stored)
				return
			}
		}
		stored, err := g.router.Push(r.Context(), agent, session, events, trusted)
		if err != nil {
			g.fail(w, r, err)
			return
		}
		if stream && len(stored) > 0 {
			// One request for a turn: the stream from the first pushed
			// event (durable now) until the session is idle, as GET
			// .../stream?after=N&until=idle would answer; a client that
			// loses it resumes there with the last index it saw.
			g.serveStream(w, r, agent, session, stored[0].Index-1, true, true, nil)
			return
		}
		g.writePushed(w, stored)
	}
}

// writePushed answers a push that does not stream: the stored events'
// IDs, types and indexes.
func (g *Gateway) writePushed(w http.ResponseWriter, stored []protocol.Event) {
	out := make([]pushedEvent, len(stored))
	for i, ev := range stored {
		out[i] = pushedEvent{ID: ev.ID, Type: ev.Type, Index: ev.Index}
	}
	writeJSON(w, http.StatusOK, struct {
		Events []pushedEvent `json:"events"`
	}{out})
}

// state serves GET .../state: {"index": N, "state": {...}}.
func (g *Gateway) state(w http.ResponseWriter, r *http.Request) {
	agent, session := r.PathValue("agent"), r.PathValue("session")
	if err := g.authorize(r, Operation{Type: OpRead, Agent: agent, Session: session}); err != nil {
		g.fail(w, r, err)
		return
	}
	st, index, err := g.router.State(r.Context(), agent, session)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Index uint64                 `json:"index"`
		State *protocol.SessionState `json:"state"`
	}{index, st})
}

// history serves GET .../events?after=N&limit=M: a page of full envelopes
// and the index to continue after.
func (g *Gateway) history(w http.ResponseWriter, r *http.Request) {
	agent, session := r.PathValue("agent"), r.PathValue("session")
	after, err := uintParam(r, "after", 0)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	limit, err := uintParam(r, "limit", DefaultHistoryLimit)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	if limit < 1 || limit > MaxHistoryLimit {
		g.fail(w, r, invalid("limit", "must be between 1 and %d, not %d", MaxHistoryLimit, limit))
		return
	}
	if err := g.authorize(r, Operation{Type: OpRead, Agent: agent, Session: session}); err != nil {
		g.fail(w, r, err)
		return
	}
	evs, err := g.router.History(r.Context(), agent, session, after, int(limit))
	if err != nil {
		g.fail(w, r, err)
		return
	}
	next := after
	if len(evs) > 0 {
		next = evs[len(evs)-1].Index
	}
	if evs == nil {
		evs = []protocol.Event{}
	}
	writeJSON(w, http.StatusOK, struct {
		Events []protocol.Event `json:"events"`
		Next   uint64           `json:"next"`
	}{evs, next})
}

// releaseGate serves POST /v1/test/gates/{name} in test mode.
func (g *Gateway) releaseGate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	g.opts.Gates.Release(name)
	writeJSON(w, http.StatusOK, struct {
		Released string `json:"released"`
	}{name})
}
