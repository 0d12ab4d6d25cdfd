// Package mcptool offers the tools of an MCP server (the Model Context
// Protocol, through its official Go SDK) as A2 tools: each of the server's
// tools, with its name, description and input schema, runs as a durable A2
// tool call whose Execute calls the server. A server is a command spoken
// to over its standard input and output, or a streamable-HTTP endpoint.
//
// A server that dies (its process exits, its connection drops) fails the
// calls in flight as tool errors, which the model sees, and is started (or
// connected to) again for the next call, at most once a second. The tools
// are listed when the connection is made, and again whenever the server
// says its list changed (notifications/tools/list_changed) or the server
// is started again; OnToolsChanged tells the caller, who offers the new
// list (actors.Agent.SetTools).
package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/a2-runtime/a2/tools"
)

// Server says how to reach an MCP server: Command (and Args, Env) for one
// spoken to over stdio, or URL (and Headers) for a streamable-HTTP one.
type Server struct {
	// Name names the server in errors and logs.
	Name    string
	Command string
	Args    []string
	// Env is added to the node's environment for the command (KEY=value).
	Env     []string
	URL     string
	Headers map[string]string
	// MaxOutputBytes bounds a call's output (default 1 MiB): a larger one
	// fails the call.
	MaxOutputBytes int
	// Logger receives the server's restarts (default: discarded).
	Logger *slog.Logger
}

// DefaultMaxOutputBytes is Server.MaxOutputBytes's default.
const DefaultMaxOutputBytes = 1 << 20

// Conn is a connection to a server, made again when it drops.
type Conn struct {
	srv    Server
	client *mcp.Client

	mu      sync.Mutex
	session *mcp.ClientSession // nil: to connect before the next call
	last    time.Time          // the last connection attempt
	closed  bool
	tools   []*mcp.Tool
	watch   []func()
}

// listTimeout bounds a listing of the server's tools after a change.
const listTimeout = 10 * time.Second

// Connect connects to the server and lists its tools.
func Connect(ctx context.Context, srv Server) (*Conn, error) {
	if (srv.Command == "") == (srv.URL == "") {
		return nil, fmt.Errorf("mcptool: the server %q needs a command or a URL, one of them", srv.Name)
	}
	if srv.MaxOutputBytes <= 0 {
		srv.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if srv.Logger == nil {
		srv.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Conn{srv: srv}
	c.client = mcp.NewClient(&mcp.Implementation{Name: "a2", Version: "1"}, &mcp.ClientOptions{
		// The handler runs in the connection's reading loop: the listing,
		// a request on that connection, runs beside it.
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { go c.refresh() },
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("mcptool: the server %q: listing its tools: %w", srv.Name, err)
		}
		c.tools = append(c.tools, t)
	}
	return c, nil
}

// connect starts or reaches the server; the caller holds mu.
func (c *Conn) connect(ctx context.Context) (*mcp.ClientSession, error) {
	c.last = time.Now()
	var t mcp.Transport
	if c.srv.Command != "" {
		cmd := exec.Command(c.srv.Command, c.srv.Args...)
		cmd.Env = append(cmd.Environ(), c.srv.Env...)
		t = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	} else {
		t = &mcp.StreamableClientTransport{Endpoint: c.srv.URL, HTTPClient: &http.Client{Transport: headers{c.srv.Headers, http.DefaultTransport}}, MaxRetries: -1}
	}
	s, err := c.client.Connect(ctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("mcptool: the server %q: %w", c.srv.Name, err)
	}
	c.session = s
	go func() {
		_ = s.Wait()
		c.mu.Lock()
		if c.session == s {
			c.session = nil // connect again for the next call
		}
		c.mu.Unlock()
	}()
	return s, nil
}

// current is the session to call through, connecting again if the last
// one dropped (at most once a second).
func (c *Conn) current(ctx context.Context) (*mcp.ClientSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("mcptool: the server %q: closed", c.srv.Name)
	}
	if c.session != nil {
		return c.session, nil
	}
	if wait := time.Second - time.Since(c.last); wait > 0 {
		return nil, fmt.Errorf("mcptool: the server %q stopped and is started again at most once a second: try again", c.srv.Name)
	}
	c.srv.Logger.Warn("an MCP server stopped: starting it again", "server", c.srv.Name)
	s, err := c.connect(ctx)
	if err == nil {
		go c.refresh() // the server started again may list other tools
	}
	return s, err
}

// OnToolsChanged calls f (in a goroutine of its own) after each listing
// that follows a change: Tools then returns the new list.
func (c *Conn) OnToolsChanged(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watch = append(c.watch, f)
}

// refresh lists the server's tools again and tells the watchers; a listing
// that fails keeps the tools known (logged).
func (c *Conn) refresh() {
	c.mu.Lock()
	s := c.session
	c.mu.Unlock()
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	var list []*mcp.Tool
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			c.srv.Logger.Warn("an MCP server's tools could not be listed again: keeping the tools known", "server", c.srv.Name, "err", err)
			return
		}
		list = append(list, t)
	}
	c.mu.Lock()
	c.tools = list
	watch := slices.Clone(c.watch)
	c.mu.Unlock()
	c.srv.Logger.Info("an MCP server's tools changed", "server", c.srv.Name, "tools", len(list))
	for _, f := range watch {
		f()
	}
}

