package external

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Options configure a Loop.
type Options struct {
	// Command starts the loop: its program and arguments. Required.
	Command []string
	// Dir is the loop's working directory; "" is the server's.
	Dir string
	// Env is the loop's environment besides PATH, HOME and LANG, which it
	// gets from the server's; it never gets the server's other variables
	// (a provider's key among them): its live model calls are A2's.
	Env []string
	// Logger receives the loop's log lines and standard error; nil
	// discards them.
	Logger *slog.Logger
	// StartTimeout bounds the wait for a started loop's hello; 0 is 30 s.
	StartTimeout time.Duration
	// Sandboxes resolves a session's sandbox: the loop's tools (Tools)
	// work on it, and each run names its working directory (cwd). Nil:
	// the loop has no sandbox.
	Sandboxes SandboxFor
}

// ErrExited is the error of the runs in flight when their loop's process
// ended (crashed, was killed, or wrote what is not the protocol); the step
// fails and A2 retries it with a new process.
var ErrExited = errors.New("external: the agent loop's process ended")

// ErrClosed is returned once the Loop is closed.
var ErrClosed = errors.New("external: the loop is closed")

// Loop is one agent loop process serving the runs of many sessions,
// started at its first run and started again after it ends.
type Loop struct {
	opts  Options
	log   *slog.Logger
	seq   atomic.Uint64
	stats stats

	mu       sync.Mutex
	proc     *process
	closed   bool
	failures int       // processes in a row that ended soon after their start
	started  time.Time // the current or last process's start
}

// New makes a Loop; it starts no process until its first run.
func New(opts Options) (*Loop, error) {
	if len(opts.Command) == 0 || opts.Command[0] == "" {
		return nil, errors.New("external: Options.Command is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Loop{opts: opts, log: log}, nil
}

// Close ends the loop's process, failing the runs in flight, and refuses
// new runs.
func (l *Loop) Close() error {
	l.mu.Lock()
	l.closed = true
	p := l.proc
	l.mu.Unlock()
	if p != nil {
		p.kill(ErrClosed)
		<-p.done
	}
	return nil
}

// PID is the running process's ID, 0 when none runs (for tests and logs).
func (l *Loop) PID() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.proc == nil || l.proc.ended() {
		return 0
	}
	return l.proc.cmd.Process.Pid
}

// process returns the running process, starting one if none runs. A
// process that ended within a second of its start makes the next start
// wait (100 ms doubling to 5 s), so a loop that cannot start does not
// spin.
func (l *Loop) process(ctx context.Context) (*process, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if l.proc != nil && !l.proc.ended() {
		return l.proc, nil
	}
	if l.proc != nil {
		if l.proc.endedAt().Sub(l.started) < time.Second {
			l.failures++
		} else {
			l.failures = 0
		}
		l.proc = nil
	}
	if l.failures > 0 {
		wait := min(100*time.Millisecond<<min(l.failures-1, 6), 5*time.Second)
		l.mu.Unlock()
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			l.mu.Lock()
			return nil, context.Cause(ctx)
		}
		l.mu.Lock()
		if l.closed {
			return nil, ErrClosed
		}
		if l.proc != nil && !l.proc.ended() {
			return l.proc, nil // another caller started one meanwhile
		}
	}
	l.started = time.Now()
	p, err := l.start(ctx)
	if err != nil {
		l.failures++
		return nil, err
	}
	l.proc = p
	return p, nil
}

// process is one run of the loop's program.
type process struct {
	l     *Loop
	cmd   *exec.Cmd
	stdin io.WriteCloser

	wmu sync.Mutex
	enc *json.Encoder

	hello Message // its hello: its name and the tools it implements

	mu    sync.Mutex
	runs  map[string]*run
	warm  map[string]*warmState // by session: the states the loop saved (warm.go)
	err   error
	endAt time.Time
	done  chan struct{} // closed once the process has exited and its runs failed
}

// ended reports whether the process was killed or has exited (it may
// still be exiting: done closes then).
func (p *process) ended() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err != nil
}

func (p *process) endedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.endAt
}

// start starts the program and waits for its hello.
func (l *Loop) start(ctx context.Context) (*process, error) {
	cmd := exec.Command(l.opts.Command[0], l.opts.Command[1:]...)
	cmd.Dir = l.opts.Dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "LANG=" + cmp.Or(os.Getenv("LANG"), "C.UTF-8")}, l.opts.Env...)
	// Its own process group (killed whole), and killed with the server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("external: start %s: %w", l.opts.Command[0], err)
	}
	p := &process{l: l, cmd: cmd, stdin: stdin, enc: json.NewEncoder(stdin), runs: map[string]*run{}, done: make(chan struct{})}
	hello := make(chan Message, 1)
	go p.logStderr(stderr)
	go p.read(stdout, hello)
	timer := time.NewTimer(cmp.Or(l.opts.StartTimeout, 30*time.Second))
	defer timer.Stop()
	select {
	case h := <-hello:
		if h.Protocol != ProtocolVersion {
			err := fmt.Errorf("external: the loop %q speaks protocol %d, this server %d", h.Name, h.Protocol, ProtocolVersion)
			p.kill(err)
			return nil, err
		}
		l.log.Info("external: agent loop started", "name", h.Name, "pid", cmd.Process.Pid, "tools", len(h.Tools))
		p.hello = h
		return p, nil
	case <-p.done:
		return nil, p.err
	case <-timer.C:
		err := fmt.Errorf("%w: no hello within %s", ErrExited, cmp.Or(l.opts.StartTimeout, 30*time.Second))
		p.kill(err)
		return nil, err
	case <-ctx.Done():
		p.kill(context.Cause(ctx))
		return nil, context.Cause(ctx)
	}
}

