package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/protocol"
)

// testDatabase creates a PostgreSQL database of the test's own on the
// server A2_TEST_POSTGRES_URL names, dropped when the test ends, and
// returns its URL; it skips the test when the variable is not set.
func testDatabase(t *testing.T, ctx context.Context, prefix string) string {
	t.Helper()
	base := os.Getenv("A2_TEST_POSTGRES_URL")
	if base == "" {
		t.Skip("set A2_TEST_POSTGRES_URL=postgres://... to run the PostgreSQL tests; .ci/run starts a throwaway server")
	}
	if why := os.Getenv("A2_POSTGRES_TESTED"); why != "" {
		t.Skipf("A2_POSTGRES_TESTED is set (%s): unset it to run this test again", why)
	}
	db := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
		admin.Close(context.Background())
	})
	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Replace(base, "/"+cfg.Database, "/"+db, 1)
}

// freePort returns a loopback port nobody listens on right now.
func freePort(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// nodeProcess runs the node binary as its own process.
type nodeProcess struct {
	cmd *exec.Cmd
	url string
}

// startNodeProcess starts the node binary in test mode on the store
// (a postgres:// URL, or "" for Pebble in --data, passed in extra).
func startNodeProcess(t testing.TB, bin, store, scriptFile string, extra ...string) *nodeProcess {
	addr := freePort(t)
	cmd := exec.Command(bin, append([]string{"--addr", addr, "--store", store, "--script", scriptFile}, extra...)...)
	cmd.Env = append(os.Environ(), "A2_ADMIN_TOKEN=")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &nodeProcess{cmd: cmd, url: "http://" + addr}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the node did not serve within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A node on the PostgreSQL store serves a conversation, is killed with
// SIGKILL in the middle of a streaming turn, and a new node process on the
// same database resumes the turn to completion (issue "A shared store for
// clusters"). It needs a PostgreSQL server: .ci/run starts one.
func TestNodeSurvivesSIGKILLWithPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := testDatabase(t, ctx, "a2_sigkill")

	dir := t.TempDir()
	bin := nodeBinary(t)
	scriptFile := filepath.Join(dir, "script.json")
	// The answer streams its first word, then holds at a gate.
	if err := os.WriteFile(scriptFile, []byte(`{"default":{"text":"the answer survives the crash of its node","gate":"hold"}}`), 0o600); err != nil {
		t.Fatal(err)
	}

	first := startNodeProcess(t, bin, store, scriptFile)
	c1, _ := client.New(first.url, "assistant", client.Options{})
	if _, err := c1.Push(ctx, "s1", protocol.Inputs.Text("m1", "hello")); err != nil {
		t.Fatal(err)
	}
	for {
		s, _, err := c1.State(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		if s.AI.Status == protocol.StatusStreaming && len(s.AI.Messages) == 2 && lastTextOf(s.AI) != "" {
			break // mid-stream: the first word is durable, the rest held
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := first.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = first.cmd.Wait()

	second := startNodeProcess(t, bin, store, scriptFile)
	if resp, err := http.Post(second.url+"/v1/test/gates/hold", "application/json", nil); err != nil || resp.StatusCode >= 300 {
		t.Fatalf("release the gate: %v %v", resp, err)
	}
	c2, _ := client.New(second.url, "assistant", client.Options{})
	for {
		s, _, err := c2.State(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		if s.AI.Active == nil && len(s.AI.Messages) == 2 {
			if got := lastTextOf(s.AI); got != "the answer survives the crash of its node" {
				b, _ := json.Marshal(s.AI.Messages)
				t.Fatalf("answer %q: %s", got, b)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the turn did not complete on the second node: %s", s.AI.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func lastTextOf(s *protocol.AIState) string {
	var b strings.Builder
	for _, p := range s.Messages[len(s.Messages)-1].Parts {
		if p.Type == protocol.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}
