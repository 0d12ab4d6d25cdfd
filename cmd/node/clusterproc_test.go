// The cluster tests' processes and clients: node processes on free ports,
// their status, pushes and SSE streams over raw HTTP, and the checks every
// cluster test makes (no session active twice, no write fenced).

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/cluster"
	"github.com/a2-runtime/a2/cluster/gossip"
	"github.com/a2-runtime/a2/protocol"
)

// clusterProc is one node process of a test cluster.
type clusterProc struct {
	name   string
	cmd    *exec.Cmd
	url    string // HTTP
	gossip string // --bind
	log    string // its stderr and stdout
	exited chan struct{}
}

// freePortPair returns a loopback port p such that p (TCP and UDP) and p+1
// (TCP) are free right now: a node's gossip and actor remote.
func freePortPair(t testing.TB) int {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if p >= 65534 {
			continue
		}
		ok := true
		for _, probe := range []func() (io.Closer, error){
			func() (io.Closer, error) { return net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))) },
			func() (io.Closer, error) { return net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+1))) },
			func() (io.Closer, error) {
				return net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			},
		} {
			c, err := probe()
			if err != nil {
				ok = false
				break
			}
			defer c.Close()
		}
		if ok {
			return p
		}
	}
	t.Fatal("no free pair of ports")
	return 0
}

// startClusterProc starts a node process; httpAddr "" picks a port.
func startClusterProc(t testing.TB, name, httpAddr string, args ...string) *clusterProc {
	t.Helper()
	return startClusterProcEnv(t, name, httpAddr, nil, args...)
}

