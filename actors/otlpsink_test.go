package actors

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/a2-runtime/a2/telemetry"
)

// TestMain runs the package's tests, or, with A2_OTLP_SINK set, serves as
// the OTLP receiver of BenchmarkTelemetryCost's exported mode instead: a
// process of its own, so that receiving costs the benchmark nothing.
func TestMain(m *testing.M) {
	if os.Getenv("A2_OTLP_SINK") != "" {
		otlpSink()
		return
	}
	os.Exit(m.Run())
}

// otlpSink answers every OTLP/HTTP export (POST /v1/traces, /v1/metrics)
// with success, having read it whole, and prints its address; it ends
// when its standard input closes (its parent went).
func otlpSink() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK) // an empty Export...ServiceResponse
	}))
}

// startOTLPSink starts the sink process and returns its base URL.
func startOTLPSink(b *testing.B) string {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "A2_OTLP_SINK=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimSpace(line)
	}()
	select {
	case a := <-addr:
		if a == "" {
			b.Fatal("the OTLP sink did not start")
		}
		return "http://" + a
	case <-time.After(30 * time.Second):
		b.Fatal("the OTLP sink did not start within 30 s")
	}
	return ""
}

// exportingProviders are the providers a node installs for OTLP/HTTP
// export (telemetry.FromEnv and Install; the SDK reads the sampler from
// OTEL_TRACES_SAMPLER) to the sink at url; they are shut down when the
// benchmark ends.
func exportingProviders(b *testing.B, url string) (trace.TracerProvider, metric.MeterProvider) {
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	b.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	cfg, err := telemetry.FromEnv(os.Getenv)
	if err != nil {
		b.Fatal(err)
	}
	p, err := telemetry.Install(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	if p.Tracer == nil || p.Meter == nil {
		b.Fatalf("telemetry.Install with an OTLP endpoint made no tracer or no meter: %+v", cfg)
	}
	b.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p.Tracer, p.Meter
}
