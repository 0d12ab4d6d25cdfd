// Package config reads agents from a file, so that a node serves agents
// without Go code: go run ./cmd/node --config agents.yaml (docs/agents.md).
//
// The file is YAML (JSON is YAML too). Its shape is the JSON Schema
// agents.schema.json beside this file (Schema), which editors can use to
// complete and check it. A file with problems is refused whole, with every
// problem reported at its line and path (agents[0].tools[1].builtin), and
// nothing is served.
package config

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
	"github.com/a2-runtime/a2/tools/httptool"
	"github.com/a2-runtime/a2/tools/mcptool"
)

// Schema is the JSON Schema of an agents file.
//
//go:embed agents.schema.json
var Schema []byte

// File is an agents file, as read.
type File struct {
	Agents     []Agent     `yaml:"agents"`
	MCPServers []MCPServer `yaml:"mcpServers"`

	name  string         // the file's name, for messages
	lines map[string]int // path (agents[0].name) to its line
}

// Agent is one agent of a file (agents.schema.json describes each field).
type Agent struct {
	Name         string     `yaml:"name"`
	Model        string     `yaml:"model"`
	Instructions string     `yaml:"instructions"`
	MaxSteps     int        `yaml:"maxSteps"`
	StepTimeout  string     `yaml:"stepTimeout"`
	Harness      string     `yaml:"harness"`
	Tools        []Tool     `yaml:"tools"`
	Progress     Progress   `yaml:"progress"`
	Compaction   Compaction `yaml:"compaction"`
}

// Compaction is how an agent's long conversations are compacted
// (protocol.CompactionOptions).
type Compaction struct {
	Disabled        bool   `yaml:"disabled"`
	ThresholdTokens int64  `yaml:"thresholdTokens"`
	Instructions    string `yaml:"instructions"`
}

// Tool is a tool an agent may call: one built into the node (Builtin), or
// an HTTP endpoint (HTTP, with Name).
type Tool struct {
	Builtin     string         `yaml:"builtin"`
	Name        string         `yaml:"name"`
	Description string         `yaml:"description"`
	InputSchema map[string]any `yaml:"inputSchema"`
	HTTP        *HTTP          `yaml:"http"`
	MCP         string         `yaml:"mcp"`
	Only        []string       `yaml:"only"`
	Recovery    string         `yaml:"recovery"`
	Approval    bool           `yaml:"approval"`
}

// MCPServer is an MCP server whose tools agents may call (mcptool.Server).
type MCPServer struct {
	Name    string            `yaml:"name"`
	Command string            `yaml:"command"`
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
}

// HTTP is an HTTP tool's endpoint (httptool.Options).
type HTTP struct {
	URL     string            `yaml:"url"`
	Method  string            `yaml:"method"`
	Headers map[string]string `yaml:"headers"`
	Timeout string            `yaml:"timeout"`
}

// Progress is how an agent's streamed chunks are batched into durable
// progress events (protocol.ProgressOptions).
type Progress struct {
	MaxDelayMs int `yaml:"maxDelayMs"`
	MaxChunks  int `yaml:"maxChunks"`
}

// Problem is one thing wrong with a file: where (line 0: the file as a
// whole) and what.
type Problem struct {
	Line    int
	Path    string
	Message string
}

// Error is a file refused, with every problem found.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	if len(e.Problems) == 1 {
		fmt.Fprintf(&b, "%s: a problem:", e.File)
	} else {
		fmt.Fprintf(&b, "%s: %d problems:", e.File, len(e.Problems))
	}
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(e.File)
		if p.Line > 0 {
			b.WriteString(":" + strconv.Itoa(p.Line))
		}
		if p.Path != "" {
			b.WriteString(": " + p.Path)
		}
		b.WriteString(": " + p.Message)
	}
	return b.String()
}

// Load reads the agents file at path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the agents file: %w", err)
	}
	return Parse(filepath.Base(path), data)
}

// schema is Schema, compiled once.
var schema = func() *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema))
	if err != nil {
		panic("config: agents.schema.json: " + err.Error())
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("agents.schema.json", doc); err != nil {
		panic("config: agents.schema.json: " + err.Error())
	}
	return c.MustCompile("agents.schema.json")
}()