// startClusterProcEnv is startClusterProc with more environment variables.
func startClusterProcEnv(t testing.TB, name, httpAddr string, env []string, args ...string) *clusterProc {
	t.Helper()
	p, err := launchClusterProc(t, name, httpAddr, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// errPortTaken is a node's exit because a port picked for it was taken
// before it bound it (another test's process, between freePort and the
// bind).
var errPortTaken = errors.New("a port picked for it was taken")

// run starts cmd as p's process, its output to p's log, with the cluster
// tests' admin token and env; it is killed (by its PID) when the test
// ends, and its log's tail is shown when the test failed (or always, with
// A2_CLUSTER_TEST_LOGS set).
func (p *clusterProc) run(t testing.TB, cmd *exec.Cmd, env []string) {
	t.Helper()
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = cmd
	p.cmd.Env = append(append(os.Environ(), "A2_ADMIN_TOKEN=cluster-test"), env...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() || os.Getenv("A2_CLUSTER_TEST_LOGS") != "" {
			b, _ := os.ReadFile(p.log)
			t.Logf("--- log of %s ---\n%s", p.name, tail(string(b), 80))
		}
	})
}

// launchClusterProc starts a node process and waits until it serves; an
// exit before that is an error with its log, errPortTaken when it could
// not bind a port.
func launchClusterProc(t testing.TB, name, httpAddr string, env []string, args ...string) (*clusterProc, error) {
	t.Helper()
	if httpAddr == "" {
		httpAddr = freePort(t)
	}
	p := &clusterProc{name: name, url: "http://" + httpAddr, log: filepath.Join(t.TempDir(), name+".log"), exited: make(chan struct{})}
	for i, a := range args {
		if a == "--bind" {
			p.gossip = args[i+1]
		}
	}
	p.run(t, exec.Command(nodeBinary(t), append([]string{"--addr", httpAddr}, args...)...), env)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(p.url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.exited:
			b, _ := os.ReadFile(p.log)
			if strings.Contains(string(b), "address already in use") {
				return nil, fmt.Errorf("%s exited before serving, %w:\n%s", name, errPortTaken, b)
			}
			return nil, fmt.Errorf("%s exited before serving:\n%s", name, b)
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s did not serve within 30 s", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runUntilExit runs a node process that must fail to start, and returns
// what it printed; it fails the test if the process still runs after 20 s.
func runUntilExit(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(nodeBinary(t), append([]string{"--addr", freePort(t)}, args...)...)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("%s exited 0; want a refusal", name)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("%s still ran after 20 s; want a refusal at join", name)
	}
	return out.String()
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// status reads the node's GET /v1/cluster.
func (p *clusterProc) status(t testing.TB) cluster.Status {
	t.Helper()
	var st cluster.Status
	getJSON(t, p.url+"/v1/cluster", &st)
	return st
}

// waitHosts waits until the node sees exactly want members hosting
// sessions.
func (p *clusterProc) waitHosts(t testing.TB, want int) cluster.Status {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st := p.status(t)
		if len(st.Hosts) == want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s sees hosts %v, want %d", p.name, st.Hosts, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func getJSON(t testing.TB, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, b)
	}
}

// pushText pushes a user message over raw HTTP, with no retry of its own:
// the status is what the gateway answered.
func pushText(base, session, id, text string) (int, string, error) {
	ev := protocol.Inputs.Text(id, text)
	body, _ := json.Marshal(map[string]any{"events": []protocol.Event{ev}})
	resp, err := http.Post(base+"/v1/agents/assistant/sessions/"+session+"/events", "application/json", strings.NewReader(string(body)))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// sseEvent is one event of a stream, as the test reads it.
type sseEvent struct {
	id int
	ev protocol.Event
}

// readStream reads a session's SSE stream from base, resuming after
// lastID when it is above 0, and sends each event on out until ctx ends or
// the stream does; it returns the last ID read.
func readStream(ctx context.Context, base, session string, lastID int, out chan<- sseEvent) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/agents/assistant/sessions/"+session+"/stream", nil)
	if lastID > 0 {
		req.Header.Set("Last-Event-ID", strconv.Itoa(lastID))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return lastID, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return lastID, fmt.Errorf("stream: %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	id := 0
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id, _ = strconv.Atoi(strings.TrimPrefix(line, "id: "))
		case strings.HasPrefix(line, "data: "):
			var ev protocol.Event
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				return lastID, err
			}
			select {
			case out <- sseEvent{id, ev}:
				lastID = id
			case <-ctx.Done():
				return lastID, ctx.Err()
			}
		}
	}
	return lastID, sc.Err()
}

// turnDone reports whether a session's state shows its turns finished with
// the answer text.
func turnDone(t *testing.T, base, session string, turns int) bool {
	t.Helper()
	c, err := client.New(base, "assistant", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := c.State(context.Background(), session)
	if err != nil {
		t.Fatalf("state of %s: %v", session, err)
	}
	ai := st.AI
	if ai.Active != nil || len(ai.Messages) != 2*turns {
		return false
	}
	return ai.Messages[len(ai.Messages)-1].Role == "assistant" && lastTextOf(ai) == clusterAnswer
}

const clusterAnswer = "routed through the gateway to the member that owns the session"

// longAnswer streams for about two seconds (40 ms a word), long enough to
// kill its member in the middle.
var longAnswer = strings.TrimSpace(strings.Repeat("the answer goes on after its member died ", 6))

func waitTurns(t *testing.T, base string, sessions []string, turns int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range sessions {
		for !turnDone(t, base, s, turns) {
			if time.Now().After(deadline) {
				t.Fatalf("session %s did not finish %d turns", s, turns)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// follower reads a session's stream and fails the test on a gap or a
// duplicate (IDs run 1, 2, 3, ...).
type follower struct {
	t    *testing.T
	ctx  context.Context
	evs  chan sseEvent
	seen int
}

// followLongTurn follows session through base, pushes the long question,
// and returns once three progress events of the answer have arrived.
func followLongTurn(t *testing.T, ctx context.Context, base, session string) *follower {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancel)
	f := &follower{t: t, ctx: sctx, evs: make(chan sseEvent, 4096)}
	go func() { _, _ = readStream(sctx, base, session, 0, f.evs) }()
	if code, body, err := pushText(base, session, session+"-1", "a long question"); err != nil || code != http.StatusOK {
		t.Fatalf("push: %d %s %v", code, body, err)
	}
	for deltas := 0; deltas < 3; {
		if e := f.next(); e.ev.Type == protocol.TypeGenerationProgress {
			deltas++
		}
	}
	return f
}

// next returns the stream's next event.
func (f *follower) next() sseEvent {
	f.t.Helper()
	select {
	case e := <-f.evs:
		f.seen++
		if e.id != f.seen {
			f.t.Fatalf("stream id %d, want %d (no gap, no duplicate)", e.id, f.seen)
		}
		return e
	case <-f.ctx.Done():
		f.t.Fatalf("the stream stopped at id %d", f.seen)
	}
	return sseEvent{}
}

// hostsOf keeps the members that host sessions.
func hostsOf(nodes []gossip.Meta) []gossip.Meta {
	var out []gossip.Meta
	for _, m := range nodes {
		if m.Status == gossip.StatusUp && slices.Contains(m.Kinds, cluster.KindSession) {
			out = append(out, m)
		}
	}
	return out
}

// ownersOf asks every member which sessions it has active; a session
// active on two members at once fails the test.
func ownersOf(t *testing.T, members []*clusterProc) map[string]string {
	t.Helper()
	owner := map[string]string{}
	for _, m := range members {
		for _, s := range m.status(t).Sessions {
			if o, dup := owner[s]; dup {
				t.Fatalf("session %s is active on %s and %s", s, o, m.name)
			}
			owner[s] = m.name
		}
	}
	return owner
}

// noDoubleWriters fails if a member's log shows a write refused by the
// store's fence (a session written from two members at once).
func noDoubleWriters(t *testing.T, procs []*clusterProc) {
	t.Helper()
	for _, p := range procs {
		b, _ := os.ReadFile(p.log)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "write failure") || strings.Contains(line, "index conflict") {
				t.Errorf("%s: %s", p.name, line)
			}
		}
	}
}

// securityFlags are the flags that admit a node named name to the cluster
// whose CA and gossip key are in dir (made there by `node certs` at the
// first call, kept after): docs/security.md.
func securityFlags(t testing.TB, dir, name string) []string {
	t.Helper()
	if err := runCerts([]string{"-dir", dir, "-valid", "1h", name}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	return []string{"--cluster-key-file", filepath.Join(dir, "cluster.key"), "--cluster-ca", filepath.Join(dir, "ca.pem"),
		"--cluster-cert", filepath.Join(dir, name+".pem"), "--cluster-cert-key", filepath.Join(dir, name+"-key.pem")}
}
