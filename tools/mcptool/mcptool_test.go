package mcptool

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The stdio server of these tests is this test binary, started again with
// MCPTOOL_TEST_SERVER=1: a real MCP server, written with the SDK, in a
// process of its own that a tool can kill.
func TestMain(m *testing.M) {
	if os.Getenv("MCPTOOL_TEST_SERVER") == "1" {
		if err := testServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type addIn struct {
	A int `json:"a"`
	B int `json:"b"`
}

type addOut struct {
	Sum int `json:"sum"`
}

func testServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Adds two numbers."}, func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
		return nil, addOut{Sum: in.A + in.B}, nil
	})
	text := func(s string, isErr bool) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}, IsError: isErr}
	}
	s.AddTool(&mcp.Tool{Name: "echo", Description: "Says its text back.", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Text string }
			_ = json.Unmarshal(r.Params.Arguments, &in)
			return text(in.Text, false), nil
		})
	s.AddTool(&mcp.Tool{Name: "fail", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("the order is not found", true), nil
	})
	s.AddTool(&mcp.Tool{Name: "big", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text(strings.Repeat("x", 5000), false), nil
	})
	s.AddTool(&mcp.Tool{Name: "crash", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		os.Exit(3) // the server dies in the middle of the call
		return nil, nil
	})
	return s
}

func stdioServer(t *testing.T) Server {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Server{Name: "test", Command: exe, Env: []string{"MCPTOOL_TEST_SERVER=1"}, MaxOutputBytes: 1000}
}

func call(t *testing.T, c *Conn, name, input string) (string, error) {
	t.Helper()
	ts, err := c.Tools()
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range ts {
		if tool.Name == name {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, err := tool.Execute(ctx, json.RawMessage(input))
			return string(out), err
		}
	}
	t.Fatalf("no tool %q", name)
	return "", nil
}

// The server's tools through stdio: their schemas as listed, each kind of
// answer as the model gets it, and a server that dies mid-call: the call
// fails as a tool error, and the next call starts the server again.
func TestAServerOverStdio(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Connect(ctx, stdioServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ts, err := c.Tools()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, tool := range ts {
		names[tool.Name] = string(tool.InputSchema)
	}
	if len(names) != 5 || !strings.Contains(names["add"], `"a"`) || !strings.Contains(names["echo"], `"text"`) {
		t.Fatalf("the tools and their schemas: %v", names)
	}
	for _, tc := range []struct{ tool, input, want, wantErr string }{
		{"echo", `{"text":"hello"}`, `"hello"`, ""},
		{"add", `{"a":2,"b":3}`, `{"sum":5}`, ""},
		{"fail", `{}`, "", "the order is not found"},
		{"big", `{}`, "", "the output is larger than 1000 bytes"},
		{"crash", `{}`, "", `the MCP server "test"`},
	} {
		out, err := call(t, c, tc.tool, tc.input)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("%s: %s, %v; want an error with %q", tc.tool, out, err, tc.wantErr)
			}
			continue
		}
		if err != nil || out != tc.want {
			t.Fatalf("%s: %s, %v; want %s", tc.tool, out, err, tc.want)
		}
	}
	// Started again: within the once-a-second bound a call is refused (or,
	// before the client has seen the process go, fails on the closed
	// connection), then it runs on a new process.
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := call(t, c, "echo", `{"text":"again"}`)
		if err == nil && out == `"again"` {
			break
		}
		transient := err != nil && (strings.Contains(err.Error(), "started again at most once a second") || strings.Contains(err.Error(), "connection closed"))
		if !transient || time.Now().After(deadline) {
			t.Fatalf("a call after the crash: %s, %v", out, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A streamable-HTTP server, with a header on every request.
func TestAServerOverStreamableHTTP(t *testing.T) {
	var auth string
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		auth = r.Header.Get("Authorization")
		return testServer()
	}, nil)
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Connect(ctx, Server{Name: "web", URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer t0k"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out, err := call(t, c, "add", `{"a":40,"b":2}`)
	if err != nil || out != `{"sum":42}` || auth != "Bearer t0k" {
		t.Fatalf("add over HTTP: %s, %v (Authorization %q)", out, err, auth)
	}
}

// A server that says its tool list changed (it adds a tool, then removes
// one) is listed again: Tools returns the new list and the watcher hears of
// each change.
func TestToolListChanges(t *testing.T) {
	server := testServer()
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Connect(ctx, Server{Name: "web", URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	changed := make(chan struct{}, 4)
	c.OnToolsChanged(func() { changed <- struct{}{} })
	names := func() []string {
		ts, err := c.Tools()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tool := range ts {
			out = append(out, tool.Name)
		}
		slices.Sort(out)
		return out
	}
	before := names()
	server.AddTool(&mcp.Tool{Name: "late", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "here"}}}, nil
	})
	for want := range 2 {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("change %d: the watcher was not told", want+1)
		}
		got := names()
		if want == 0 {
			if !slices.Contains(got, "late") || len(got) != len(before)+1 {
				t.Fatalf("after the server added a tool: %v (before: %v)", got, before)
			}
			if out, err := call(t, c, "late", `{}`); err != nil || !strings.Contains(out, "here") {
				t.Fatalf("the added tool: %s, %v", out, err)
			}
			server.RemoveTools("echo")
			continue
		}
		if slices.Contains(got, "echo") || !slices.Contains(got, "late") {
			t.Fatalf("after the server removed echo: %v", got)
		}
	}
}

