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
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/a2-runtime/a2/tools"
	"github.com/a2-runtime/a2/tools/httptool"
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