// Tools are the server's tools as A2 tools.
func (c *Conn) Tools() ([]tools.Tool, error) {
	c.mu.Lock()
	list := c.tools
	c.mu.Unlock()
	out := make([]tools.Tool, 0, len(list))
	for _, t := range list {
		schema, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("mcptool: the server %q: the input schema of %q: %w", c.srv.Name, t.Name, err)
		}
		name := t.Name
		out = append(out, tools.Tool{Name: name, Description: t.Description, InputSchema: schema,
			Execute: func(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
				return c.call(ctx, name, input)
			}})
	}
	return out, nil
}

// call calls the tool name. A server that fails the call, or dies during
// it, is the call's error.
func (c *Conn) call(ctx context.Context, name string, input json.RawMessage) (json.RawMessage, error) {
	s, err := c.current(ctx)
	if err != nil {
		return nil, err
	}
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: input})
	if err != nil {
		if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// The server is gone: the next call connects again, without
			// waiting for the session's watcher to notice.
			c.mu.Lock()
			if c.session == s {
				c.session = nil
			}
			c.mu.Unlock()
		}
		return nil, fmt.Errorf("the MCP server %q: %w", c.srv.Name, err)
	}
	var text []string
	for _, ct := range res.Content {
		if t, ok := ct.(*mcp.TextContent); ok {
			text = append(text, t.Text)
		}
	}
	if res.IsError {
		return nil, errors.New(strings.Join(text, "\n"))
	}
	var out []byte
	switch {
	case res.StructuredContent != nil:
		out, err = json.Marshal(res.StructuredContent)
	case len(text) == len(res.Content):
		out, err = json.Marshal(strings.Join(text, "\n"))
	default:
		out, err = json.Marshal(res.Content)
	}
	if err != nil {
		return nil, fmt.Errorf("the MCP server %q: its result: %w", c.srv.Name, err)
	}
	if len(out) > c.srv.MaxOutputBytes {
		return nil, fmt.Errorf("the MCP server %q: the output is larger than %d bytes", c.srv.Name, c.srv.MaxOutputBytes)
	}
	return out, nil
}

// Close ends the connection (and stops a command's process).
func (c *Conn) Close() error {
	c.mu.Lock()
	s := c.session
	c.session, c.closed = nil, true
	c.mu.Unlock()
	if s != nil {
		return s.Close()
	}
	return nil
}

// headers adds a server's headers to each request.
type headers struct {
	h    map[string]string
	next http.RoundTripper
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.h) > 0 {
		r = r.Clone(r.Context())
		for k, v := range h.h {
			r.Header.Set(k, v)
		}
	}
	return h.next.RoundTrip(r)
}