// Parse reads an agents file's contents; name is the file's name in
// messages. It checks the file against Schema and what the schema cannot
// say (two agents of one name, a duration Go cannot read); Build checks
// what needs the node (the tools it has, the agents' options).
func Parse(name string, data []byte) (*File, error) {
	refuse := func(ps ...Problem) error { return &Error{File: name, Problems: ps} }
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		line, msg := yamlError(err)
		return nil, refuse(Problem{Line: line, Message: msg})
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return nil, refuse(Problem{Message: "the file is empty: it lists the agents to serve under agents:"})
	}
	f := &File{name: name, lines: map[string]int{"": root.Content[0].Line}}
	f.index(root.Content[0], "")
	var v any
	if err := root.Decode(&v); err != nil {
		line, msg := yamlError(err)
		return nil, refuse(Problem{Line: line, Message: msg})
	}
	b, err := json.Marshal(v)
	if err != nil {
		// A mapping whose keys are not strings (YAML allows it, JSON not).
		return nil, refuse(Problem{Line: root.Content[0].Line, Message: "the file is not a mapping of names to values: " + err.Error()})
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, refuse(Problem{Message: err.Error()})
	}
	if err := schema.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, refuse(Problem{Message: err.Error()})
		}
		return nil, refuse(f.schemaProblems(ve)...)
	}
	if err := root.Decode(f); err != nil {
		line, msg := yamlError(err)
		return nil, refuse(Problem{Line: line, Message: msg})
	}
	var ps []Problem
	// unique records that list[i] is named name, and reports a name taken.
	unique := func(names map[string]int, list string, i int, name string) {
		if j, ok := names[name]; ok {
			ps = append(ps, f.problem(fmt.Sprintf("%s[%d].name", list, i), fmt.Sprintf("%s[%d] is named %q already: each needs a name of its own", list, j, name)))
		}
		names[name] = i
	}
	servers := map[string]int{}
	for i, s := range f.MCPServers {
		at := fmt.Sprintf("mcpServers[%d]", i)
		unique(servers, "mcpServers", i, s.Name)
		if (s.Command == "") == (s.URL == "") {
			ps = append(ps, f.problem(at, "an MCP server has a command (stdio) or a url (streamable HTTP), one of them"))
		}
		if s.Command == "" && (len(s.Args) > 0 || len(s.Env) > 0) {
			ps = append(ps, f.problem(at, "args and env are a command's: this server has none"))
		}
		if s.URL == "" && len(s.Headers) > 0 {
			ps = append(ps, f.problem(at+".headers", "headers are an HTTP server's: this server has no url"))
		}
	}
	seen := map[string]int{}
	for i, a := range f.Agents {
		at := fmt.Sprintf("agents[%d]", i)
		unique(seen, "agents", i, a.Name)
		if a.Harness == "pi" {
			ps = append(ps, f.problem(at+".harness", "an agents file cannot choose the Pi harness yet: run the node with --harness pi for a Pi coding agent, or leave harness out (or a2) for A2's own"))
		}
		if a.StepTimeout != "" {
			if d, err := time.ParseDuration(a.StepTimeout); err != nil || d <= 0 {
				ps = append(ps, f.problem(at+".stepTimeout", fmt.Sprintf("%q is not a positive duration (for example 90s or 2m)", a.StepTimeout)))
			}
		}
		for j, t := range a.Tools {
			tat := fmt.Sprintf("%s.tools[%d]", at, j)
			kinds := 0
			for _, set := range []bool{t.Builtin != "", t.HTTP != nil, t.MCP != ""} {
				if set {
					kinds++
				}
			}
			switch {
			case kinds > 1:
				ps = append(ps, f.problem(tat, "a tool is built in (builtin), an HTTP endpoint (http) or an MCP server's (mcp), one of them"))
			case kinds == 0:
				ps = append(ps, f.problem(tat, "a tool needs builtin (a tool of the node, by name), http (an endpoint, with name) or mcp (a server of mcpServers)"))
			case t.MCP == "" && len(t.Only) > 0:
				ps = append(ps, f.problem(tat+".only", "only chooses among an MCP server's tools: this tool has no mcp"))
			case t.MCP != "" && (t.Name != "" || t.Description != "" || t.InputSchema != nil):
				ps = append(ps, f.problem(tat, "an MCP server's tools have their own names, descriptions and input schemas"))
			case t.MCP != "":
				if _, ok := servers[t.MCP]; !ok {
					ps = append(ps, f.problem(tat+".mcp", fmt.Sprintf("no server of mcpServers is named %q", t.MCP)))
				}
			case t.HTTP != nil && t.Name == "":
				ps = append(ps, f.problem(tat, "an HTTP tool needs a name, as the model calls it"))
			case t.Builtin != "" && (t.Name != "" || t.Description != "" || t.InputSchema != nil):
				ps = append(ps, f.problem(tat, "a built-in tool has its own name, description and input schema: name, description and inputSchema are for HTTP tools"))
			}
			if t.HTTP != nil && t.HTTP.Timeout != "" {
				if d, err := time.ParseDuration(t.HTTP.Timeout); err != nil || d <= 0 {
					ps = append(ps, f.problem(tat+".http.timeout", fmt.Sprintf("%q is not a positive duration (for example 10s)", t.HTTP.Timeout)))
				}
			}
		}
	}
	if len(ps) > 0 {
		return nil, refuse(ps...)
	}
	return f, nil
}

