package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/cluster"
	"github.com/a2-runtime/a2/protocol"
)

// failoverSessions is how many sessions are mid-turn when a member dies.
const failoverSessions = 24

// BenchmarkClusterFailover measures failover after a SIGKILL: three
// members and a gateway on PostgreSQL (a fresh database; see
// BenchmarkClusterTurn for the server), 24 sessions each in the middle of
// a long streamed turn (the script model, a word every 40 ms), each
// followed through the gateway by its own SSE stream; then one member (the
// owner of about a third of them) is killed with SIGKILL. For each of the
// killed member's sessions it measures, from the kill, the time until a
// state read through the gateway answers again (each session polled every
// 10 ms, a read bounded by 250 ms) and until its stream delivers its next
// event, and it checks that every turn completes with its whole answer
// and that every stream saw each event once, in order (no gap, no
// duplicate). It reports the worst and the median of both over the
// killed member's sessions, and the time until every turn completed.
// Each iteration is a fresh cluster.
//
//	go test ./cmd/node -run '^$' -bench ClusterFailover -benchtime 3x
//	go run ./bench -only failover
func BenchmarkClusterFailover(b *testing.B) {
	nodeBinary(b)
	scriptFile := filepath.Join(b.TempDir(), "script.json")
	script := `{"replies":[{"match":"long","text":"` + longAnswer + `","delayMs":40}],"default":{"text":"` + clusterAnswer + `","delayMs":5}}`
	if err := os.WriteFile(scriptFile, []byte(script), 0o600); err != nil {
		b.Fatal(err)
	}
	pg := &benchPostgres{parent: b}
	admin, adminURL := pg.server(b)
	if probing(b) {
		return
	}
	var answered, streamed, completed []float64
	for i := range b.N {
		a, s, c := failoverOnce(b, i, admin, adminURL, scriptFile)
		answered, streamed, completed = append(answered, a...), append(streamed, s...), append(completed, c)
	}
	slices.Sort(answered)
	slices.Sort(streamed)
	b.ReportMetric(answered[len(answered)-1], "answer-max-ms")
	b.ReportMetric(answered[len(answered)/2], "answer-p50-ms")
	b.ReportMetric(streamed[len(streamed)-1], "stream-max-ms")
	b.ReportMetric(streamed[len(streamed)/2], "stream-p50-ms")
	b.ReportMetric(slices.Max(completed), "all-done-ms")
}

// failoverOnce runs one failover and returns, in milliseconds from the
// kill, per session of the killed member the time its state answered again
// and its stream's next event, and the time every turn had completed.
func failoverOnce(b *testing.B, iter int, admin *pgx.Conn, adminURL, scriptFile string) (answered, streamed []float64, completed float64) {
	b.StopTimer()
	db := benchDatabase(b, admin, adminURL, "a2bench_failover")
	var members []*clusterProc
	for _, name := range []string{"m1", "m2", "m3"} {
		members = append(members, benchClusterProc(b, name, members, "--role", "member", "--store", db.url, "--script", scriptFile))
	}
	gw := benchClusterProc(b, "gateway", members[:2], "--role", "gateway")
	gw.waitHosts(b, 3)
	for _, m := range members {
		m.waitHosts(b, 3)
	}
	defer func() {
		for _, p := range append(members, gw) {
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}()
	victim := members[2]
	victimID := victim.status(b).Self.ID
	hosts := hostsOf(gw.status(b).Members)
	var sessions, onVictim []string
	for i := 0; len(sessions) < failoverSessions; i++ {
		s := fmt.Sprintf("failover-%d-%d", iter, i)
		o, _ := cluster.Owner(s, hosts)
		if o.ID == victimID && len(onVictim) < failoverSessions/3 {
			onVictim = append(onVictim, s)
			sessions = append(sessions, s)
		} else if o.ID != victimID && len(sessions)-len(onVictim) < failoverSessions-failoverSessions/3 {
			sessions = append(sessions, s)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type stream struct {
		mu     sync.Mutex
		times  []time.Time
		events []sseEvent
		done   chan struct{}
	}
	streams := map[string]*stream{}
	for _, s := range sessions {
		st := &stream{done: make(chan struct{})}
		streams[s] = st
		out := make(chan sseEvent, 1024)
		go func() { _, _ = readStream(ctx, gw.url, s, 0, out) }()
		go func() {
			for e := range out {
				st.mu.Lock()
				st.times, st.events = append(st.times, time.Now()), append(st.events, e)
				st.mu.Unlock()
				if e.ev.Type == protocol.TypeGenerationCompleted {
					close(st.done)
					return
				}
			}
		}()
		if code, body, err := pushText(gw.url, s, s+"-1", "a long question"); err != nil || code != 200 {
			b.Fatalf("push to %s: %d %s %v", s, code, body, err)
		}
	}
	// Every turn mid-stream: three text deltas each.
	for deadline := time.Now().Add(20 * time.Second); ; {
		ready := 0
		for _, st := range streams {
			st.mu.Lock()
			n := 0
			for _, e := range st.events {
				if e.ev.Type == protocol.TypeGenerationProgress {
					n++
				}
			}
			st.mu.Unlock()
			if n >= 3 {
				ready++
			}
		}
		if ready == len(streams) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d turns were streaming after 20 s", ready, len(streams))
		}
		time.Sleep(5 * time.Millisecond)
	}

	b.StartTimer()
	if err := victim.cmd.Process.Kill(); err != nil {
		b.Fatal(err)
	}
	killed := time.Now()
	c, err := client.New(gw.url, "assistant", client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range onVictim {
		wg.Go(func() {
			for ctx.Err() == nil {
				rctx, rcancel := context.WithTimeout(ctx, 250*time.Millisecond)
				_, _, err := c.State(rctx, s)
				rcancel()
				if err == nil {
					mu.Lock()
					answered = append(answered, ms(time.Since(killed)))
					mu.Unlock()
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	for _, s := range sessions {
		select {
		case <-streams[s].done:
		case <-ctx.Done():
			b.Fatalf("the turn of %s did not complete within a minute of its push", s)
		}
	}
	completed = ms(time.Since(killed))
	b.StopTimer()
	if len(answered) != len(onVictim) {
		b.Fatalf("%d of the killed member's %d sessions answered again", len(answered), len(onVictim))
	}
	for _, s := range sessions {
		st := streams[s]
		st.mu.Lock()
		for i, e := range st.events {
			if e.id != i+1 {
				b.Fatalf("%s: stream id %d at position %d: a gap or a duplicate", s, e.id, i+1)
			}
			if slices.Contains(onVictim, s) && st.times[i].After(killed) && (i == 0 || !st.times[i-1].After(killed)) {
				streamed = append(streamed, ms(st.times[i].Sub(killed)))
			}
		}
		st.mu.Unlock()
		cs, _, err := c.State(ctx, s)
		if err != nil {
			b.Fatal(err)
		}
		if cs.AI.Active != nil || lastTextOf(cs.AI) != longAnswer {
			b.Fatalf("%s after the failover: active %v, answer %q; want the whole answer", s, cs.AI.Active != nil, lastTextOf(cs.AI))
		}
	}
	if len(streamed) != len(onVictim) {
		b.Fatalf("%d of the killed member's %d streams delivered an event after the kill", len(streamed), len(onVictim))
	}
	return answered, streamed, completed
}
