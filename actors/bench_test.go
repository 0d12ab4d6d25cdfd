package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
)

// stampModel streams text deltas that carry the time they were produced,
// "t<unix nanos> ", so that a subscriber can measure chunk-to-delivery
// latency. It wraps the script model for everything else.
type stampModel struct {
	chunks int
	every  time.Duration
}

type stampStream struct {
	ctx   context.Context
	m     *stampModel
	i     int
	timer *time.Timer
}

func (m *stampModel) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	return &stampStream{ctx: ctx, m: m}, nil
}

func (s *stampStream) Next() (protocol.UIMessageChunk, error) {
	i := s.i
	s.i++
	switch {
	case i == 0:
		return protocol.UIMessageChunk{Type: protocol.ChunkStartStep}, nil
	case i == 1:
		return protocol.UIMessageChunk{Type: protocol.ChunkTextStart, ID: "t"}, nil
	case i < s.m.chunks+2:
		if s.m.every > 0 {
			t := time.NewTimer(s.m.every)
			select {
			case <-t.C:
			case <-s.ctx.Done():
				t.Stop()
				return protocol.UIMessageChunk{}, context.Cause(s.ctx)
			}
		}
		return protocol.UIMessageChunk{Type: protocol.ChunkTextDelta, ID: "t", Delta: "t" + strconv.FormatInt(time.Now().UnixNano(), 10) + " "}, nil
	case i == s.m.chunks+2:
		return protocol.UIMessageChunk{Type: protocol.ChunkTextEnd, ID: "t"}, nil
	case i == s.m.chunks+3:
		return protocol.UIMessageChunk{Type: protocol.ChunkFinishStep}, nil
	case i == s.m.chunks+4:
		return protocol.UIMessageChunk{Type: protocol.ChunkFinish, FinishReason: "stop"}, nil
	}
	return protocol.UIMessageChunk{}, io.EOF
}

func (s *stampStream) Close() error { return nil }

// medianFsync measures the median latency of a small write plus fsync in
// dir, the baseline of durable latency on this machine.
func medianFsync(b *testing.B, dir string) time.Duration {
	f, err := os.Create(filepath.Join(dir, "fsync-probe"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var ds []time.Duration
	buf := make([]byte, 256)
	for i := 0; i < 200; i++ {
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[int(float64(len(ds)-1)*p)]
}

// BenchmarkProgressBatching streams model chunks in 1, 100 and 1,000
// concurrent sessions on an on-disk Pebble store (real fsync) and reports
// how many chunks share a persisted progress event, the synced writes per
// second, and the p50/p99 latency from a chunk's production by the model to
// its delivery to a subscriber of the session, beside the median fsync of
// the same disk.
func BenchmarkProgressBatching(b *testing.B) {
	for _, streams := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			dir := b.TempDir()
			fsync := medianFsync(b, dir)
			st, err := pebblestore.Open(filepath.Join(dir, "data"), pebblestore.Options{Logger: quietPebble{}})
			if err != nil {
				b.Fatal(err)
			}
			cs := &countingStore{Store: st}
			model := &stampModel{chunks: 100, every: 20 * time.Millisecond} // 50 tokens per second per stream
			a, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("stamp"),
				Models: func(string) (harness.Model, error) { return model, nil }})
			if err != nil {
				b.Fatal(err)
			}
			rt, err := New(cs, []*Agent{a}, Options{SnapshotEvery: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { rt.Close(); _ = st.Close() }()
			var (
				mu        sync.Mutex
				latencies []time.Duration
				events    int
				chunks    int
			)
			b.ResetTimer()
			start := time.Now()
			appends0 := cs.appends.Load()
			for iter := 0; iter < b.N; iter++ {
				var wg sync.WaitGroup
				for s := 0; s < streams; s++ {
					wg.Add(1)
					go func(session string) {
						defer wg.Done()
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
						defer cancel()
						last, _ := st.LastIndex(ctx, session)
						live, _ := rt.Subscribe(ctx, session, last)
						if _, err := rt.Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Text("m-"+session, "go")}, false); err != nil {
							b.Error(err)
							return
						}
						var mine []time.Duration
						ev, n := 0, 0
						for e := range live {
							switch e.Type {
							case protocol.TypeGenerationProgress:
								now := time.Now()
								var p protocol.GenerationProgress
								_ = json.Unmarshal(e.Payload, &p)
								ev++
								for _, c := range p.Chunks {
									n++
									if c.Type == protocol.ChunkTextDelta {
										ns, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(c.Delta, "t")), 10, 64)
										mine = append(mine, now.Sub(time.Unix(0, ns)))
									}
								}
							case protocol.TypeGenerationCompleted:
								cancel()
							}
						}
						mu.Lock()
						latencies = append(latencies, mine...)
						events += ev
						chunks += n
						mu.Unlock()
					}(fmt.Sprintf("i%d-s%d", iter, s))
				}
				wg.Wait()
			}
			elapsed := time.Since(start)
			b.StopTimer()
			writes := cs.appends.Load() - appends0
			p50, p99 := percentile(latencies, 0.5), percentile(latencies, 0.99)
			b.ReportMetric(float64(chunks)/float64(events), "chunks/event")
			b.ReportMetric(float64(writes)/elapsed.Seconds(), "writes/s")
			b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(fsync.Microseconds())/1000, "fsync-p50-ms")
			b.ReportMetric(float64(p99)/float64(fsync), "p99/fsync")
		})
	}
}

// BenchmarkSimpleTurn reports the synced writes one simple text turn costs
// from send to completion.
func BenchmarkSimpleTurn(b *testing.B) {
	dir := b.TempDir()
	st, err := pebblestore.Open(filepath.Join(dir, "data"), pebblestore.Options{Logger: quietPebble{}})
	if err != nil {
		b.Fatal(err)
	}
	cs := &countingStore{Store: st}
	sc, _ := script.Parse([]byte(`{"default":{"text":"a short answer of a few words"}}`))
	model := script.New(sc)
	a, _ := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script"), Models: func(string) (harness.Model, error) { return model, nil }})
	rt, _ := New(cs, []*Agent{a}, Options{SnapshotEvery: -1})
	defer func() { rt.Close(); _ = st.Close() }()
	ctx := context.Background()
	b.ResetTimer()
	before := cs.appends.Load()
	for i := 0; i < b.N; i++ {
		session := "turn-" + strconv.Itoa(i)
		if _, err := rt.Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Text("m-"+session, "hi")}, false); err != nil {
			b.Fatal(err)
		}
		for {
			s, _, err := rt.State(ctx, "assistant", session)
			if err != nil {
				b.Fatal(err)
			}
			if s.AI.Active == nil && len(s.AI.Messages) == 2 {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	b.ReportMetric(float64(cs.appends.Load()-before)/float64(b.N), "writes/turn")
}
