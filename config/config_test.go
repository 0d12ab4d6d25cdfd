package config

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/internal/testutil"
	"github.com/a2-runtime/a2/tools"
)

// builtins stand for a node's built-in tools.
var builtins = []tools.Tool{
	{Name: "calculator", Description: "Evaluates arithmetic.", InputSchema: json.RawMessage(`{"type":"object"}`),
		Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`1`), nil }},
	{Name: "current_time", Description: "The time.", InputSchema: json.RawMessage(`{"type":"object"}`),
		Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`"now"`), nil }},
}

func models(t *testing.T) func(string) (harness.Model, error) {
	sc, err := script.Parse([]byte(`{"default":{"text":"ok"}}`))
	if err != nil {
		t.Fatal(err)
	}
	m := script.New(sc)
	return func(string) (harness.Model, error) { return m, nil }
}

const good = `# two agents
agents:
  - name: helpdesk
    model: script
    instructions: |
      Answer briefly.
    maxSteps: 8
    stepTimeout: 90s
    tools:
      - builtin: calculator
        recovery: report
      - builtin: current_time
        approval: true
    progress:
      maxDelayMs: 20
      maxChunks: 64
    compaction:
      thresholdTokens: 50000
      instructions: Keep order numbers.
  - name: plain
`

func TestAFileOfAgents(t *testing.T) {
	f, err := Parse("agents.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	opts, ps := f.options(models(t), Defaults{Model: "demo", StepTimeout: 10 * time.Minute}, builtins, nil, nil)
	if len(ps) != 0 {
		t.Fatalf("problems: %v", ps)
	}
	if len(opts) != 2 || opts[0].Name != "helpdesk" || opts[1].Name != "plain" {
		t.Fatalf("agents: %+v", opts)
	}
	h := opts[0]
	if h.MaxSteps != 8 || h.Harness.StepTimeout != 90*time.Second || h.Progress.MaxDelayMs != 20 || h.Progress.MaxChunks != 64 {
		t.Fatalf("helpdesk's options: maxSteps %d, stepTimeout %v, progress %+v", h.MaxSteps, h.Harness.StepTimeout, h.Progress)
	}
	if c := h.Harness.Compaction; c.ThresholdTokens != 50000 || c.Instructions != "Keep order numbers." || c.Disabled {
		t.Fatalf("helpdesk's compaction: %+v", c)
	}
	if len(h.Tools) != 2 || h.Tools[0].Name != "calculator" || h.Tools[0].Recovery != "report" || h.Tools[0].NeedsApproval != nil {
		t.Fatalf("helpdesk's first tool: %+v", h.Tools[0])
	}
	if h.Tools[1].Name != "current_time" || h.Tools[1].Recovery != "" || h.Tools[1].NeedsApproval == nil || !h.Tools[1].NeedsApproval(nil) {
		t.Fatalf("helpdesk's second tool: recovery %q, approval %v", h.Tools[1].Recovery, h.Tools[1].NeedsApproval != nil)
	}
	if p := opts[1]; p.Harness.StepTimeout != 10*time.Minute || p.MaxSteps != 0 {
		t.Fatalf("plain's options: stepTimeout %v (want the node's), maxSteps %d", p.Harness.StepTimeout, p.MaxSteps)
	}
	if builtins[1].NeedsApproval != nil || builtins[0].Recovery != "" {
		t.Fatal("the file's settings changed the node's own tools")
	}
	agents, stop, err := f.Build(context.Background(), models(t), Defaults{Model: "demo"}, builtins)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if len(agents) != 2 || agents[0].Name() != "helpdesk" || agents[1].Name() != "plain" {
		t.Fatalf("built %d agents", len(agents))
	}
}

// A file with problems is refused whole, each problem at its line and
// path, and nothing is built.
func TestAFileWithProblemsIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string // each a line of the error
	}{
		{"not YAML", "agents:\n  - name: a\n   model: x\n", []string{"agents.yaml:1: did not find expected '-' indicator"}},
		{"empty", "", []string{"agents.yaml: the file is empty"}},
		{"no agents", "agent:\n  - name: a\n", []string{"agents.yaml:1: missing property 'agents'", "agents.yaml:1: additional properties 'agent' not allowed"}},
		{"an empty list", "agents: []\n", []string{"agents.yaml:1: agents: minItems"}},
		{"a field of another name", "agents:\n  - name: a\n    modle: x\n", []string{"agents.yaml:2: agents[0]: additional properties 'modle' not allowed"}},
		{"a name for no URL", "agents:\n  - name: Help Desk\n", []string{`agents.yaml:2: agents[0].name: '`}},
		{"no name", "agents:\n  - model: script\n", []string{"agents.yaml:2: agents[0]: missing property 'name'"}},
		{"maxSteps 0", "agents:\n  - name: a\n    maxSteps: 0\n", []string{"agents.yaml:3: agents[0].maxSteps: minimum"}},
		{"maxSteps as text", "agents:\n  - name: a\n    maxSteps: many\n", []string{"agents.yaml:3: agents[0].maxSteps: got string, want integer"}},
		{"a recovery policy of another name", "agents:\n  - name: a\n    tools:\n      - builtin: calculator\n        recovery: retry\n",
			[]string{"agents.yaml:5: agents[0].tools[0].recovery: value must be one of 'rerun', 'report'"}},
		{"a step timeout Go cannot read", "agents:\n  - name: a\n    stepTimeout: 0s\n", []string{`agents.yaml:3: agents[0].stepTimeout: "0s" is not a positive duration`}},
		{"two agents of one name", "agents:\n  - name: a\n  - name: b\n  - name: a\n", []string{`agents.yaml:4: agents[2].name: agents[0] is named "a" already`}},
		{"every problem at once", "agents:\n  - name: a\n    maxSteps: 0\n  - name: B\n    tools:\n      - builtin: calculator\n        recovery: retry\n",
			[]string{"3 problems", "agents.yaml:3: agents[0].maxSteps: minimum", "agents.yaml:4: agents[1].name: '", "agents.yaml:7: agents[1].tools[0].recovery: value must be one of"}},
		{"a tool of no kind", "agents:\n  - name: a\n    tools:\n      - recovery: report\n", []string{"agents.yaml:4: agents[0].tools[0]: a tool needs builtin"}},
		{"a tool of two kinds", "agents:\n  - name: a\n    tools:\n      - builtin: calculator\n        name: calc\n        http: {url: 'http://127.0.0.1:1/'}\n", []string{"agents.yaml:4: agents[0].tools[0]: a tool is built in (builtin), an HTTP endpoint (http) or an MCP server's (mcp), one of them"}},
		{"an HTTP tool without a name", "agents:\n  - name: a\n    tools:\n      - http:\n          url: https://example.invalid/x\n", []string{"agents.yaml:4: agents[0].tools[0]: an HTTP tool needs a name"}},
		{"an HTTP tool's URL of another scheme", "agents:\n  - name: a\n    tools:\n      - name: t\n        http:\n          url: ftp://example.invalid/x\n", []string{"agents.yaml:6: agents[0].tools[0].http.url: '"}},
		{"an HTTP tool's method of another kind", "agents:\n  - name: a\n    tools:\n      - name: t\n        http:\n          url: http://127.0.0.1:1/\n          method: SEND\n", []string{"agents.yaml:7: agents[0].tools[0].http.method: value must be one of"}},
		{"an MCP server not declared", "agents:\n  - name: a\n    tools:\n      - mcp: files\n", []string{`agents.yaml:4: agents[0].tools[0].mcp: no server of mcpServers is named "files"`}},
		{"an MCP server with a command and a url", "mcpServers:\n  - name: files\n    command: mcp-files\n    url: http://127.0.0.1:1/mcp\nagents:\n  - name: a\n", []string{"agents.yaml:2: mcpServers[0]: an MCP server has a command (stdio) or a url"}},
		{"two MCP servers of one name", "mcpServers:\n  - name: f\n    command: x\n  - name: f\n    command: y\nagents:\n  - name: a\n", []string{`agents.yaml:4: mcpServers[1].name: mcpServers[0] is named "f" already`}},
		{"an MCP server's tools renamed", "mcpServers:\n  - name: f\n    command: x\nagents:\n  - name: a\n    tools:\n      - mcp: f\n        name: g\n", []string{"agents.yaml:7: agents[0].tools[0]: an MCP server's tools have their own names"}},
		{"a harness of another name", "agents:\n  - name: a\n    harness: langchain\n", []string{"agents.yaml:3: agents[0].harness: value must be one of 'a2', 'pi'"}},
		{"a built-in tool given a name", "agents:\n  - name: a\n    tools:\n      - builtin: calculator\n        name: calc\n", []string{"agents.yaml:4: agents[0].tools[0]: a built-in tool has its own name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("agents.yaml", []byte(tc.file))
			var fe *Error
			if !errors.As(err, &fe) || f != nil {
				t.Fatalf("Parse = %v, %v; want a refusal (*config.Error)", f, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%s", w, err)
				}
			}
		})
	}
}

