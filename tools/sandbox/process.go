package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"
)

// proc is a command started on the host in a process group of its own
// (bwrap, or the shell of a Dir sandbox), killed as a group. Its output
// reaches the caller through pipes that end when the command has ended,
// and at most waitDelay later when a process it started (and that escaped
// its group) still holds them.
type proc struct {
	pid            int
	stdout, stderr *io.PipeReader
	ctx            context.Context

	waited chan struct{}
	code   int
	err    error
}

// waitDelay is how long a command's pipes stay open after it ended.
const waitDelay = 2 * time.Second

// start runs argv with exactly env (never the server's environment) in
// dir, bounded by timeout when positive.
func start(ctx context.Context, argv []string, env []string, dir string, timeout time.Duration) (*proc, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, ErrTimeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append([]string{}, env...) // non-nil: nil would pass the server's environment
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = waitDelay
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	cmd.Stdout, cmd.Stderr = outW, errW
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("sandbox: start %s: %w", argv[0], err)
	}
	p := &proc{pid: cmd.Process.Pid, stdout: outR, stderr: errR, ctx: ctx, waited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		outW.Close()
		errW.Close()
		p.code = cmd.ProcessState.ExitCode()
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, ErrTimeout):
			p.err = ErrTimeout
		case ctx.Err() != nil:
			p.err = cause
		default:
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) && !errors.Is(err, exec.ErrWaitDelay) {
				p.err = err
			}
		}
		close(p.waited)
		cancel()
	}()
	go func() {
		select {
		case <-ctx.Done():
			p.Kill()
		case <-p.waited:
		}
	}()
	return p, nil
}

func (p *proc) Stdout() io.Reader { return p.stdout }
func (p *proc) Stderr() io.Reader { return p.stderr }

// Kill kills the process group.
func (p *proc) Kill() {
	select {
	case <-p.waited:
		return
	default:
	}
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
}

// Wait implements Process. A caller that stops reading the streams
// before their end does not block the command's end: what it leaves is
// dropped.
func (p *proc) Wait() (int, error) {
	go func() { _, _ = io.Copy(io.Discard, p.stdout) }()
	go func() { _, _ = io.Copy(io.Discard, p.stderr) }()
	<-p.waited
	return p.code, p.err
}

// environ merges the sandbox's environment and a command's into
// KEY=VALUE pairs, in key order.
func environ(base, over map[string]string) []string {
	m := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		m[k] = v
	}
	for k, v := range over {
		m[k] = v
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+m[k])
	}
	return out
}

// checkEnv refuses a variable name the environment cannot hold.
func checkEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fmt.Errorf("sandbox: environment variable %q cannot be set", k)
		}
	}
	return nil
}