// Defaults are what an agent of a file gets for what the file leaves out:
// the node's own settings (--model, --step-timeout), and the environment
// that an HTTP tool's headers read (default os.Getenv).
type Defaults struct {
	Model       string
	StepTimeout time.Duration
	Getenv      func(string) string
	// Logger receives the MCP servers' restarts.
	Logger *slog.Logger
	// WithoutTools builds the agents without their tools and connects no
	// MCP server: a cluster gateway's, which routes to the members, where
	// the tools run (and where a problem of a tool is reported).
	WithoutTools bool
}

// Build makes the file's agents, connecting to its MCP servers (each
// server's tools are the ones it lists, then and whenever it says its list
// changed: the agents that use it get the new list, actors.Agent.SetTools;
// a tool of an `only` list that the server no longer lists is logged and
// left out). models serves their models
// (the node's providers); builtins are the tools the file may name. stop
// closes the servers' connections (and stops their commands): call it once
// the agents are served no more.
func (f *File) Build(ctx context.Context, models actors.ModelProvider, defaults Defaults, builtins []tools.Tool) (agents []*actors.Agent, stop func(), err error) {
	var conns map[string]*mcptool.Conn
	var ps []Problem
	if !defaults.WithoutTools {
		conns, ps = f.connect(ctx, defaults)
	}
	stop = func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	agents, err = f.build(models, defaults, builtins, conns, ps)
	if err != nil {
		stop()
		return nil, nil, err
	}
	f.watchTools(agents, defaults, builtins, conns)
	return agents, stop, nil
}

// watchTools gives the agents of each MCP server the server's new tools
// when it lists them again.
func (f *File) watchTools(agents []*actors.Agent, defaults Defaults, builtins []tools.Tool, conns map[string]*mcptool.Conn) {
	logger := defaults.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	known, names := builtinIndex(builtins)
	for server, c := range conns {
		var users []int
		for i, a := range f.Agents {
			if slices.ContainsFunc(a.Tools, func(t Tool) bool { return t.MCP == server }) {
				users = append(users, i)
			}
		}
		var mu sync.Mutex // one update of the server's agents at a time
		c.OnToolsChanged(func() {
			mu.Lock()
			defer mu.Unlock()
			for _, i := range users {
				list, ps := f.agentTools(i, known, names, conns, defaults.Getenv)
				for _, p := range ps {
					logger.Warn("an agent's tools after its MCP server's list changed: "+p.Message, "agent", agents[i].Name(), "server", server, "at", fmt.Sprintf("%s:%d: %s", f.name, p.Line, p.Path))
				}
				if err := agents[i].SetTools(list); err != nil {
					logger.Error("an agent keeps its tools: the new list is refused", "agent", agents[i].Name(), "server", server, "err", err)
					continue
				}
				logger.Info("an agent's tools changed with its MCP server's", "agent", agents[i].Name(), "server", server, "tools", len(list))
			}
		})
	}
}

