package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/protocol"
)

// docsAgentsExample is the agents file of docs/agents.md's example.
func docsAgentsExample(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "agents.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "```yaml\n")
	if i < 0 {
		t.Fatal("docs/agents.md has no yaml example")
	}
	example := doc[i+len("```yaml\n"):]
	return example[:strings.Index(example, "```")]
}

// oneTurn sends text to a fresh session of agent and returns the session's
// state once the turn has ended.
func oneTurn(ctx context.Context, t *testing.T, url, agent, session, text string) *protocol.AIState {
	t.Helper()
	c, err := client.New(url, agent, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Open(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Send(ctx, text); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(ctx, func(st *protocol.AIState) bool { return st.Active == nil && len(st.Messages) == 2 }); err != nil {
		t.Fatalf("%s: %v", agent, err)
	}
	st, _ := s.Confirmed()
	return st
}

// toolOutput is the output of the turn's call of tool ("" if none).
func toolOutput(st *protocol.AIState, tool string) string {
	for _, p := range st.Messages[len(st.Messages)-1].Parts {
		if p.ToolNameOf() == tool && p.State == protocol.ToolOutputAvailable {
			return string(p.Output)
		}
	}
	return ""
}

// The node serves the agents of docs/agents.md's example as written (the
// demo model, its built-in tools): both are listed, and each runs a turn,
// the helpdesk's through its calculator.
func TestNodeServesTheAgentsOfAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agents.yaml")
	if err := os.WriteFile(path, []byte(docsAgentsExample(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, config{agentsFile: path})
	if !strings.Contains(n.out.String(), "agents: helpdesk, scratch") {
		t.Fatalf("the banner:\n%s", n.out.String())
	}
	resp, err := http.Get(n.url + "/v1/agents")
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Agents []struct{ Name string } }
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	var names []string
	for _, a := range list.Agents {
		names = append(names, a.Name)
	}
	if err != nil || !slices.Equal(names, []string{"helpdesk", "scratch"}) {
		t.Fatalf("GET /v1/agents: %+v, %v", list, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct{ agent, text, want, tool string }{
		{"helpdesk", "calculate 6*7", "6*7 = 42", "calculator"},
		{"scratch", "hello", "", ""},
	} {
		st := oneTurn(ctx, t, n.url, tc.agent, "s-"+tc.agent, tc.text)
		var answer strings.Builder
		tool := ""
		for _, p := range st.Messages[1].Parts {
			if p.Type == protocol.PartText {
				answer.WriteString(p.Text)
			}
			if p.ToolNameOf() != "" && p.State == protocol.ToolOutputAvailable {
				tool = p.ToolNameOf()
			}
		}
		if answer.Len() == 0 || !strings.Contains(answer.String(), tc.want) || tool != tc.tool {
			t.Fatalf("%s: answer %q (tool %q), want one with %q (tool %q)", tc.agent, answer.String(), tool, tc.want, tc.tool)
		}
	}
	// An agent the file does not name is not served.
	c, err := client.New(n.url, "assistant", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Open(ctx, "s"); err == nil || !strings.Contains(err.Error(), "helpdesk") {
		t.Fatalf("the default agent, not in the file: %v; want an unknown agent naming the file's", err)
	}
}

// A node given an agents file with problems does not start, and says
// each problem at its line.
func TestNodeRefusesABadAgentsFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, file, want string }{
		{"missing", "", "the agents file: open "},
		{"a field of another name", "agents:\n  - name: a\n    tool: calculator\n", "agents.yaml:2: agents[0]: additional properties 'tool' not allowed"},
		{"a tool the node has not", "agents:\n  - name: a\n    tools:\n      - builtin: weather\n", `agents.yaml:4: agents[0].tools[0].builtin: no built-in tool is named "weather"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name, "agents.yaml")
			if tc.file != "" {
				if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			data := filepath.Join(dir, tc.name, "data")
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			// Bounded: a file the node should have refused would be served
			// until the context ends, and the test fails rather than hangs.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = serve(ctx, config{agentsFile: path, data: data}, ln, &strings.Builder{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("serve: %v; want an error with %q", err, tc.want)
			}
			if _, serr := os.Stat(data); !os.IsNotExist(serr) {
				t.Fatalf("the node made its data directory although it refused its agents: %v", serr)
			}
		})
	}
}

// An HTTP tool of an agents file, through a turn: the script model calls
// it, the node calls the endpoint (on loopback) with the header the file
// reads from the environment, and the call's output is the endpoint's
// answer.
func TestNodeCallsAnHTTPToolOfAFile(t *testing.T) {
	var auth, body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		auth, body = r.Header.Get("Authorization"), string(b)
		_, _ = w.Write([]byte(`{"order":"A-1","status":"shipped"}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	scriptPath := filepath.Join(dir, "script.json")
	if err := os.WriteFile(scriptPath, []byte(`{"default":{"toolCalls":[{"name":"lookup_order","input":{"id":"A-1"}}],"then":{"text":"It has shipped."}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	agentsPath := filepath.Join(dir, "agents.yaml")
	file := `agents:
  - name: orders
    tools:
      - name: lookup_order
        description: Looks an order up by its ID.
        inputSchema:
          type: object
          properties: {id: {type: string}}
          required: [id]
        http:
          url: ` + srv.URL + `/orders
          headers:
            Authorization: Bearer ${ORDERS_TOKEN}
`
	if err := os.WriteFile(agentsPath, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ORDERS_TOKEN": "s3cret"}
	n := startNode(t, config{agentsFile: agentsPath, script: scriptPath, getenv: func(k string) string { return env[k] }})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := oneTurn(ctx, t, n.url, "orders", "o1", "Where is order A-1?")
	output := toolOutput(st, "lookup_order")
	if output != `{"order":"A-1","status":"shipped"}` || auth != "Bearer s3cret" || body != `{"id":"A-1"}` {
		t.Fatalf("the tool's output %q; the endpoint got Authorization %q and body %q", output, auth, body)
	}
	// The same file without the token in the environment stops the node.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer bcancel()
	err = serve(bctx, config{agentsFile: agentsPath, script: scriptPath, data: filepath.Join(dir, "data2")}, ln, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "agents.yaml:13: agents[0].tools[0].http.headers.Authorization: the environment has no ORDERS_TOKEN") {
		t.Fatalf("serve without ORDERS_TOKEN: %v", err)
	}
}

// An MCP server's tools, through a turn: the file declares a
// streamable-HTTP server (written with the MCP Go SDK, on loopback) and
// offers its tools to an agent; the script model calls one, and the
// call's output is the server's structured answer. A server the node
// cannot reach stops it at its start, with the server's line.
func TestNodeCallsAnMCPToolOfAFile(t *testing.T) {
	type addIn struct{ A, B int }
	type addOut struct {
		Sum int `json:"sum"`
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "math", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "add", Description: "Adds two numbers."}, func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
		return nil, addOut{Sum: in.A + in.B}, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	// Closed after the node (cleanups run last first): Close waits for the
	// node's open stream to the server.
	t.Cleanup(hs.Close)
	dir := t.TempDir()
	scriptPath := filepath.Join(dir, "script.json")
	if err := os.WriteFile(scriptPath, []byte(`{"default":{"toolCalls":[{"name":"add","input":{"A":2,"B":3}}],"then":{"text":"Five."}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(url string) string {
		path := filepath.Join(dir, "agents.yaml")
		file := "mcpServers:\n  - name: math\n    url: " + url + "\nagents:\n  - name: calc\n    tools:\n      - mcp: math\n        recovery: report\n"
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	n := startNode(t, config{agentsFile: write(hs.URL), script: scriptPath})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := oneTurn(ctx, t, n.url, "calc", "m1", "What is 2+3?")
	output := toolOutput(st, "add")
	if output != `{"sum":5}` {
		t.Fatalf("the MCP tool's output: %q; the message: %+v", output, st.Messages[1].Parts)
	}
	// A server the node cannot reach.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer bcancel()
	err = serve(bctx, config{agentsFile: write(dead), script: scriptPath, data: filepath.Join(dir, "data2")}, ln, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), `agents.yaml:2: mcpServers[0]: the server "math"`) {
		t.Fatalf("serve with a server it cannot reach: %v", err)
	}
}