// read decodes the loop's lines and hands each to its run, until the
// output ends or is not the protocol; then the process is killed and its
// runs fail.
func (p *process) read(stdout io.Reader, hello chan<- Message) {
	dec := json.NewDecoder(bufio.NewReaderSize(stdout, 64<<10))
	greeted := false
	var err error
	for {
		var m Message
		if err = dec.Decode(&m); err != nil {
			if !errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: its output is not the protocol: %v", ErrExited, err)
			}
			break
		}
		switch {
		case m.Type == TypeHello && !greeted:
			greeted = true
			hello <- m
		case !greeted:
			err = fmt.Errorf("%w: its first line is %q, not a hello", ErrExited, m.Type)
		case m.Type == TypeLog:
			p.l.log.Log(context.Background(), logLevel(m.Level), "external: "+m.Message, "run", m.Run)
		default:
			p.mu.Lock()
			r := p.runs[m.Run]
			p.mu.Unlock()
			if r == nil {
				continue // a run that ended: its late lines are dropped
			}
			select {
			case r.in <- m:
			case <-r.ended:
			}
		}
		if err != nil {
			break
		}
	}
	if errors.Is(err, io.EOF) {
		err = ErrExited
	}
	p.kill(err)
}

// kill ends the process (its whole group) and fails its runs with err;
// the first cause is kept.
func (p *process) kill(err error) {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return
	}
	p.err, p.endAt = err, time.Now()
	runs := p.runs
	p.runs = map[string]*run{}
	p.mu.Unlock()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.stdin.Close()
	for _, r := range runs {
		r.fail(err)
	}
	go func() {
		state, _ := p.cmd.Process.Wait()
		p.l.log.Warn("external: agent loop ended", "pid", p.cmd.Process.Pid, "state", fmt.Sprint(state), "cause", err)
		close(p.done)
	}()
}

// logStderr logs the loop's standard error, a line at a time.
func (p *process) logStderr(r io.Reader) {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 4096), 64<<10)
	for s.Scan() {
		p.l.log.Info("external: " + s.Text())
	}
}

func logLevel(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// send writes one line to the loop.
func (p *process) send(m Message) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.enc.Encode(m); err != nil {
		err = fmt.Errorf("%w: write: %v", ErrExited, err)
		p.kill(err)
		return err
	}
	return nil
}

// run is one step's exchange with the loop.
type run struct {
	id    string
	p     *process
	in    chan Message
	ended chan struct{} // closed when the run ends (end sent or the process died)
	once  sync.Once
	err   error // why it failed, set before ended closes
}

func (r *run) fail(err error) {
	r.once.Do(func() {
		r.err = err
		close(r.ended)
	})
}

// open starts a run: registers it and sends the run message. A step's
// run starts from the loop's saved state of its session when the history
// begins with what the state stands for, unless cold (warm.go).
func (l *Loop) open(ctx context.Context, m Message, cold bool) (*run, error) {
	p, err := l.process(ctx)
	if err != nil {
		return nil, err
	}
	if m.Type == TypeRun {
		if w := p.base(m.Session, m.Messages); w != nil && !cold {
			m.Base, m.Messages = w.run, m.Messages[w.count:]
			l.stats.warm.Add(1)
		}
		l.stats.runs.Add(1)
		l.stats.messages.Add(uint64(len(m.Messages)))
	}
	r := &run{id: m.Run, p: p, in: make(chan Message, 16), ended: make(chan struct{})}
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return nil, p.err
	}
	p.runs[r.id] = r
	p.mu.Unlock()
	if err := p.send(m); err != nil {
		return nil, err
	}
	return r, nil
}

// close ends the run on A2's side: the loop is told (end), and later
// lines of the run are dropped.
func (r *run) close(reason string) {
	r.p.mu.Lock()
	_, live := r.p.runs[r.id]
	delete(r.p.runs, r.id)
	r.p.mu.Unlock()
	if live {
		_ = r.p.send(Message{Type: TypeEnd, Run: r.id, Message: reason})
	}
	r.fail(errRunEnded)
}

var errRunEnded = errors.New("external: the run ended")

// newRunID names a run: its generation and a number, unique in this Loop.
func (l *Loop) newRunID(generation string) string {
	return generation + "#" + strconv.FormatUint(l.seq.Add(1), 10)
}
