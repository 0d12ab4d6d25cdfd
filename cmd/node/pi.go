package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/pi"
	"github.com/a2-runtime/a2/harness/providers"
	"github.com/a2-runtime/a2/tools/sandbox"
)

// startPi starts the Pi sidecar, each session in a sandbox of its own
// below --sandboxes (bubblewrap: the sandbox's directory at /work, no
// network; plain directories with --sandbox-dirs).
func startPi(ctx context.Context, cfg config, logger *slog.Logger) (*pi.Harness, error) {
	base := cmp.Or(cfg.sandboxes, filepath.Join(filepath.Dir(filepath.Clean(cfg.data)), "sandboxes"))
	open := func(dir string) (sandbox.Sandbox, error) {
		return sandbox.NewBubblewrap(dir, sandbox.BubblewrapOptions{})
	}
	if cfg.sandboxDirs {
		open = func(dir string) (sandbox.Sandbox, error) { return sandbox.NewDir(dir, sandbox.DirOptions{}) }
	} else if _, err := exec.LookPath("bwrap"); err != nil {
		return nil, errors.New("Pi's coding agent runs each session's commands in a bubblewrap sandbox: install bubblewrap (Debian's package bubblewrap)")
	}
	pool := sandbox.NewPool(base, open)
	h, err := pi.New(ctx, pi.Options{Sandbox: pool.Sandbox, Dir: cfg.piSidecar, Logger: logger})
	if errors.Is(err, pi.ErrNotInstalled) {
		return nil, fmt.Errorf("%w: run npm ci in %s (or point --pi-sidecar at an installed copy)", err, cmp.Or(cfg.piSidecar, pi.SidecarDir()))
	}
	return h, err
}

// piAgent is the default agent as a Pi coding agent (--harness pi): Pi's
// prompt and tools, every model call through the node's models. Its stop
// ends the sidecar.
func piAgent(ctx context.Context, cfg config, p *providers.Set, logger *slog.Logger) ([]*actors.Agent, func(), error) {
	h, err := startPi(ctx, cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	opts := h.HarnessOptions(p.For)
	opts.StepTimeout = cfg.stepTimeout
	agent, err := actors.NewAgent(actors.AgentOptions{
		Name:    defaultAgent,
		Model:   harness.ModelID(p.Model()),
		Models:  p.For,
		Tools:   h.Tools(),
		Harness: opts,
	})
	if err != nil {
		_ = h.Close()
		return nil, nil, err
	}
	return []*actors.Agent{agent}, func() { _ = h.Close() }, nil
}