// builtinIndex indexes the built-in tools by name, with their sorted names.
func builtinIndex(builtins []tools.Tool) (map[string]tools.Tool, []string) {
	known := make(map[string]tools.Tool, len(builtins))
	names := make([]string, 0, len(builtins))
	for _, t := range builtins {
		known[t.Name] = t
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return known, names
}

// connect connects to the file's MCP servers.
func (f *File) connect(ctx context.Context, defaults Defaults) (map[string]*mcptool.Conn, []Problem) {
	getenv := defaults.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	conns := map[string]*mcptool.Conn{}
	var ps []Problem
	for i, s := range f.MCPServers {
		at := fmt.Sprintf("mcpServers[%d]", i)
		expand := func(field string, m map[string]string) map[string]string {
			out := make(map[string]string, len(m))
			for k, v := range m {
				out[k] = os.Expand(v, func(name string) string {
					val := getenv(name)
					if val == "" {
						ps = append(ps, f.problem(at+"."+field+"."+k, fmt.Sprintf("the environment has no %s (or it is empty)", name)))
					}
					return val
				})
			}
			return out
		}
		srv := mcptool.Server{Name: s.Name, Command: s.Command, Args: s.Args, URL: s.URL, Headers: expand("headers", s.Headers), Logger: defaults.Logger}
		for k, v := range expand("env", s.Env) {
			srv.Env = append(srv.Env, k+"="+v)
		}
		c, err := mcptool.Connect(ctx, srv)
		if err != nil {
			ps = append(ps, f.problem(at, strings.TrimPrefix(err.Error(), "mcptool: ")))
			continue
		}
		conns[s.Name] = c
	}
	return conns, ps
}

// build makes the agents, given the servers' connections and the problems
// found so far.
func (f *File) build(models actors.ModelProvider, defaults Defaults, builtins []tools.Tool, conns map[string]*mcptool.Conn, ps []Problem) ([]*actors.Agent, error) {
	opts, ops := f.options(models, defaults, builtins, conns)
	ps = append(ps, ops...)
	var out []*actors.Agent
	for i, o := range opts {
		agent, err := actors.NewAgent(o)
		if err != nil {
			at := fmt.Sprintf("agents[%d]", i)
			path := at
			var ce *protocol.ConfigError
			if errors.As(err, &ce) && ce.Option != "" {
				// The runtime names harness options by their Go path
				// (harness.compaction.thresholdTokens); the file has no
				// harness level.
				option := strings.TrimPrefix(ce.Option, "harness.")
				if _, ok := f.lines[at+"."+option]; ok {
					path = at + "." + option
				}
			}
			ps = append(ps, f.problem(path, err.Error()))
			continue
		}
		out = append(out, agent)
	}
	if len(ps) > 0 {
		return nil, &Error{File: f.name, Problems: ps}
	}
	return out, nil
}

// options are the options of the file's agents, in order, and the
// problems of the tools they name.
func (f *File) options(models actors.ModelProvider, defaults Defaults, builtins []tools.Tool, conns map[string]*mcptool.Conn) ([]actors.AgentOptions, []Problem) {
	known, names := builtinIndex(builtins)
	var ps []Problem
	out := make([]actors.AgentOptions, len(f.Agents))
	for i, a := range f.Agents {
		o := actors.AgentOptions{
			Name:         a.Name,
			Model:        harness.ModelID(cmp.Or(a.Model, defaults.Model)),
			Models:       models,
			Instructions: harness.Instructions(a.Instructions),
			MaxSteps:     a.MaxSteps,
			Progress:     protocol.ProgressOptions{MaxDelayMs: a.Progress.MaxDelayMs, MaxChunks: a.Progress.MaxChunks},
			Harness: actors.HarnessOptions{StepTimeout: defaults.StepTimeout,
				Compaction: protocol.CompactionOptions{Disabled: a.Compaction.Disabled, ThresholdTokens: a.Compaction.ThresholdTokens, Instructions: a.Compaction.Instructions}},
		}
		if a.StepTimeout != "" {
			o.Harness.StepTimeout, _ = time.ParseDuration(a.StepTimeout) // Parse checked it
		}
		if !defaults.WithoutTools {
			tools, tps := f.agentTools(i, known, names, conns, defaults.Getenv)
			ps = append(ps, tps...)
			o.Tools = tools
		}
		out[i] = o
	}
	if len(ps) > 0 {
		return nil, ps
	}
	return out, nil
}

// httpTool makes the HTTP tool t, at path at.
func (f *File) httpTool(at string, t Tool, getenv func(string) string) (tools.Tool, []Problem) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var ps []Problem
	headers := make(map[string]string, len(t.HTTP.Headers))
	for k, v := range t.HTTP.Headers {
		headers[k] = os.Expand(v, func(name string) string {
			val := getenv(name)
			if val == "" {
				ps = append(ps, f.problem(at+".http.headers."+k, fmt.Sprintf("the environment has no %s (or it is empty)", name)))
			}
			return val
		})
	}
	o := httptool.Options{Name: t.Name, Description: t.Description, URL: t.HTTP.URL, Method: t.HTTP.Method, Headers: headers}
	if t.HTTP.Timeout != "" {
		o.Timeout, _ = time.ParseDuration(t.HTTP.Timeout) // Parse checked it
	}
	if t.InputSchema != nil {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			ps = append(ps, f.problem(at+".inputSchema", "not a JSON Schema: "+err.Error()))
		}
		o.InputSchema = b
	}
	tool, err := httptool.New(o)
	if err != nil {
		ps = append(ps, f.problem(at+".http", strings.TrimPrefix(err.Error(), "httptool: ")))
	}
	if t.Recovery != "" {
		tool.Recovery = t.Recovery
	}
	if t.Approval {
		tool.NeedsApproval = func(json.RawMessage) bool { return true }
	}
	return tool, ps
}