func TestConnectRefusesWhatCannotWork(t *testing.T) {
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html><body>It works!</body></html>"))
	}))
	defer page.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		s    Server
		want string
	}{
		{Server{Name: "none"}, "needs a command or a URL"},
		{Server{Name: "both", Command: "x", URL: "http://127.0.0.1:1"}, "needs a command or a URL"},
		{Server{Name: "absent", Command: "/nonexistent/mcp-server"}, `the server "absent"`},
		// Servers that answer garbage: a command that prints what is not
		// JSON-RPC, and an endpoint that answers a web page.
		{Server{Name: "noise", Command: "/bin/sh", Args: []string{"-c", "echo 'Welcome!'; echo '{not json'; sleep 2"}}, `the server "noise"`},
		{Server{Name: "page", URL: page.URL}, `the server "page"`},
	} {
		if c, err := Connect(ctx, tc.s); err == nil || !strings.Contains(err.Error(), tc.want) {
			if c != nil {
				c.Close()
			}
			t.Errorf("Connect(%+v) = %v; want an error with %q", tc.s, err, tc.want)
		}
	}
}

// everythingServer is the protocol's reference server, published on the
// npm registry, as conformance/mcp's lockfile pins it.
func everythingServer(t *testing.T) Server {
	script, err := filepath.Abs(filepath.Join("..", "..", "conformance", "mcp", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	if err != nil {
		t.Fatal(err)
	}
	node, nerr := exec.LookPath("node")
	if _, err := os.Stat(script); err != nil || nerr != nil {
		msg := "the published MCP server is not installed (run: cd conformance/mcp && npm ci; it needs Node.js)"
		if os.Getenv("A2_REQUIRE_MCP") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return Server{Name: "everything", Command: node, Args: []string{script, "stdio"}}
}

// A server of another implementation (TypeScript, the protocol's reference
// "everything" server): its tools through this package as through a turn.
func TestAPublishedServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Connect(ctx, everythingServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct{ tool, input, want string }{
		{"echo", `{"message":"hello from A2"}`, `"Echo: hello from A2"`},
		{"get-sum", `{"a":2,"b":3}`, `5`},
		{"get-tiny-image", `{}`, `"type":"image"`},
	} {
		out, err := call(t, c, tc.tool, tc.input)
		if err != nil || !strings.Contains(out, tc.want) || !json.Valid([]byte(out)) {
			t.Errorf("%s: %s, %v; want JSON with %s", tc.tool, out, err, tc.want)
		}
	}
}
