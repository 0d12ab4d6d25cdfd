package a2_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2-runtime/a2"
	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/gateway"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The first agent of the README and of docs/embedding.md is a whole
// program that compiles as it is: no name left undefined.
func TestFirstAgentInTheDocsCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the docs' programs; run: go test -run TestFirstAgentInTheDocsCompiles .")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH; run: go test -run TestFirstAgentInTheDocsCompiles .")
	}
	repo, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	gosum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []struct{ file, section string }{
		{"README.md", "### Your own agent in Go"},
		{"docs/embedding.md", "## A first agent"},
	} {
		t.Run(doc.file, func(t *testing.T) {
			b, err := os.ReadFile(doc.file)
			if err != nil {
				t.Fatal(err)
			}
			_, rest, ok := strings.Cut(string(b), doc.section+"\n")
			if !ok {
				t.Fatalf("%s has no section %q", doc.file, doc.section)
			}
			_, block, ok := strings.Cut(rest, "```go\n")
			if !ok {
				t.Fatalf("%s's section %q has no Go block", doc.file, doc.section)
			}
			block, _, _ = strings.Cut(block, "```")
			if !strings.HasPrefix(block, "package main\n") {
				t.Fatalf("%s's first agent is not a whole program (package main):\n%s", doc.file, block)
			}
			// A module of its own that requires this one, with this one's
			// requirements, so that it builds offline from the module cache.
			dir := t.TempDir()
			mod := regexp.MustCompile(`(?m)^module .*$`).ReplaceAllString(string(gomod), "module firstagent") +
				"\nrequire github.com/a2-runtime/a2 v0.0.0\n\nreplace github.com/a2-runtime/a2 => " + repo + "\n"
			for name, content := range map[string]string{"go.mod": mod, "go.sum": string(gosum), "main.go": block} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, goBin, "vet", ".")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s's first agent does not compile: %v\n%s\n%s", doc.file, err, out, block)
			}
		})
	}
}

// Serve says where it serves, and how to chat with each agent.
func TestServeSaysHowToChat(t *testing.T) {
	agent, err := a2.NewAgent(actors.AgentOptions{Name: "greeter"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs, url := serveOnce(t, a2.Options{Listener: ln, Data: t.TempDir()}, agent)
	if want := "go run ./cmd/node chat --url " + url + " --agent greeter"; !strings.Contains(logs.String(), want) {
		t.Fatalf("Serve's logs lack %q:\n%s", want, logs.String())
	}
}

// farAddr is a loopback listener that names a non-loopback address, as a
// node listening on a private network would.
type farAddr struct{ net.Listener }

func (farAddr) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 8080} }

// A node whose HTTP API listens beyond loopback without an Authorize hook
// says at start that anyone who reaches it can use every session; on
// loopback, or with the hook, it does not.
func TestServeWarnsOfAnOpenAPI(t *testing.T) {
	agent, err := a2.NewAgent(actors.AgentOptions{Name: "greeter"})
	if err != nil {
		t.Fatal(err)
	}
	const warning = "the HTTP API listens beyond loopback without authentication"
	for _, tc := range []struct {
		name      string
		far, hook bool
		warns     bool
	}{
		{"beyond loopback", true, false, true},
		{"beyond loopback with Authorize", true, true, false},
		{"on loopback", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ln net.Listener
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			if tc.far {
				ln = farAddr{ln}
			}
			o := a2.Options{Listener: ln, Data: t.TempDir()}
			if tc.hook {
				o.Gateway.Authorize = func(context.Context, gateway.Operation) error { return nil }
			}
			logs, _ := serveOnce(t, o, agent)
			if got := strings.Contains(logs.String(), warning); got != tc.warns {
				t.Fatalf("warned: %v, want %v:\n%s", got, tc.warns, logs.String())
			}
		})
	}
}