// problem is a Problem at path, at path's line (or its nearest parent's).
func (f *File) problem(path, msg string) Problem {
	for p := path; ; {
		if line, ok := f.lines[p]; ok {
			return Problem{Line: line, Path: path, Message: msg}
		}
		if p == "" {
			return Problem{Path: path, Message: msg}
		}
		p = p[:max(strings.LastIndexAny(p, ".["), 0)]
	}
}

// index records the line of each value under n, by path.
func (f *File) index(n *yaml.Node, path string) {
	if path != "" {
		f.lines[path] = n.Line
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			p := key
			if path != "" {
				p = path + "." + key
			}
			f.lines[p] = n.Content[i].Line
			f.index(n.Content[i+1], p)
			f.lines[p] = n.Content[i].Line // the key's line: where a reader looks
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			f.index(c, fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

var printer = message.NewPrinter(language.English)

// schemaProblems are the leaves of a schema validation error, each at its
// path's line, in line order.
func (f *File) schemaProblems(ve *jsonschema.ValidationError) []Problem {
	var ps []Problem
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		ps = append(ps, f.problem(pathOf(e.InstanceLocation), e.ErrorKind.LocalizedString(printer)))
	}
	walk(ve)
	slices.SortStableFunc(ps, func(a, b Problem) int { return a.Line - b.Line })
	return slices.Compact(ps)
}

// pathOf is a JSON pointer's tokens as a path: agents[0].tools[1].
func pathOf(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		if _, err := strconv.Atoi(t); err == nil {
			b.WriteString("[" + t + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(t)
	}
	return b.String()
}

// yamlError splits a YAML error into its line and message.
func yamlError(err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = strings.Join(te.Errors, "; ")
	}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.Index(rest, ":"); i > 0 {
			if line, err := strconv.Atoi(rest[:i]); err == nil {
				return line, strings.TrimSpace(rest[i+1:])
			}
		}
	}
	return 0, msg
}

// agentTools are the tools of the file's agent i: built-ins, HTTP tools
// and the tools its MCP servers list now (conns), with the problems of the
// ones it names that do not exist.
func (f *File) agentTools(i int, known map[string]tools.Tool, names []string, conns map[string]*mcptool.Conn, getenv func(string) string) ([]tools.Tool, []Problem) {
	a := f.Agents[i]
	var out []tools.Tool
	var ps []Problem
	for j, t := range a.Tools {
		if t.MCP != "" {
			c, ok := conns[t.MCP]
			if !ok {
				continue // its connection failed: a problem already
			}
			ts, err := c.Tools()
			if err != nil {
				ps = append(ps, f.problem(fmt.Sprintf("agents[%d].tools[%d].mcp", i, j), strings.TrimPrefix(err.Error(), "mcptool: ")))
				continue
			}
			if len(t.Only) > 0 {
				listed := map[string]tools.Tool{}
				for _, tool := range ts {
					listed[tool.Name] = tool
				}
				ts = ts[:0:0]
				for k, name := range t.Only {
					tool, ok := listed[name]
					if !ok {
						ps = append(ps, f.problem(fmt.Sprintf("agents[%d].tools[%d].only[%d]", i, j, k), fmt.Sprintf("the server %q lists no tool %q", t.MCP, name)))
						continue
					}
					ts = append(ts, tool)
				}
			}
			for _, tool := range ts {
				if t.Recovery != "" {
					tool.Recovery = t.Recovery
				}
				if t.Approval {
					tool.NeedsApproval = func(json.RawMessage) bool { return true }
				}
				out = append(out, tool)
			}
			continue
		}
		if t.HTTP != nil {
			tool, tps := f.httpTool(fmt.Sprintf("agents[%d].tools[%d]", i, j), t, getenv)
			ps = append(ps, tps...)
			out = append(out, tool)
			continue
		}
		tool, ok := known[t.Builtin]
		if !ok {
			ps = append(ps, f.problem(fmt.Sprintf("agents[%d].tools[%d].builtin", i, j), fmt.Sprintf("no built-in tool is named %q (the node has: %s)", t.Builtin, strings.Join(names, ", "))))
			continue
		}
		if t.Recovery != "" {
			tool.Recovery = t.Recovery
		}
		if t.Approval {
			tool.NeedsApproval = func(json.RawMessage) bool { return true }
		}
		out = append(out, tool)
	}
	return out, ps
}
