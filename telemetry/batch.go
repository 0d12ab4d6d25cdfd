package telemetry

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Batcher is a span processor that hands ended spans to an exporter in
// batches, as the SDK's batch span processor does, but without waking a
// goroutine for every span: ended spans are appended under a mutex, and
// the export goroutine wakes on its schedule or when a batch is full. The
// SDK's processor sends each span on a channel its goroutine waits on,
// which on the simple turn cost more CPU in wake-ups than the spans
// themselves (docs/benchmarks.md, "Telemetry").
//
// It reads the standard variables: OTEL_BSP_SCHEDULE_DELAY (ms, default
// 5000), OTEL_BSP_MAX_QUEUE_SIZE (2048; spans beyond it are dropped and
// counted), OTEL_BSP_MAX_EXPORT_BATCH_SIZE (512), OTEL_BSP_EXPORT_TIMEOUT
// (ms, 30000).
type Batcher struct {
	exp     sdktrace.SpanExporter
	delay   time.Duration
	max     int
	batch   int
	timeout time.Duration

	mu  sync.Mutex
	buf []sdktrace.ReadOnlySpan

	full     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	exportMu sync.Mutex // one export at a time
	dropped  atomic.Int64
}

// NewBatcher starts a Batcher exporting to exp.
func NewBatcher(exp sdktrace.SpanExporter) *Batcher {
	b := &Batcher{exp: exp,
		delay:   envMillis("OTEL_BSP_SCHEDULE_DELAY", 5*time.Second),
		max:     envInt("OTEL_BSP_MAX_QUEUE_SIZE", 2048),
		batch:   envInt("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
		timeout: envMillis("OTEL_BSP_EXPORT_TIMEOUT", 30*time.Second),
		full:    make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	b.batch = min(b.batch, b.max)
	go b.loop()
	return b
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func envMillis(name string, def time.Duration) time.Duration {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return time.Duration(n) * time.Millisecond
	}
	return def
}

// OnStart implements sdktrace.SpanProcessor.
func (b *Batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd implements sdktrace.SpanProcessor.
func (b *Batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	b.mu.Lock()
	if len(b.buf) >= b.max {
		b.mu.Unlock()
		b.dropped.Add(1)
		return
	}
	b.buf = append(b.buf, s)
	n := len(b.buf)
	b.mu.Unlock()
	if n == b.batch {
		select {
		case b.full <- struct{}{}:
		default:
		}
	}
}

// Dropped is how many spans were dropped because the queue was full.
func (b *Batcher) Dropped() int64 { return b.dropped.Load() }

func (b *Batcher) loop() {
	defer close(b.done)
	t := time.NewTimer(b.delay)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-b.full:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		case <-b.stop:
			b.export(context.Background())
			return
		}
		b.export(context.Background())
		t.Reset(b.delay)
	}
}

// export sends every queued span, a batch at a time.
func (b *Batcher) export(ctx context.Context) error {
	b.exportMu.Lock()
	defer b.exportMu.Unlock()
	b.mu.Lock()
	spans := b.buf
	b.buf = make([]sdktrace.ReadOnlySpan, 0, min(len(spans), b.batch))
	b.mu.Unlock()
	var errs []error
	for len(spans) > 0 {
		n := min(len(spans), b.batch)
		ectx, cancel := context.WithTimeout(ctx, b.timeout)
		errs = append(errs, b.exp.ExportSpans(ectx, spans[:n]))
		cancel()
		spans = spans[n:]
	}
	return errors.Join(errs...)
}

// ForceFlush implements sdktrace.SpanProcessor: it exports what is queued.
func (b *Batcher) ForceFlush(ctx context.Context) error { return b.export(ctx) }

// Shutdown implements sdktrace.SpanProcessor: it exports what is queued and
// shuts the exporter down.
func (b *Batcher) Shutdown(ctx context.Context) error {
	b.stopOnce.Do(func() { close(b.stop) })
	select {
	case <-b.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.exp.Shutdown(ctx)
}