// serveOnce runs a2.Serve with o until it is ready, then ends it, and
// returns what it logged and the URL it served.
func serveOnce(t *testing.T, o a2.Options, agent *actors.Agent) (logs *syncBuffer, url string) {
	t.Helper()
	logs = &syncBuffer{}
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	served := make(chan error, 1)
	o.Ready = func(url string) { ready <- url }
	go func() { served <- a2.Serve(ctx, o, agent) }()
	select {
	case url = <-ready:
	case err := <-served:
		t.Fatalf("Serve: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("Serve never got ready")
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	return logs, url
}

// unlistable is a Pebble store that cannot list its sessions: the
// runtime's start-up scan for sessions with work fails, which the runtime
// only logs.
type unlistable struct{ *pebblestore.Store }

func (unlistable) Sessions(context.Context, string, int) ([]string, error) {
	return nil, errors.New("the disk is gone")
}

func (unlistable) SessionsWithWork(context.Context, string, int) ([]string, error) {
	return nil, errors.New("the disk is gone")
}

// The runtime's warnings reach an embedding program's logger, as a node's
// reach its log (they went to io.Discard): here the start-up scan that
// could not list the sessions, and why.
func TestServeLogsTheRuntimesWarnings(t *testing.T) {
	agent, err := a2.NewAgent(actors.AgentOptions{Name: "greeter"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := pebblestore.Open("data", pebblestore.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- a2.Serve(ctx, a2.Options{Listener: ln, Store: unlistable{st}, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, agent)
	}()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(logs.String(), "could not list the sessions") {
		if time.Now().After(deadline) {
			t.Fatalf("15 s after the start, the server's log does not say the start-up scan failed:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := logs.String(); !strings.Contains(got, "the disk is gone") || !strings.Contains(got, "level=WARN") {
		t.Fatalf("the scan's warning lacks its level or its cause:\n%s", got)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// A data directory another program holds is named, with what to do, not
// answered with Pebble's "resource temporarily unavailable".
func TestServeOnADataDirectoryInUse(t *testing.T) {
	dir := t.TempDir()
	// Another process holds it (within one process Pebble says so in
	// other words): this test's binary, as TestHoldDataDirectory.
	holder := exec.Command(os.Args[0], "-test.run=^TestHoldDataDirectory$")
	holder.Env = append(os.Environ(), "A2_TEST_HOLD_DIR="+dir)
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = holder.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "held") {
		t.Fatalf("the holder process: %q %v", line, err)
	}
	agent, err := a2.NewAgent(actors.AgentOptions{Name: "greeter"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = a2.Serve(context.Background(), a2.Options{Listener: ln, Data: dir, Logger: slog.New(slog.DiscardHandler)}, agent)
	if err == nil || !strings.Contains(err.Error(), "is using the data directory "+dir) || strings.Contains(err.Error(), "resource temporarily unavailable") {
		t.Fatalf("Serve on a held data directory: %v", err)
	}
}

// TestHoldDataDirectory is TestServeOnADataDirectoryInUse's other process:
// it holds the Pebble store in A2_TEST_HOLD_DIR until its standard input
// closes.
func TestHoldDataDirectory(t *testing.T) {
	dir := os.Getenv("A2_TEST_HOLD_DIR")
	if dir == "" {
		t.Skip("the other process of TestServeOnADataDirectoryInUse")
	}
	s, err := pebblestore.Open(dir, pebblestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fmt.Println("held")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// What go build leaves in the repository (go build -o a2 ./cmd/node, go
// build ./cmd/node) and the example's data stay out of git status.
func TestBuildOutputsAreIgnored(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	if err := exec.Command("git", "rev-parse", "--is-inside-work-tree").Run(); err != nil {
		t.Skip("not a git checkout")
	}
	for _, path := range []string{"a2", "node", "tracetree", "loadgen", "helpdesk", "cmd/node/node", "examples/helpdesk/helpdesk", "data-helpdesk/000001.log", "data/MANIFEST"} {
		if err := exec.Command("git", "check-ignore", "--no-index", "-q", path).Run(); err != nil {
			t.Errorf("git does not ignore %s (.gitignore)", path)
		}
	}
}

// An agent with neither a name nor a contract is refused with a message
// that shows the option to set.
func TestNewAgentWithoutAName(t *testing.T) {
	_, err := a2.NewAgent(actors.AgentOptions{})
	if err == nil || !strings.Contains(err.Error(), `Name: "support"`) {
		t.Fatalf("NewAgent without a name: %v", err)
	}
}

// Options Serve cannot run with are refused before anything starts, each
// with what to change: nothing listens, no store directory is made.
func TestServeRefusesBadOptions(t *testing.T) {
	agent, err := a2.NewAgent(actors.AgentOptions{Name: "greeter"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    a2.Options
		want string
	}{
		{"unknown role", a2.Options{Cluster: &a2.ClusterOptions{Name: "c", Role: "leader", Bind: "127.0.0.1:0"}}, `the cluster role must be "member" or "gateway", not "leader"`},
		{"no cluster name", a2.Options{Cluster: &a2.ClusterOptions{Role: "gateway", Bind: "127.0.0.1:0"}}, "needs the cluster's name"},
		{"member without a shared store", a2.Options{Cluster: &a2.ClusterOptions{Name: "c", Role: "member", Bind: "127.0.0.1:0"}}, "a cluster member needs the cluster's shared store"},
		{"store URL of another kind", a2.Options{StoreURL: "mysql://db/a2"}, "must be a postgres:// URL"},
		{"a node beyond loopback without key or certificates", a2.Options{Cluster: &a2.ClusterOptions{Name: "c", Role: "gateway", Bind: "10.0.0.5:7946"}}, "not a loopback one"},
		{"advertised beyond loopback with only the key", a2.Options{Cluster: &a2.ClusterOptions{Name: "c", Role: "gateway", Bind: "127.0.0.1:0", Advertise: "10.0.0.5:7946", KeyFile: "k"}}, "not a loopback one"},
		{"part of the TLS files", a2.Options{Cluster: &a2.ClusterOptions{Name: "c", Role: "gateway", Bind: "127.0.0.1:0", CAFile: "ca.pem"}}, "needs all three"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			tc.o.Listener, tc.o.Data, tc.o.Logger = ln, dir, slog.New(slog.DiscardHandler)
			// Bounded: options Serve should have refused would serve
			// until the context ends, and the test fails rather than hangs.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = a2.Serve(ctx, tc.o, agent)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Serve: %v; want an error containing %q", err, tc.want)
			}
			if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
				t.Fatalf("Serve made its data directory although it refused its options: %v", serr)
			}
		})
	}
}
