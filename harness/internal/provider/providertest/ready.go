// Package providertest holds helpers and checks shared by the tests of the
// model providers (the HTTP providers and the script model).
package providertest

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/protocol"
)

// Events splits a server-sent events fixture into its events, each with
// its blank line.
func Events(raw []byte) [][]byte {
	var out [][]byte
	for _, e := range bytes.SplitAfter(raw, []byte("\n\n")) {
		if len(e) > 0 {
			out = append(out, e)
		}
	}
	return out
}

// CheckReady checks a provider stream's Ready (harness.ReadyStream) on an
// SSE fixture fed through a pipe: its first prefix events arrive in one
// write, followed by a keep-alive comment, and the rest waits until the
// stream has said it is not ready. While Ready says true, Next must return
// without waiting for the pipe; after the prefix, Ready must say false
// only once every chunk the prefix yields was returned (so the text
// deltas in wantPrefixText came out); and the chunks in all must be those
// of the same fixture read whole.
func CheckReady(t *testing.T, open func(io.ReadCloser) harness.ReadyStream, raw []byte, prefix int, wantPrefixText string) {
	t.Helper()
	whole, err := Drain(t, open(io.NopCloser(bytes.NewReader(raw))))
	if err != io.EOF {
		t.Fatalf("reading the fixture whole: %v", err)
	}
	evs := Events(raw)
	pr, pw := io.Pipe()
	s := open(pr)
	defer s.Close()
	go func() {
		_, _ = pw.Write(append(bytes.Join(evs[:prefix], nil), ": keep-alive\n\n"...))
	}()
	// Next emits the start chunks, then reads: the whole prefix comes in
	// that one read. From the first chunk the network gave, Ready decides.
	var got []protocol.UIMessageChunk
	for len(got) == 0 || got[len(got)-1].Type == protocol.ChunkStart || got[len(got)-1].Type == protocol.ChunkStartStep {
		c, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, c)
	}
	var c protocol.UIMessageChunk
	for s.Ready() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			c, err = s.Next()
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = pw.CloseWithError(errors.New("test: Next waited although Ready said true"))
			<-done
			t.Fatalf("Ready said true after %d chunks, but Next waited for the network", len(got))
		}
		if err != nil {
			t.Fatalf("Next after %d chunks: %v", len(got), err)
		}
		got = append(got, c)
	}
	if text := deltas(got); text != wantPrefixText {
		t.Fatalf("before the rest arrived the stream gave text %q, want %q: Ready held chunks back or let Next wait", text, wantPrefixText)
	}
	go func() {
		_, _ = pw.Write(bytes.Join(evs[prefix:], nil))
		_ = pw.Close()
	}()
	rest, err := Drain(t, s)
	if err != io.EOF {
		t.Fatal(err)
	}
	if got = append(got, rest...); !reflect.DeepEqual(got, whole) {
		t.Fatalf("chunks through the pipe differ from the fixture read whole:\n%+v\nwant\n%+v", got, whole)
	}
}

// Drain reads s to its end: the chunks, and the error that ended it
// (io.EOF for a complete stream). A stream that yields more than 10,000
// chunks fails t.
func Drain(t testing.TB, s harness.Stream) ([]protocol.UIMessageChunk, error) {
	t.Helper()
	var out []protocol.UIMessageChunk
	for range 10000 {
		c, err := s.Next()
		if err != nil {
			return out, err
		}
		out = append(out, c)
	}
	t.Fatal("the stream never ended")
	return nil, nil
}

func deltas(cs []protocol.UIMessageChunk) string {
	var b strings.Builder
	for _, c := range cs {
		if c.Type == protocol.ChunkTextDelta {
			b.WriteString(c.Delta)
		}
	}
	return b.String()
}
