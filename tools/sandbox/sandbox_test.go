package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// kinds are the sandboxes every behaviour below is checked on. Bubblewrap
// needs bwrap (Debian's bubblewrap package; .ci/run installs it).
func kinds(t *testing.T) map[string]func(t *testing.T, dir string, env map[string]string, timeout time.Duration) Sandbox {
	m := map[string]func(*testing.T, string, map[string]string, time.Duration) Sandbox{
		"dir": func(t *testing.T, dir string, env map[string]string, timeout time.Duration) Sandbox {
			s, err := NewDir(dir, DirOptions{Env: env, Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	if _, err := exec.LookPath("bwrap"); err == nil {
		m["bubblewrap"] = func(t *testing.T, dir string, env map[string]string, timeout time.Duration) Sandbox {
			if timeout == 0 {
				timeout = -1
			}
			s, err := NewBubblewrap(dir, BubblewrapOptions{Env: env, Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	} else {
		noBwrap(t)
		t.Log("bubblewrap's cases skipped: bwrap is not installed (apt-get install bubblewrap; .ci/run does)")
	}
	return m
}

// noBwrap fails the test where bwrap must be installed (A2_REQUIRE_BWRAP,
// set by .ci/run).
func noBwrap(t *testing.T) {
	if os.Getenv("A2_REQUIRE_BWRAP") != "" {
		t.Fatal("bwrap is not installed and A2_REQUIRE_BWRAP is set: apt-get install bubblewrap")
	}
}

func forEach(t *testing.T, f func(t *testing.T, open func(env map[string]string, timeout time.Duration) Sandbox)) {
	for name, mk := range kinds(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			f(t, func(env map[string]string, timeout time.Duration) Sandbox { return mk(t, dir, env, timeout) })
		})
	}
}

func read(t *testing.T, s Sandbox, p string) (string, error) {
	t.Helper()
	rc, err := s.ReadFile(context.Background(), p)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

func write(t *testing.T, s Sandbox, p, content string) {
	t.Helper()
	if err := s.WriteFile(context.Background(), p, strings.NewReader(content)); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
}

func run(t *testing.T, s Sandbox, line string) Result {
	t.Helper()
	res, err := Run(context.Background(), s, Command{Line: line}, 0)
	if err != nil {
		t.Fatalf("run %q: %v", line, err)
	}
	return res
}

// Files written through the sandbox are the files its commands see, and
// the other way round; every file operation keeps the AI SDK's contract.
func TestFiles(t *testing.T) {
	forEach(t, func(t *testing.T, open func(map[string]string, time.Duration) Sandbox) {
		s := open(nil, 0)
		ctx := context.Background()
		write(t, s, "a/b/c.txt", "hello")
		if got := run(t, s, "cat a/b/c.txt; printf made > made.txt; mkdir -p d; ln -s made.txt link"); string(got.Stdout) != "hello" {
			t.Fatalf("the command read %q", got.Stdout)
		}
		if got, err := read(t, s, s.WorkDir()+"/made.txt"); err != nil || got != "made" {
			t.Fatalf("read the command's file by its absolute path: %q %v", got, err)
		}
		write(t, s, "a/b/c.txt", "replaced")
		if got, _ := read(t, s, "a/b/c.txt"); got != "replaced" {
			t.Fatalf("a write did not replace the file: %q", got)
		}
		for p, want := range map[string]FileInfo{"a/b/c.txt": {"file", 8}, "a": {Type: "directory"}, "link": {"file", 4}} {
			got, err := s.Stat(ctx, p)
			if err != nil || got.Type != want.Type || (want.Type == "file" && got.Size != want.Size) {
				t.Fatalf("stat %s = %+v, %v; want %+v", p, got, err, want)
			}
		}
		entries, err := s.ListDirectory(ctx, ".")
		if err != nil {
			t.Fatal(err)
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
		if fmt.Sprint(entries) != "[{a directory} {d directory} {link symlink} {made.txt file}]" {
			t.Fatalf("list: %v", entries)
		}
		if ok, err := s.DeleteFile(ctx, "link"); !ok || err != nil {
			t.Fatalf("delete the link: %v %v", ok, err)
		}
		if got, _ := read(t, s, "made.txt"); got != "made" {
			t.Fatal("deleting a link deleted its target")
		}
		if ok, err := s.DeleteFile(ctx, "link"); ok || err != nil {
			t.Fatalf("delete a missing file: %v %v", ok, err)
		}

		// Bad inputs: a clear error, nothing changed.
		for _, c := range []struct {
			name string
			do   func() error
			want error
		}{
			{"read a missing file", func() error { _, err := s.ReadFile(ctx, "nope"); return err }, fs.ErrNotExist},
			{"stat a missing file", func() error { _, err := s.Stat(ctx, "nope"); return err }, fs.ErrNotExist},
			{"list a missing directory", func() error { _, err := s.ListDirectory(ctx, "nope"); return err }, fs.ErrNotExist},
			{"read a directory", func() error { _, err := s.ReadFile(ctx, "a"); return err }, ErrIsDirectory},
			{"write over a directory", func() error { return s.WriteFile(ctx, "a/b", strings.NewReader("x")) }, ErrIsDirectory},
			{"write the working directory", func() error { return s.WriteFile(ctx, ".", strings.NewReader("x")) }, ErrIsDirectory},
			{"delete a directory", func() error { _, err := s.DeleteFile(ctx, "d"); return err }, ErrIsDirectory},
			{"list a file", func() error { _, err := s.ListDirectory(ctx, "made.txt"); return err }, ErrNotDirectory},
			{"an empty path", func() error { _, err := s.ReadFile(ctx, ""); return err }, ErrOutside},
			{"a command in a missing directory", func() error { _, err := s.Spawn(ctx, Command{Line: "true", Dir: "nope"}); return err }, fs.ErrNotExist},
		} {
			if err := c.do(); !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
		}
		if _, err := s.ReadFile(ctx, "a\x00b"); err == nil {
			t.Error("a path with a NUL byte was accepted")
		}
		if _, err := s.Spawn(ctx, Command{Line: "true", Env: map[string]string{"A=B": "x"}}); err == nil {
			t.Error("an environment variable named A=B was accepted")
		}
		if st, err := s.Stat(ctx, "a/b"); err != nil || st.Type != "directory" {
			t.Errorf("a refused write changed a/b: %+v %v", st, err)
		}
		if got := run(t, s, "pwd"); strings.TrimSpace(string(got.Stdout)) != s.WorkDir() {
			t.Errorf("a command starts in %q, want the working directory %s", got.Stdout, s.WorkDir())
		}
		if res, err := Run(ctx, s, Command{Line: "pwd", Dir: "a/b"}, 0); err != nil || strings.TrimSpace(string(res.Stdout)) != s.WorkDir()+"/a/b" {
			t.Errorf("a command in a/b starts in %q (%v)", res.Stdout, err)
		}
	})
}

// No path leads out of the working directory: not "..", not an absolute
// path elsewhere, not a symbolic link a command planted.
func TestConfinement(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("the server's secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	forEach(t, func(t *testing.T, open func(map[string]string, time.Duration) Sandbox) {
		s := open(nil, 0)
		ctx := context.Background()
		host := s.(interface{ hostDir() string }).hostDir()
		for name, target := range map[string]string{"up": outside, "secret-link": secret} {
			if err := os.Symlink(target, filepath.Join(host, name)); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range []string{"../x", "a/../../x", "/etc/passwd", secret, "secret-link", "up/secret", s.WorkDir() + "/../x"} {
			if got, err := read(t, s, p); !errors.Is(err, ErrOutside) {
				t.Errorf("read %q: %q, %v; want ErrOutside", p, got, err)
			}
			if err := s.WriteFile(ctx, p, strings.NewReader("pwned")); !errors.Is(err, ErrOutside) {
				t.Errorf("write %q: %v; want ErrOutside", p, err)
			}
			if _, err := s.Stat(ctx, p); !errors.Is(err, ErrOutside) {
				t.Errorf("stat %q: %v; want ErrOutside", p, err)
			}
		}
		if _, err := s.ListDirectory(ctx, "up"); !errors.Is(err, ErrOutside) {
			t.Errorf("list up: %v; want ErrOutside", err)
		}
		if _, err := s.Spawn(ctx, Command{Line: "true", Dir: "up"}); !errors.Is(err, ErrOutside) {
			t.Errorf("a command in up: %v; want ErrOutside", err)
		}
		if b, _ := os.ReadFile(secret); string(b) != "the server's secret" {
			t.Fatalf("the secret was changed: %q", b)
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 1 {
			t.Fatalf("files were written outside: %v", entries)
		}
	})
}

// hostDir is the working directory's path on the host.
func (f *files) hostDir() string { return f.host }

// R-HARNESS-22: a command runs with the sandbox's environment, never the
// server's; a command's own variables win over the sandbox's.
func TestEnvironment(t *testing.T) {
	t.Setenv("A2_SERVER_SECRET_KEY", "sk-server")
	forEach(t, func(t *testing.T, open func(map[string]string, time.Duration) Sandbox) {
		s := open(map[string]string{"PROJECT": "demo", "MODE": "sandbox"}, 0)
		res, err := Run(context.Background(), s, Command{Line: "env", Env: map[string]string{"MODE": "command"}}, 0)
		if err != nil {
			t.Fatal(err)
		}
		env := string(res.Stdout)
		if strings.Contains(env, "sk-server") || strings.Contains(env, "A2_SERVER_SECRET_KEY") {
			t.Fatalf("the server's environment reached the sandbox:\n%s", env)
		}
		for _, want := range []string{"PROJECT=demo", "MODE=command", "HOME=" + s.WorkDir()} {
			if !strings.Contains(env, want+"\n") {
				t.Errorf("the environment lacks %s:\n%s", want, env)
			}
		}
	})
}

// Output is streamed per stream, the exit code is the command's, and Run
// stops a command whose output passes its limit.
func TestRunAndItsLimits(t *testing.T) {
	forEach(t, func(t *testing.T, open func(map[string]string, time.Duration) Sandbox) {
		s := open(nil, 0)
		res := run(t, s, "echo out; echo err >&2; exit 3")
		if string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 3 {
			t.Fatalf("%+v", res)
		}
		res, err := Run(context.Background(), s, Command{Line: "yes"}, 1000)
		if !errors.Is(err, ErrOutputLimit) || len(res.Stdout)+len(res.Stderr) != 1000 {
			t.Fatalf("yes under a 1000-byte limit: %d+%d bytes, %v", len(res.Stdout), len(res.Stderr), err)
		}
		p, err := s.Spawn(context.Background(), Command{Line: "printf 'a\\n'; printf 'b\\n'"})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if _, err := io.Copy(&out, p.Stdout()); err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, p.Stderr())
		if code, err := p.Wait(); code != 0 || err != nil || out.String() != "a\nb\n" {
			t.Fatalf("spawn: %q %d %v", out.String(), code, err)
		}
	})
}

// gone waits (bounded: 10 s) until no process's command line holds
// marker.
func gone(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := ""
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(marker)) {
				left = p
			}
		}
		if left == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a process of the command outlived it: %s", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Cancellation and the time limit kill the command and everything it
// started.
func TestCancelAndTimeout(t *testing.T) {
	forEach(t, func(t *testing.T, open func(map[string]string, time.Duration) Sandbox) {
		s := open(nil, 0)
		ctx, cancel := context.WithCancel(context.Background())
		marker := fmt.Sprintf("%d.%d", 3000+time.Now().Nanosecond()%1000, os.Getpid())
		p, err := s.Spawn(ctx, Command{Line: "sleep " + marker + " & sleep " + marker + "; wait"})
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		_, _ = io.Copy(io.Discard, p.Stdout())
		_, _ = io.Copy(io.Discard, p.Stderr())
		if _, err := p.Wait(); !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled command: %v", err)
		}
		gone(t, "sleep\x00"+marker)

		limited := open(nil, 300*time.Millisecond)
		marker = fmt.Sprintf("%d.%d", 4000+time.Now().Nanosecond()%1000, os.Getpid())
		if _, err := Run(context.Background(), limited, Command{Line: "sleep " + marker + " & sleep " + marker + "; wait"}, 0); !errors.Is(err, ErrTimeout) {
			t.Fatalf("a command past the time limit: %v", err)
		}
		gone(t, "sleep\x00"+marker)
	})
}

// A bubblewrap sandbox shows its commands the working directory and the
// system's programs, nothing else of the host's files, and no network
// unless configured.
func TestBubblewrapIsolation(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		noBwrap(t)
		t.Skip("bwrap is not installed: apt-get install bubblewrap (.ci/run does), then go test ./tools/sandbox")
	}
	hostSecret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(hostSecret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := NewBubblewrap(t.TempDir(), BubblewrapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"cat " + hostSecret, "ls /root", "cat /etc/shadow", "touch /usr/pwned", "ls /home"} {
		if res := run(t, s, line); res.ExitCode == 0 {
			t.Errorf("%q succeeded in the sandbox: %s", line, res.Stdout)
		}
	}
	if _, err := os.Stat("/usr/pwned"); err == nil {
		t.Fatal("the sandbox wrote /usr")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	connect := fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d'", ln.Addr().(*net.TCPAddr).Port)
	if res := run(t, s, connect); res.ExitCode == 0 {
		t.Fatal("a sandbox without network reached the host's loopback")
	}
	networked, err := NewBubblewrap(t.TempDir(), BubblewrapOptions{Network: true})
	if err != nil {
		t.Fatal(err)
	}
	if res := run(t, networked, connect); res.ExitCode != 0 {
		t.Fatalf("a sandbox with network could not connect: %s", res.Stderr)
	}
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the listener saw no connection from the sandbox with network")
	}
	select {
	case <-accepted:
		t.Fatal("the sandbox without network connected too")
	default:
	}
	for _, bad := range []string{"", "relative", "/", "/usr", "/work/../etc"} {
		opts := BubblewrapOptions{WorkDir: bad}
		if bad == "" {
			continue
		}
		if _, err := NewBubblewrap(t.TempDir(), opts); err == nil {
			t.Errorf("WorkDir %q was accepted", bad)
		}
	}
}

// A pool gives a session the same files every time, and each session its
// own, below the base whatever the session's ID.
func TestPool(t *testing.T) {
	base := t.TempDir()
	pool := NewPool(base, func(dir string) (Sandbox, error) { return NewDir(dir, DirOptions{}) })
	ctx := context.Background()
	a1, err := pool.Sandbox(ctx, "../session/a")
	if err != nil {
		t.Fatal(err)
	}
	write(t, a1, "notes.txt", "a's")
	a2, _ := pool.Sandbox(ctx, "../session/a")
	if got, err := read(t, a2, "notes.txt"); err != nil || got != "a's" {
		t.Fatalf("the session's second sandbox reads %q, %v", got, err)
	}
	b, _ := pool.Sandbox(ctx, "b")
	if _, err := read(t, b, "notes.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("another session sees a's file: %v", err)
	}
	entries, _ := os.ReadDir(base)
	if len(entries) != 2 {
		t.Fatalf("the base holds %d entries, want a directory per session", len(entries))
	}
	if entries, _ := os.ReadDir(filepath.Dir(base)); len(entries) != 1 {
		t.Fatalf("a session's directory was made outside the base: %v", entries)
	}
}
