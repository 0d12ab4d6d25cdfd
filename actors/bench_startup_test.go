// Start-up: the recovery scan, and start-up with a million idle sessions.

package actors

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
)

// BenchmarkStartupRecovery reports what the start-up scan costs per
// session (recover.go): a store of 2,000 sessions, each with one finished
// turn, and the time from New until Recovered closes, every session
// visited, none with work left.
func BenchmarkStartupRecovery(b *testing.B) {
	const sessions = 2000
	dir := b.TempDir()
	st, err := pebblestore.Open(filepath.Join(dir, "data"), pebblestore.Options{Logger: quietPebble{}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	sc, _ := script.Parse([]byte(`{"default":{"text":"a short answer of a few words"}}`))
	model := script.New(sc)
	a, _ := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script"), Models: func(string) (harness.Model, error) { return model, nil }})
	rt, _ := New(st, []*Agent{a}, Options{SkipRecovery: true})
	ctx := context.Background()
	for i := 0; i < sessions; i++ {
		session := "s" + strconv.Itoa(i)
		if _, err := rt.Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Text("m-"+session, "hi")}, false); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < sessions; i++ {
		for {
			s, _, err := rt.State(ctx, "assistant", "s"+strconv.Itoa(i))
			if err != nil {
				b.Fatal(err)
			}
			if s.AI.Active == nil && len(s.AI.Messages) == 2 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	rt.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		rt, err := New(st, []*Agent{a}, Options{})
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-rt.Recovered():
		case <-time.After(2 * time.Minute):
			b.Fatal("the scan did not end")
		}
		elapsed := time.Since(start)
		if n := rt.ActiveSessions(); n != 0 {
			b.Fatalf("%d sessions left active after the scan", n)
		}
		rt.Close()
		b.ReportMetric(float64(elapsed.Microseconds())/1000/sessions, "ms/session")
	}
}

// BenchmarkStartupWithAMillionIdleSessions measures start-up at scale: a
// Pebble store on disk with 1,000,000 idle sessions (one event each) and
// 100 held in the middle of a turn. It reports the time from opening the
// store to the end of the start-up scan (the node serves from the
// store's open on; the scan resumes the sessions with work in the
// background), and fails unless exactly the 100 were resumed. A2_IDLE_SESSIONS
// sets another count of idle sessions.
func BenchmarkStartupWithAMillionIdleSessions(b *testing.B) {
	idle := 1_000_000
	if v := os.Getenv("A2_IDLE_SESSIONS"); v != "" {
		idle, _ = strconv.Atoi(v)
	}
	const busy = 100
	dir := filepath.Join(b.TempDir(), "data")
	st, err := pebblestore.Open(dir, pebblestore.Options{Logger: quietPebble{}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	built := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < idle; i += 64 {
				id := "idle-" + strconv.Itoa(i)
				if _, err := st.Append(ctx, id, 0, []protocol.Event{protocol.Inputs.Text(id+"-m1", "hi")}); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d idle sessions written in %v", idle, time.Since(built).Round(time.Millisecond))
	sc, _ := script.Parse([]byte(`{"default":{"text":"held until the benchmark ends","gate":"never"}}`))
	model := script.New(sc)
	a, _ := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script"), Models: func(string) (harness.Model, error) { return model, nil }})
	rt, _ := New(st, []*Agent{a}, Options{SkipRecovery: true})
	for i := range busy {
		session := "busy-" + strconv.Itoa(i)
		if _, err := rt.Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Text("m-"+session, "hi")}, false); err != nil {
			b.Fatal(err)
		}
	}
	for i := range busy {
		for {
			s, _, err := rt.State(ctx, "assistant", "busy-"+strconv.Itoa(i))
			if err != nil {
				b.Fatal(err)
			}
			if s.AI.Status == protocol.StatusStreaming {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	rt.Close()
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		st, err := pebblestore.Open(dir, pebblestore.Options{Logger: quietPebble{}})
		if err != nil {
			b.Fatal(err)
		}
		opened := time.Since(start)
		rt, err := New(st, []*Agent{a}, Options{})
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-rt.Recovered():
		case <-time.After(2 * time.Minute):
			b.Fatal("the scan did not end")
		}
		elapsed := time.Since(start)
		b.StopTimer()
		if n := rt.ActiveSessions(); n != busy {
			b.Fatalf("%d sessions active after the scan, want the %d with work", n, busy)
		}
		for i := range busy {
			if !rt.active(a, "busy-"+strconv.Itoa(i)) {
				b.Fatalf("busy-%d was not resumed", i)
			}
		}
		rt.Close()
		_ = st.Close()
		b.ReportMetric(float64(opened.Microseconds())/1000, "open-ms")
		b.ReportMetric(float64(elapsed.Microseconds())/1000, "start-ms")
		b.StartTimer()
	}
}
