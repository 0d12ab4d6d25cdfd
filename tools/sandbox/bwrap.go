package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Bubblewrap runs each command in a bubblewrap sandbox (bwrap, from
// Debian's bubblewrap package), which sees:
//   - the session's working directory, read and write, at WorkDir
//     (/work by default), where commands start;
//   - the host's /usr (with /bin, /lib, /lib64 and /sbin as on the host)
//     and /etc/alternatives, read-only; nothing else of the host's files;
//   - a fresh /proc, /dev and an empty /tmp;
//   - only the sandbox's environment (PATH, HOME=WorkDir, LANG and
//     BubblewrapOptions.Env), never the server's;
//   - no network, unless BubblewrapOptions.Network (then also the host's
//     /etc/resolv.conf, /etc/hosts and /etc/ssl, read-only);
//   - its own user, PID, IPC and UTS namespaces, no capabilities, and a
//     new session (no terminal to inject into);
//
// and is killed, with everything it started, at cancellation, at
// BubblewrapOptions.Timeout, or when the server exits.
type Bubblewrap struct {
	*files
	opts BubblewrapOptions
	env  map[string]string
}

// BubblewrapOptions configure NewBubblewrap.
type BubblewrapOptions struct {
	// WorkDir is the working directory's path inside the sandbox
	// (default /work).
	WorkDir string
	// Env is added to the commands' environment.
	Env map[string]string
	// Network shares the host's network with the sandbox.
	Network bool
	// Timeout bounds each command (default 10 minutes; negative: none).
	Timeout time.Duration
	// Bwrap is the bwrap binary (default: bwrap on PATH).
	Bwrap string
}

// ErrNoBubblewrap is a host without bwrap.
var ErrNoBubblewrap = errors.New("sandbox: bubblewrap (bwrap) is not installed; install Debian's bubblewrap package")

// NewBubblewrap makes (if need be) the host directory dir and opens a
// sandbox whose working directory it is.
func NewBubblewrap(dir string, opts BubblewrapOptions) (*Bubblewrap, error) {
	if opts.WorkDir == "" {
		opts.WorkDir = "/work"
	}
	if !filepath.IsAbs(opts.WorkDir) || filepath.Clean(opts.WorkDir) != opts.WorkDir || opts.WorkDir == "/" {
		return nil, fmt.Errorf("sandbox: WorkDir %q must be a clean absolute path below /", opts.WorkDir)
	}
	switch opts.WorkDir {
	case "/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc", "/proc", "/dev", "/tmp":
		return nil, fmt.Errorf("sandbox: WorkDir %q is one of the sandbox's system directories", opts.WorkDir)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Minute
	}
	if opts.Bwrap == "" {
		path, err := exec.LookPath("bwrap")
		if err != nil {
			return nil, ErrNoBubblewrap
		}
		opts.Bwrap = path
	}
	if err := checkEnv(opts.Env); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	f, err := openFiles(abs, opts.WorkDir)
	if err != nil {
		return nil, err
	}
	env := map[string]string{"PATH": defaultPath, "HOME": opts.WorkDir, "LANG": "C.UTF-8"}
	for k, v := range opts.Env {
		env[k] = v
	}
	return &Bubblewrap{files: f, opts: opts, env: env}, nil
}

// Description implements Sandbox.
func (b *Bubblewrap) Description() string {
	net := "It has no network."
	if b.opts.Network {
		net = "It has the network."
	}
	return fmt.Sprintf("You work in %s, a Linux sandbox's working directory; commands run there with /bin/sh, and only that directory persists. %s", b.opts.WorkDir, net)
}

// WorkDir implements Sandbox.
func (b *Bubblewrap) WorkDir() string { return b.opts.WorkDir }

// Spawn implements Sandbox.
func (b *Bubblewrap) Spawn(ctx context.Context, c Command) (Process, error) {
	if err := checkEnv(c.Env); err != nil {
		return nil, err
	}
	_, inside, err := b.commandDir(c.Dir)
	if err != nil {
		return nil, err
	}
	timeout := max(b.opts.Timeout, 0)
	return start(ctx, append(append([]string{b.opts.Bwrap}, b.args(inside, environ(b.env, c.Env))...), "--", "/bin/sh", "-c", c.Line), nil, b.files.host, timeout)
}

// args are bwrap's arguments for a command that starts in dir with env.
func (b *Bubblewrap) args(dir string, env []string) []string {
	a := []string{"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--ro-bind", "/usr", "/usr"}
	for _, d := range []string{"/bin", "/lib", "/lib64", "/sbin"} {
		st, err := os.Lstat(d)
		switch {
		case err != nil:
		case st.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", target, d)
			}
		case st.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	a = append(a, "--ro-bind-try", "/etc/alternatives", "/etc/alternatives")
	if b.opts.Network {
		a = append(a, "--share-net",
			"--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf",
			"--ro-bind-try", "/etc/hosts", "/etc/hosts",
			"--ro-bind-try", "/etc/ssl", "/etc/ssl")
	}
	a = append(a, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--bind", b.files.host, b.opts.WorkDir, "--chdir", dir, "--clearenv")
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	return a
}

// Pool gives each session its sandbox: a directory of its own below a
// base directory. Every call for a session answers a sandbox over the same
// directory, so the session sees the same files whoever asks and however
// often (concurrent callers too). A sandbox holds nothing open between
// calls, so a Pool keeps none; it never removes a directory: a sandbox
// lives as long as its files.
type Pool struct {
	base string
	open func(dir string) (Sandbox, error)
}

// NewPool is a Pool of sandboxes under base, opened by open with each
// session's directory (NewBubblewrap or NewDir with their options).
func NewPool(base string, open func(dir string) (Sandbox, error)) *Pool {
	return &Pool{base: base, open: open}
}

// Sandbox returns session's sandbox.
func (p *Pool) Sandbox(ctx context.Context, session string) (Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return p.open(filepath.Join(p.base, SessionDir(session)))
}

// SessionDir is the name of a session's directory in a Pool: a hash of
// its ID (session IDs may hold any character).
func SessionDir(session string) string {
	h := sha256.Sum256([]byte(session))
	return hex.EncodeToString(h[:16])
}