// Problems only the node can see (its tools, the agents' options) are
// reported the same way, by Build.
func TestBuildRefusesWhatTheNodeCannotServe(t *testing.T) {
	file := "agents:\n  - name: a\n    tools:\n      - builtin: calculator\n      - builtin: weather\n  - name: b\n    model: \"\"\n"
	f, err := Parse("agents.yaml", []byte(file))
	if err == nil || f != nil || !strings.Contains(err.Error(), "agents.yaml:7: agents[1].model: ") {
		t.Fatalf("an empty model: %v", err)
	}
	f, err = Parse("agents.yaml", []byte(file[:strings.Index(file, "  - name: b")]))
	if err != nil {
		t.Fatal(err)
	}
	agents, stop, err := f.Build(context.Background(), models(t), Defaults{Model: "demo"}, builtins)
	if err == nil || agents != nil || stop != nil {
		t.Fatalf("Build = %v, %v; want a refusal", agents, err)
	}
	for _, w := range []string{`agents.yaml:5: agents[0].tools[1].builtin: no built-in tool is named "weather" (the node has: calculator, current_time)`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error does not say %q:\n%s", w, err)
		}
	}
	// An option the runtime refuses, at its line.
	f, err = Parse("agents.yaml", []byte("agents:\n  - name: a\n    compaction:\n      disabled: true\n      thresholdTokens: 9\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = f.Build(context.Background(), models(t), Defaults{Model: "demo"}, builtins)
	for _, w := range []string{"agents.yaml:3: agents[0].compaction: ", "takes no thresholdTokens"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error does not say %q:\n%s", w, err)
		}
	} // Pi's coding agent, on a node that cannot start it, or whose Pi
	// fails to start: the reason at the agent's harness.
	f, err = Parse("agents.yaml", []byte("agents:\n  - name: a\n  - name: coder\n    harness: pi\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = f.Build(context.Background(), models(t), Defaults{Model: "demo"}, builtins)
	if err == nil || !strings.Contains(err.Error(), "agents.yaml:4: agents[1].harness: this node cannot run Pi's coding agent") {
		t.Errorf("Pi on a node without it: %v", err)
	}
	_, _, err = f.Build(context.Background(), models(t), Defaults{Model: "demo", Pi: func(context.Context) (External, error) {
		return nil, errors.New("pi: the sidecar is not installed")
	}}, builtins)
	if err == nil || !strings.Contains(err.Error(), "agents.yaml:4: agents[1].harness: pi: the sidecar is not installed") {
		t.Errorf("Pi that fails to start: %v", err)
	}
}

// An MCP server's tools with a policy per tool: the server listed twice,
// each entry choosing its tools (only) and their approval and recovery; a
// tool the server does not list is a problem at its line.
func TestMCPToolsWithAPolicyEach(t *testing.T) {
	type in struct{ A, B int }
	srv := mcp.NewServer(&mcp.Implementation{Name: "math", Version: "1"}, nil)
	for _, name := range []string{"add", "sub", "mul"} {
		mcp.AddTool(srv, &mcp.Tool{Name: name}, func(context.Context, *mcp.CallToolRequest, in) (*mcp.CallToolResult, any, error) {
			return nil, nil, nil
		})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	file := func(only string) string {
		return "mcpServers:\n  - name: math\n    url: " + hs.URL + "\nagents:\n  - name: a\n    tools:\n      - mcp: math\n        only: [add]\n        approval: true\n      - mcp: math\n        only: [" + only + "]\n        recovery: report\n"
	}
	f, err := Parse("agents.yaml", []byte(file("sub")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conns, ps := f.connect(ctx, Defaults{})
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	opts, ops := f.options(models(t), Defaults{Model: "demo"}, builtins, conns, nil)
	if len(ps)+len(ops) != 0 || len(opts) != 1 {
		t.Fatalf("problems: %v %v", ps, ops)
	}
	got := map[string]string{}
	for _, tool := range opts[0].Tools {
		got[tool.Name] = fmt.Sprintf("approval %v, recovery %q", tool.NeedsApproval != nil && tool.NeedsApproval(nil), tool.Recovery)
	}
	want := map[string]string{"add": `approval true, recovery ""`, "sub": `approval false, recovery "report"`}
	if !maps.Equal(got, want) {
		t.Fatalf("the agent's tools: %v, want %v", got, want)
	}
	f, err = Parse("agents.yaml", []byte(file("div")))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = f.Build(ctx, models(t), Defaults{Model: "demo"}, builtins)
	if err == nil || !strings.Contains(err.Error(), `agents.yaml:11: agents[0].tools[1].only[0]: the server "math" lists no tool "div"`) {
		t.Fatalf("a tool the server does not list: %v", err)
	}
}

// When an MCP server's tool list changes, the agents that use it get the
// new list: a tool added is offered (a server entry without `only`), a tool
// removed is not, and an agent that names only some tools keeps just those
// that are still listed, with the rest logged.
func TestAgentsFollowTheirServersToolList(t *testing.T) {
	type in struct{ A, B int }
	srv := mcp.NewServer(&mcp.Implementation{Name: "math", Version: "1"}, nil)
	for _, name := range []string{"add", "sub"} {
		mcp.AddTool(srv, &mcp.Tool{Name: name}, func(context.Context, *mcp.CallToolRequest, in) (*mcp.CallToolResult, any, error) {
			return nil, nil, nil
		})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	f, err := Parse("agents.yaml", []byte("mcpServers:\n  - name: math\n    url: "+hs.URL+
		"\nagents:\n  - name: all\n    tools:\n      - mcp: math\n  - name: some\n    tools:\n      - mcp: math\n        only: [add, sub]\n  - name: none\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	logs := &testutil.SyncBuffer{}
	agents, stop, err := f.Build(ctx, models(t), Defaults{Model: "demo", Logger: slog.New(slog.NewTextHandler(logs, nil))}, builtins)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	waitTools := func(what string, want map[string][]string) {
		t.Helper()
		for {
			got := map[string][]string{}
			for _, a := range agents {
				got[a.Name()] = a.ToolNames()
			}
			if fmt.Sprint(got) == fmt.Sprint(want) {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: the agents' tools are %v, want %v", what, got, want)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	waitTools("at the start", map[string][]string{"all": {"add", "sub"}, "some": {"add", "sub"}, "none": nil})
	mcp.AddTool(srv, &mcp.Tool{Name: "mul"}, func(context.Context, *mcp.CallToolRequest, in) (*mcp.CallToolResult, any, error) {
		return nil, nil, nil
	})
	waitTools("after the server added mul", map[string][]string{"all": {"add", "mul", "sub"}, "some": {"add", "sub"}, "none": nil})
	srv.RemoveTools("sub")
	waitTools("after the server removed sub", map[string][]string{"all": {"add", "mul"}, "some": {"add"}, "none": nil})
	for !strings.Contains(logs.String(), `the server \"math\" lists no tool \"sub\"`) {
		select {
		case <-ctx.Done():
			t.Fatalf("the tool of the only list that went away was not logged:\n%s", logs.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// A gateway's agents (WithoutTools) are built without tools and without
// connecting the file's MCP servers, which only the members use: a server
// the gateway cannot start does not stop it.
func TestAGatewayConnectsNoMCPServer(t *testing.T) {
	f, err := Parse("agents.yaml", []byte("mcpServers:\n  - name: files\n    command: /nonexistent/mcp-server\nagents:\n  - name: a\n    tools:\n      - mcp: files\n      - builtin: calculator\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, _, err := f.Build(ctx, models(t), Defaults{Model: "demo"}, builtins); err == nil || !strings.Contains(err.Error(), "mcpServers[0]") {
		t.Fatalf("a member's build with a server that cannot start: %v", err)
	}
	agents, stop, err := f.Build(ctx, models(t), Defaults{Model: "demo", WithoutTools: true}, builtins)
	if err != nil {
		t.Fatalf("a gateway's build: %v", err)
	}
	defer stop()
	if len(agents) != 1 || agents[0].Name() != "a" || len(agents[0].ToolNames()) != 0 {
		t.Fatalf("a gateway's agents: %v with tools %v", agents, agents[0].ToolNames())
	}
}
