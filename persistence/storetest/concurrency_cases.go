package storetest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// concurrencyCases: many sessions appended at once.
var concurrencyCases = []testCase{
	{name: "concurrent/many-sessions-append-at-once", run: func(e *env) {
		const (
			workers           = 16
			sessionsPerWorker = 3
			appends           = 8
		)
		appended := make([]map[string][]protocol.Event, workers)
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				appended[w] = map[string][]protocol.Event{}
				for a := range appends {
					for k := range sessionsPerWorker {
						session := fmt.Sprintf("w%02d-s%d", w, k)
						last := uint64(len(appended[w][session]))
						got, err := e.s.Append(e.ctx, session, last, evs(fmt.Sprintf("%s-a%d", session, a), 1+(a+k)%3))
						if err != nil {
							errs[w] = fmt.Errorf("Append(%q, %d): %w", session, last, err)
							return
						}
						appended[w][session] = append(appended[w][session], got...)
					}
				}
			}()
		}
		wg.Wait()
		for w, err := range errs {
			if err != nil {
				e.t.Fatalf("worker %d: %v", w, err)
			}
		}
		for w := range workers {
			for session, want := range appended[w] {
				e.wantLog(session, want)
			}
		}
		all, err := e.s.Sessions(e.ctx, "", 1000)
		if err != nil || len(all) != workers*sessionsPerWorker {
			e.t.Fatalf("Sessions = %d sessions, %v; want %d", len(all), err, workers*sessionsPerWorker)
		}
	}},
}

// largeCases: nothing is ever truncated (R-LOG-16).
var largeCases = []testCase{
	{name: "large/R-LOG-16/1MiB-payload-kept-whole", run: func(e *env) {
		payload := bigJSON(1<<20, 1)
		got := e.append("s1", 0, ev("big", "test.big", string(payload)))
		for what, events := range map[string][]protocol.Event{
			"Append": got,
			"Read":   e.log("s1"),
			"Lookup": e.lookup("big"),
		} {
			if len(events) != 1 || !bytes.Equal(events[0].Payload, payload) {
				e.t.Fatalf("%s returned a payload of %d bytes, want the %d bytes appended, byte-identical", what, payloadLen(events), len(payload))
			}
		}
		replay, err := e.s.Append(e.ctx, "s1", 1, []protocol.Event{ev("big", "test.big", string(payload))})
		if err != nil || len(replay) != 1 || !bytes.Equal(replay[0].Payload, payload) {
			e.t.Fatalf("replay of the big event: %d bytes, %v", payloadLen(replay), err)
		}
	}},
	{name: "large/R-LOG-16/batch-of-1MiB-events", run: func(e *env) {
		batch := make([]protocol.Event, 4)
		for i := range batch {
			batch[i] = ev(fmt.Sprintf("big-%d", i), "test.big", string(bigJSON(1<<20+i*7, uint64(i))))
		}
		e.append("s1", 0, batch...)
		got := e.log("s1")
		for i := range batch {
			if len(got) != len(batch) || !bytes.Equal(got[i].Payload, batch[i].Payload) {
				e.t.Fatalf("event %d: read %d bytes back, want %d, byte-identical", i, payloadLen(got[i:i+1]), len(batch[i].Payload))
			}
		}
	}},
	{name: "large/R-LOG-16/1000-event-batch", run: func(e *env) {
		batch := evs("many", 1000)
		got := e.append("s1", 0, batch...)
		e.wantLog("s1", got)
	}},
	{name: "large/R-LOG-16/1MiB-snapshot-state-kept-whole", run: func(e *env) {
		state := bigJSON(1<<20, 9)
		e.saveSnapshot(persistence.Snapshot{Session: "s1", Reducer: aiReducer, Index: 1, State: state})
		e.wantSnapshot("s1", aiReducer, 1, state)
	}},
}

// bigJSON returns a JSON object of about n bytes whose text holds escapes
// and multi-byte characters, so that a store that re-encodes JSON instead of
// keeping the bytes is caught.
func bigJSON(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	alphabet := []string{"a", "b", "é", "€", "\\n", "\\\"", "𝄞", " ", "{", "]"}
	var sb strings.Builder
	sb.WriteString(`{"text":"`)
	for sb.Len() < n-2 {
		sb.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	sb.WriteString(`"}`)
	return []byte(sb.String())
}

func payloadLen(events []protocol.Event) int {
	if len(events) == 0 {
		return -1
	}
	return len(events[0].Payload)
}
