package config

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
	"github.com/a2-runtime/a2/tools/mcptool"
)

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
	// Pi gives the Pi harness to the agents that choose it (harness: pi):
	// called once, at Build, when one does (and the node runs tools).
	// Nil: such a file is refused.
	Pi func(context.Context) (External, error)
}

// External is an external harness an agent may choose (harness/pi's
// Harness): its own tools, which the agent's tools of the same names
// replace, and the agent's harness options given its models.
type External interface {
	Tools() []tools.Tool
	HarnessOptions(models actors.ModelProvider) actors.HarnessOptions
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
	var pi External
	if !defaults.WithoutTools {
		conns, ps = f.connect(ctx, defaults)
		var pps []Problem
		pi, pps = f.pi(ctx, defaults)
		ps = append(ps, pps...)
	}
	stop = func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	agents, err = f.build(models, defaults, builtins, conns, pi, ps)
	if err != nil {
		stop()
		return nil, nil, err
	}
	f.watchTools(agents, defaults, builtins, conns, pi)
	return agents, stop, nil
}

// pi is the Pi harness when an agent of the file chooses it.
func (f *File) pi(ctx context.Context, defaults Defaults) (External, []Problem) {
	at := slices.IndexFunc(f.Agents, func(a Agent) bool { return a.Harness == "pi" })
	if at < 0 {
		return nil, nil
	}
	path := fmt.Sprintf("agents[%d].harness", at)
	if defaults.Pi == nil {
		return nil, []Problem{f.problem(path, "this node cannot run Pi's coding agent")}
	}
	h, err := defaults.Pi(ctx)
	if err != nil {
		return nil, []Problem{f.problem(path, err.Error())}
	}
	return h, nil
}

// withHarness adds an external harness's tools to an agent's: the
// agent's tool of one of their names replaces the harness's
// (R-HARNESS-19).
func withHarness(own []tools.Tool, h External) []tools.Tool {
	if h == nil {
		return own
	}
	out := make([]tools.Tool, 0, len(own)+4)
	for _, t := range h.Tools() {
		if !slices.ContainsFunc(own, func(o tools.Tool) bool { return o.Name == t.Name }) {
			out = append(out, t)
		}
	}
	return append(out, own...)
}

// watchTools gives the agents of each MCP server the server's new tools
// when it lists them again.
func (f *File) watchTools(agents []*actors.Agent, defaults Defaults, builtins []tools.Tool, conns map[string]*mcptool.Conn, pi External) {
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
				if f.Agents[i].Harness == "pi" {
					list = withHarness(list, pi)
				}
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
func (f *File) build(models actors.ModelProvider, defaults Defaults, builtins []tools.Tool, conns map[string]*mcptool.Conn, pi External, ps []Problem) ([]*actors.Agent, error) {
	opts, ops := f.options(models, defaults, builtins, conns, pi)
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
func (f *File) options(models actors.ModelProvider, defaults Defaults, builtins []tools.Tool, conns map[string]*mcptool.Conn, pi External) ([]actors.AgentOptions, []Problem) {
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
			if a.Harness == "pi" && pi != nil {
				// Pi's loop runs each model step and Pi's tools with the
				// agent's (R-HARNESS-01); the file's step timeout and
				// compaction stay.
				h := pi.HarnessOptions(models)
				h.StepTimeout, h.Compaction = o.Harness.StepTimeout, o.Harness.Compaction
				o.Harness, o.Tools = h, withHarness(tools, pi)
			}
		}
		out[i] = o
	}
	if len(ps) > 0 {
		return nil, ps
	}
	return out, nil
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
