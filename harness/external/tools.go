package external

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/tools"
	"github.com/a2-runtime/a2/tools/sandbox"
)

// ReadLimit is the most a loop's tool moves from the sandbox per file read
// or command (R-HARNESS-27): a larger file fails the read, a command whose
// output passes it is stopped and fails; both errors tell the model to
// read in parts.
const ReadLimit = 4 << 20

// SandboxFor resolves a session's sandbox: the same one for a session
// every time, safe for concurrent calls (sandbox.Pool.Sandbox is one).
type SandboxFor = sandbox.Resolver

// Tools returns the tools the loop implements (those its hello lists) as
// A2 tools, for the agent's Tools: each execution asks the loop to run its
// own implementation (Pi's read, write, edit and bash) and serves the
// sandbox operations it asks for against the session's sandbox
// (Options.Sandboxes). It starts the loop's process to learn them.
func (l *Loop) Tools(ctx context.Context) ([]tools.Tool, error) {
	sandboxes := l.opts.Sandboxes
	if sandboxes == nil {
		return nil, errors.New("external: the loop's tools need Options.Sandboxes, a sandbox for each session")
	}
	p, err := l.process(ctx)
	if err != nil {
		return nil, err
	}
	var out []tools.Tool
	for _, d := range p.hello.Tools {
		out = append(out, tools.Tool{Name: d.Name, Description: d.Description, InputSchema: d.InputSchema,
			Execute: func(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
				return l.execute(ctx, sandboxes, d.Name, input)
			}})
	}
	return out, nil
}

