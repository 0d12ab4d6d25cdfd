// Package sandbox gives a session a place of its own to read and write
// files and run commands: the AI SDK's sandbox session
// (Experimental_SandboxSession from the ai package), in Go.
//
// Two implementations:
//   - Bubblewrap runs each command in a bubblewrap sandbox (bwrap): the
//     session's own working directory, read-only system directories, its
//     own environment and never the server's, no network unless
//     configured, and time and output limits;
//   - Dir is a plain directory whose commands run on the host with the
//     sandbox's environment alone: for tests and trusted local use, it
//     isolates nothing else.
//
// Both serve file operations from the server's side of the working
// directory, confined to it (os.Root: neither ".." nor a symbolic link
// leads out of it), so a read costs no process. Paths are the sandbox's:
// a relative path resolves against the working directory, an absolute one
// must lie within it (a sandbox's files elsewhere, such as its system
// directories, are not served: ErrOutside).
//
// Pool gives each session its sandbox, the same one every time (the
// reference's resolver obligations, docs/harness.md). A2 never closes a
// sandbox it was given.
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
)

// Sandbox is one session's sandbox. Its methods are safe for concurrent
// use. A missing path is reported with an error matching fs.ErrNotExist.
type Sandbox interface {
	// Description tells the model about the sandbox: where it works, and
	// whether it has a network.
	Description() string
	// WorkDir is the working directory, as the sandbox's commands see it:
	// the base of relative paths.
	WorkDir() string
	// ReadFile returns the file's bytes as a stream, so that a caller that
	// bounds what it reads bounds what is read.
	ReadFile(ctx context.Context, path string) (io.ReadCloser, error)
	// WriteFile writes content to path, creating its parent directories
	// and replacing a file that is there; writing over a directory is an
	// error.
	WriteFile(ctx context.Context, path string, content io.Reader) error
	// Stat describes path, following symbolic links.
	Stat(ctx context.Context, path string) (FileInfo, error)
	// ListDirectory lists a directory's entries (not its subdirectories'),
	// in no particular order; symbolic links are listed, not followed.
	ListDirectory(ctx context.Context, path string) ([]DirEntry, error)
	// DeleteFile deletes a file (a symbolic link itself, not its target):
	// false when there is none; deleting a directory is an error.
	DeleteFile(ctx context.Context, path string) (bool, error)
	// Spawn starts a command. Cancelling ctx kills it (and every process
	// it started). The caller reads both of its streams and then Waits.
	Spawn(ctx context.Context, c Command) (Process, error)
}

// Command is a command line for the sandbox's shell (/bin/sh -c).
type Command struct {
	Line string
	// Dir is the directory it starts in: relative to the working
	// directory, or absolute within it; empty: the working directory.
	Dir string
	// Env is merged over the sandbox's own environment, winning where
	// they overlap. The server's environment never reaches a command.
	Env map[string]string
}

// Process is a running command.
type Process interface {
	Stdout() io.Reader
	Stderr() io.Reader
	// Wait waits for the command to end and returns its exit code; an
	// error when it could not run, or was killed (ErrTimeout past the
	// sandbox's time limit, the context's error when it was cancelled).
	Wait() (int, error)
	// Kill ends the command and everything it started. Killing an ended
	// command does nothing.
	Kill()
}

// FileInfo is Stat's answer.
type FileInfo struct {
	Type string // "file", "directory" or "other"
	Size int64
}

// DirEntry is one entry of ListDirectory.
type DirEntry struct {
	Name string
	Type string // "file", "directory", "symlink" or "other"
}

var (
	// ErrOutside is a path that leads out of the working directory.
	ErrOutside = errors.New("sandbox: the path leads out of the sandbox's working directory")
	// ErrIsDirectory is a file operation on a directory.
	ErrIsDirectory = errors.New("sandbox: the path is a directory")
	// ErrNotDirectory is ListDirectory of something else.
	ErrNotDirectory = errors.New("sandbox: the path is not a directory")
	// ErrOutputLimit is a command stopped because its output passed Run's
	// limit.
	ErrOutputLimit = errors.New("sandbox: the command's output passed its limit; it was stopped")
	// ErrTimeout is a command stopped at the sandbox's time limit.
	ErrTimeout = errors.New("sandbox: the command ran past its time limit; it was stopped")
)

// Result is what Run collected.
type Result struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}

// Run runs c to its end and collects its output. limit, when positive,
// bounds stdout and stderr together: past it the command is killed, and
// Run returns what it read up to the limit with ErrOutputLimit. An exit
// code other than 0 is not an error.
func Run(ctx context.Context, s Sandbox, c Command, limit int64) (Result, error) {
	p, err := s.Spawn(ctx, c)
	if err != nil {
		return Result{}, err
	}
	var (
		mu     sync.Mutex
		total  int64
		over   bool
		out    [2]bytes.Buffer
		wg     sync.WaitGroup
		buffer = make([]byte, 32<<10)
	)
	collect := func(r io.Reader, into *bytes.Buffer, buf []byte) {
		defer wg.Done()
		for {
			n, err := r.Read(buf)
			if n > 0 {
				mu.Lock()
				take := int64(n)
				if limit > 0 && total+take > limit {
					take = max(limit-total, 0)
					if !over {
						over = true
						p.Kill()
					}
				}
				into.Write(buf[:take])
				total += take
				mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(2)
	go collect(p.Stdout(), &out[0], buffer[:16<<10])
	go collect(p.Stderr(), &out[1], buffer[16<<10:])
	wg.Wait()
	code, err := p.Wait()
	res := Result{ExitCode: code, Stdout: out[0].Bytes(), Stderr: out[1].Bytes()}
	if over {
		return res, ErrOutputLimit
	}
	return res, err
}
