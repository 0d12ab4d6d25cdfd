package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/protocol"
)

// What crosses the hop between a gateway and a member is not bounded by
// gRPC's default message size (4 MiB): a turn whose one chunk is 6 MiB, and
// one of 8 MiB in 16 KiB chunks (a stream's batches), reach the gateway's
// stream whole and in order, and a state read of the session (the two
// answers in it) crosses too. Past the default, the member's actor port
// broke the connection on each such message and the stream never ended.
func TestLargeMessagesCrossTheHop(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 6<<16)  // 6 MiB in one chunk
	long := strings.Repeat("a long answer ", 600_000) // 8.4 MB in 16 KiB chunks
	m, _ := startTestMember(t, memberSetup{script: fmt.Sprintf(
		`{"replies":[{"match":"big","text":%q,"chunkSize":%d},{"match":"long","text":%q,"chunkSize":16384}]}`, big, len(big), long)})
	g := startTestGateway(t, m.cfg.Bind, nil, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := g.Router()

	var at uint64
	for i, c := range []struct{ input, want string }{{"big", big}, {"long", long}} {
		if _, err := r.Push(ctx, "assistant", "s1", []protocol.Event{protocol.Inputs.Text(fmt.Sprintf("m%d", i), c.input)}, false); err != nil {
			t.Fatalf("%s: push: %v", c.input, err)
		}
		evs, errc, err := r.SubscribeUntilIdle(ctx, "assistant", "s1", at)
		if err != nil {
			t.Fatalf("%s: subscribe: %v", c.input, err)
		}
		got, end := drainWithin(t, evs, errc, 45*time.Second)
		if !errors.Is(end, io.EOF) {
			t.Fatalf("%s: the stream ended with %v after %d events, want io.EOF (the session idle)", c.input, end, len(got))
		}
		var text strings.Builder
		for _, ev := range got {
			if ev.Index != at+1 {
				t.Fatalf("%s: event %d after %d: a gap or a repeat", c.input, ev.Index, at)
			}
			at = ev.Index
			if ev.Type == protocol.TypeGenerationProgress {
				text.WriteString(deltasOf(t, ev))
			}
		}
		if text.Len() != len(c.want) || text.String() != c.want {
			t.Fatalf("%s: the stream's deltas hold %d bytes of the %d-byte answer", c.input, text.Len(), len(c.want))
		}
	}
	st, index, err := r.State(ctx, "assistant", "s1")
	if err != nil {
		t.Fatalf("state: %v", err)
	}
	if index != at {
		t.Fatalf("state at %d, the streams ended at %d", index, at)
	}
	var texts []int
	for _, msg := range st.AI.Messages {
		n := 0
		for _, p := range msg.Parts {
			if p.Type == protocol.PartText {
				n += len(p.Text)
			}
		}
		texts = append(texts, n)
	}
	if len(texts) != 4 || texts[1] != len(big) || texts[3] != len(long) {
		t.Fatalf("the state's messages hold %v bytes of text, want the two answers of %d and %d", texts, len(big), len(long))
	}
}

// drainWithin is drain with its own bound.
func drainWithin(t *testing.T, evs <-chan protocol.Event, errc <-chan error, within time.Duration) ([]protocol.Event, error) {
	t.Helper()
	var got []protocol.Event
	timeout := time.After(within)
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				select {
				case err := <-errc:
					return got, err
				default:
					return got, nil
				}
			}
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("the stream did not end by itself within %s; it delivered %d events", within, len(got))
		}
	}
}

// deltasOf is the text deltas of a progress event, in order.
func deltasOf(t *testing.T, ev protocol.Event) string {
	t.Helper()
	var p protocol.GenerationProgress
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		t.Fatalf("event %d: %v", ev.Index, err)
	}
	var b strings.Builder
	for _, c := range p.Chunks {
		if c.Type == "text-delta" {
			b.WriteString(c.Delta)
		}
	}
	return b.String()
}