// execute runs one call of a loop's tool.
func (l *Loop) execute(ctx context.Context, sandboxes SandboxFor, name string, input json.RawMessage) (json.RawMessage, error) {
	hc, err := tools.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	// The attempt's sandbox, when the agent's harness resolved it for the
	// execution (HarnessOptions.Sandbox); else resolved here.
	sb := hc.Sandbox
	if sb == nil {
		if sb, err = sandbox.Resolve(ctx, sandboxes, hc.Session); err != nil {
			return nil, fmt.Errorf("external: %w", err)
		}
	}
	id := "x:" + hc.Call.ToolCallID + "#" + strconv.FormatUint(l.seq.Add(1), 10)
	r, err := l.open(ctx, Message{Type: TypeExecute, Run: id, Session: hc.Session, Cwd: sb.WorkDir(), ToolCallID: hc.Call.ToolCallID, ToolName: name, Input: input}, true)
	if err != nil {
		return nil, err
	}
	x := &execution{r: r, sb: sb, running: map[int]context.CancelFunc{}}
	defer x.close()
	for {
		var m Message
		select {
		case m = <-r.in:
		case <-r.ended:
			return nil, fmt.Errorf("%w during the tool call: it may have run in part", r.err)
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		switch m.Type {
		case TypeSandbox:
			x.serve(ctx, m)
		case TypeExecuted:
			out := m.Output
			if out == nil {
				out = &harness.ToolOutput{Type: "text", Value: json.RawMessage(`""`)}
			}
			if m.IsError || out.Type == "error-text" || out.Type == "error-json" {
				return nil, errors.New(out.Text())
			}
			if out.Type == "json" {
				return out.Value, nil
			}
			return json.Marshal(out.Text())
		case TypeError:
			return nil, fmt.Errorf("external: the tool failed in the agent loop: %s", m.Message)
		default:
			_ = r.p.send(Message{Type: TypeRefused, Run: r.id, Message: fmt.Sprintf("unknown message type %q during a tool call", m.Type)})
			return nil, fmt.Errorf("external: the agent loop sent %q during a tool call", m.Type)
		}
	}
}

// execution is one tool call's exchange: its sandbox operations, commands
// among them running concurrently with the loop's other requests.
type execution struct {
	r       *run
	sb      sandbox.Sandbox
	wg      sync.WaitGroup
	mu      sync.Mutex
	running map[int]context.CancelFunc
}

// close ends the exchange: commands still running are killed.
func (x *execution) close() {
	x.mu.Lock()
	for _, cancel := range x.running {
		cancel()
	}
	x.mu.Unlock()
	x.wg.Wait()
	x.r.close("")
}

// serve answers one sandbox operation; a command runs in its own goroutine.
func (x *execution) serve(ctx context.Context, m Message) {
	reply := func(res Message, err error) {
		res.Type, res.Run, res.ID = TypeSandboxResult, x.r.id, m.ID
		if err != nil {
			res.Code, res.Message = codeOf(err), err.Error()
		}
		_ = x.r.p.send(res)
	}
	switch m.Op {
	case OpRead:
		data, err := readLimited(ctx, x.sb, m.Path)
		reply(Message{Data: data}, err)
	case OpWrite:
		reply(Message{}, x.sb.WriteFile(ctx, m.Path, bytes.NewReader(m.Data)))
	case OpStat:
		info, err := x.sb.Stat(ctx, m.Path)
		if err != nil {
			reply(Message{}, err)
			return
		}
		reply(Message{Info: &FileInfo{Type: info.Type, Size: info.Size}}, nil)
	case OpMkdir:
		// Writes make their parents: a directory is fine, a missing one
		// will be made, a file is in the way.
		info, err := x.sb.Stat(ctx, m.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			reply(Message{}, nil)
		case err != nil:
			reply(Message{}, err)
		case info.Type != "directory":
			reply(Message{}, errNotDir)
		default:
			reply(Message{}, nil)
		}
	case OpExec:
		cctx, cancel := context.WithCancel(ctx)
		if m.Timeout > 0 && m.Timeout < math.MaxInt32 {
			cctx, cancel = context.WithTimeoutCause(ctx, time.Duration(m.Timeout*float64(time.Second)), sandbox.ErrTimeout)
		}
		x.mu.Lock()
		x.running[m.ID] = cancel
		x.mu.Unlock()
		x.wg.Add(1)
		go func() {
			defer x.wg.Done()
			defer func() {
				x.mu.Lock()
				delete(x.running, m.ID)
				x.mu.Unlock()
				cancel()
			}()
			code, err := x.exec(cctx, m)
			if err == nil {
				reply(Message{ExitCode: &code}, nil)
			} else {
				if cctx.Err() != nil && ctx.Err() == nil && errors.Is(context.Cause(cctx), sandbox.ErrTimeout) {
					err = sandbox.ErrTimeout
				}
				reply(Message{}, err)
			}
		}()
	default:
		reply(Message{}, fmt.Errorf("external: unknown sandbox operation %q", m.Op))
	}
}

var (
	errNotDir    = errors.New("external: the path is a file, not a directory")
	errReadLimit = fmt.Errorf("the file is larger than %d MiB, the most a tool reads at once: read it in parts (a command such as sed -n '1,2000p' or head -c)", ReadLimit>>20)
	errExecLimit = fmt.Errorf("the command's output passed %d MiB and it was stopped: write the output to a file and read it in parts", ReadLimit>>20)
)

// readLimited reads a file, refusing one past ReadLimit without reading
// more than that of it.
func readLimited(ctx context.Context, sb sandbox.Sandbox, path string) ([]byte, error) {
	rc, err := sb.ReadFile(ctx, path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, ReadLimit+1))
	if err != nil {
		return nil, err
	}
	if len(data) > ReadLimit {
		return nil, errReadLimit
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// exec runs a command, sending its output (stdout and stderr as they come)
// as sandbox-data, and stops it past ReadLimit.
func (x *execution) exec(ctx context.Context, m Message) (int, error) {
	p, err := x.sb.Spawn(ctx, sandbox.Command{Line: m.Command, Dir: m.Path})
	if err != nil {
		return 0, err
	}
	var (
		mu    sync.Mutex
		total int
		over  bool
		wg    sync.WaitGroup
	)
	pump := func(r io.Reader) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				mu.Lock()
				if !over {
					total += n
					if total > ReadLimit {
						over = true
						p.Kill()
					} else {
						_ = x.r.p.send(Message{Type: TypeSandboxData, Run: x.r.id, ID: m.ID, Data: append([]byte(nil), buf[:n]...)})
					}
				}
				mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(2)
	go pump(p.Stdout())
	go pump(p.Stderr())
	wg.Wait()
	code, err := p.Wait()
	if over {
		return 0, errExecLimit
	}
	return code, err
}

// codeOf names an error for the loop.
func codeOf(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return CodeNotFound
	case errors.Is(err, sandbox.ErrIsDirectory):
		return CodeIsDir
	case errors.Is(err, sandbox.ErrNotDirectory), errors.Is(err, errNotDir):
		return CodeNotDir
	case errors.Is(err, sandbox.ErrOutside):
		return CodeOutside
	case errors.Is(err, errReadLimit), errors.Is(err, errExecLimit), errors.Is(err, sandbox.ErrOutputLimit):
		return CodeLimit
	case errors.Is(err, sandbox.ErrTimeout):
		return CodeTimedOut
	case errors.Is(err, context.Canceled):
		return CodeCancelled
	}
	return CodeFailed
}
