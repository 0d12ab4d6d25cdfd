package sandbox

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// Dir is a sandbox in a plain directory of the host: its file operations
// are confined to the directory, and its commands run on the host with
// the sandbox's environment alone (never the server's), in a process
// group killed at cancellation or at the time limit. Nothing else is
// isolated: a command can read and write whatever the server's user can.
// For tests and trusted local use; Bubblewrap is the sandbox for agents.
type Dir struct {
	*files
	env     map[string]string
	timeout time.Duration
}

// DirOptions configure NewDir.
type DirOptions struct {
	// Env is the commands' environment; PATH defaults to the system's
	// directories, HOME to the directory.
	Env map[string]string
	// Timeout bounds each command; 0: none.
	Timeout time.Duration
}

// NewDir makes (if need be) and opens the directory dir.
func NewDir(dir string, opts DirOptions) (*Dir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := checkEnv(opts.Env); err != nil {
		return nil, err
	}
	f, err := openFiles(abs, abs)
	if err != nil {
		return nil, err
	}
	env := map[string]string{"PATH": defaultPath, "HOME": abs, "LANG": "C.UTF-8"}
	for k, v := range opts.Env {
		env[k] = v
	}
	return &Dir{files: f, env: env, timeout: opts.Timeout}, nil
}

// defaultPath is a command's PATH unless the sandbox sets one.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// Description implements Sandbox.
func (d *Dir) Description() string {
	return fmt.Sprintf("You work in the directory %s; commands run there with /bin/sh.", d.files.host)
}

// WorkDir implements Sandbox.
func (d *Dir) WorkDir() string { return d.files.host }

// Spawn implements Sandbox.
func (d *Dir) Spawn(ctx context.Context, c Command) (Process, error) {
	if err := checkEnv(c.Env); err != nil {
		return nil, err
	}
	host, _, err := d.commandDir(c.Dir)
	if err != nil {
		return nil, err
	}
	return start(ctx, []string{"/bin/sh", "-c", c.Line}, environ(d.env, c.Env), host, d.timeout)
}
