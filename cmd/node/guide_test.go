package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The cluster guide's PostgreSQL step (docs/cluster.md, "Three members and
// a gateway on one machine") runs as written, as root or as a user, with no
// server running: it starts a throwaway server and sets A2_STORE to a
// database the members can use; scripts/postgres stop removes it.
func TestClusterGuideStartsPostgreSQL(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed; run: go test ./cmd/node -run TestClusterGuideStartsPostgreSQL")
	}
	installed, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if _, err := exec.LookPath("initdb"); err != nil && len(installed) == 0 {
		// The script would install it: not a test's business.
		t.Skip("PostgreSQL's programs are not installed (apt-get install postgresql); .ci/run installs them. Run: go test ./cmd/node -run TestClusterGuideStartsPostgreSQL")
	}
	guide, err := os.ReadFile("../../docs/cluster.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(guide), "## Three members and a gateway on one machine\n")
	if !ok {
		t.Fatal(`docs/cluster.md has no section "Three members and a gateway on one machine"`)
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatal("the guide's section has no shell block")
	}
	block, _, _ = strings.Cut(block, "```")

	// Not under t.TempDir(), which only its owner may enter: as root, the
	// server runs as the user postgres.
	dir := filepath.Join(os.TempDir(), "a2-guide-pg-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).AddrPort().Port()
	ln.Close()
	env := append(os.Environ(), "A2_PG_DIR="+dir, "A2_PG_PORT="+strconv.Itoa(int(port)), "A2_STORE=")
	stop := func() {
		cmd := exec.Command("bash", "scripts/postgres", "stop")
		cmd.Dir, cmd.Env = "../..", env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("scripts/postgres stop: %v\n%s", err, out)
		}
	}
	t.Cleanup(func() {
		if _, err := os.Stat(dir); err == nil {
			stop()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -eu\n"+block+"\nprintf 'A2_STORE=%s\\n' \"$A2_STORE\"")
	cmd.Dir, cmd.Env = "../..", env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the guide's PostgreSQL step: %v\n%s", err, out)
	}
	_, store, ok := strings.Cut(string(out), "A2_STORE=")
	store = strings.TrimSpace(store)
	if !ok || !strings.HasPrefix(store, "postgres://") {
		t.Fatalf("the guide's PostgreSQL step set no A2_STORE:\n%s", out)
	}
	conn, err := pgx.Connect(ctx, store)
	if err != nil {
		t.Fatalf("A2_STORE %s: %v\n%s", store, err, out)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE guide_check (n int)"); err != nil {
		t.Fatalf("the guide's database takes no table: %v", err)
	}
	conn.Close(ctx)
	stop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("scripts/postgres stop left %s", dir)
	}
}
