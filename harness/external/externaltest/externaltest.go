// Package externaltest runs an agent whose steps go through an external
// harness, for the tests of harness/external and harness/pi: a runtime on
// Pebble's in-memory filesystem, the script model recording what each
// live call was asked, and a turn that waits until the session settles.
package externaltest

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/internal/testutil"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
)

// Models serves the script model and records every request: what the
// harness made the model see, and how many live calls ran.
type Models struct {
	model harness.Model
	mu    sync.Mutex
	reqs  []harness.Request
}

// NewModels parses a script; the test fails on a bad one.
func NewModels(t testing.TB, scriptJSON string) *Models {
	t.Helper()
	sc, err := script.Parse([]byte(scriptJSON))
	if err != nil {
		t.Fatal(err)
	}
	return &Models{model: script.New(sc)}
}

// Provider is the agent's model provider: this, whatever the ID.
func (m *Models) Provider(string) (harness.Model, error) { return m, nil }

// Stream implements harness.Model.
func (m *Models) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()
	return m.model.Stream(ctx, req)
}

// Release opens a gate of the script (script.Model.Release).
func (m *Models) Release(gate string) { m.model.(*script.Model).Release(gate) }

// Requests are the requests so far, in order.
func (m *Models) Requests() []harness.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]harness.Request(nil), m.reqs...)
}

// Runtime is a runtime of one agent, named "assistant".
type Runtime struct {
	t     testing.TB
	agent *actors.Agent
	opts  actors.Options
	fs    vfs.FS
	store *pebblestore.Store
	RT    *actors.Runtime
}

// Start starts a runtime of the agent o describes (its name set to
// "assistant"); the test's cleanup closes it.
func Start(t testing.TB, o actors.AgentOptions) *Runtime {
	t.Helper()
	return StartWith(t, o, actors.Options{})
}

// StartWith starts it with the runtime's options ro.
func StartWith(t testing.TB, o actors.AgentOptions, ro actors.Options) *Runtime {
	t.Helper()
	o.Name = "assistant"
	a, err := actors.NewAgent(o)
	if err != nil {
		t.Fatal(err)
	}
	r := &Runtime{t: t, agent: a, opts: ro, fs: vfs.NewMem()}
	r.open()
	t.Cleanup(r.close)
	return r
}

func (r *Runtime) open() {
	r.t.Helper()
	st, err := pebblestore.Open("data", pebblestore.Options{FS: r.fs, Logger: testutil.QuietPebble{}})
	if err != nil {
		r.t.Fatal(err)
	}
	rt, err := actors.New(st, []*actors.Agent{r.agent}, r.opts)
	if err != nil {
		r.t.Fatal(err)
	}
	r.store, r.RT = st, rt
}

func (r *Runtime) close() {
	if r.RT != nil {
		r.RT.Close()
		_ = r.store.Close()
		r.RT = nil
	}
}

// Restart closes the runtime where it is, its work in flight cut off, and
// opens a new one on the same store, as a node that restarts does; the
// new one resumes the sessions' work from the log.
func (r *Runtime) Restart() {
	r.t.Helper()
	r.close()
	r.open()
}

// State reads a session's state; the test fails on an error.
func (r *Runtime) State(session string) *protocol.AIState {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, _, err := r.RT.State(ctx, "assistant", session)
	if err != nil {
		r.t.Fatal(err)
	}
	return st.AI
}

// Wait polls a session's state, up to within, until cond holds.
func (r *Runtime) Wait(session string, within time.Duration, what string, cond func(*protocol.AIState) bool) *protocol.AIState {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := r.State(session)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(st)
			r.t.Fatalf("%s did not happen within %s; the state: %s", what, within, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Settled reports whether a session is idle with a response, or failed.
func Settled(st *protocol.AIState) bool {
	return (st.Idle() && len(st.Messages) >= 2) || st.Status == protocol.StatusFailed
}

// Turn pushes a user message and waits, up to within, until the session
// settles with its response (idle with it, or failed); the test fails
// with the last state seen if it does not.
func (r *Runtime) Turn(session, text string, within time.Duration) *protocol.AIState {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	before := len(r.State(session).Messages)
	id := "m-" + session
	if before > 0 {
		id += "-" + strconv.Itoa(before)
	}
	if _, err := r.RT.Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Text(id, text)}, false); err != nil {
		r.t.Fatal(err)
	}
	return r.Wait(session, within, "the session's settling", func(st *protocol.AIState) bool {
		return st.Status == protocol.StatusFailed || (Settled(st) && len(st.Messages) >= before+2)
	})
}

// ToolParts are the last response's tool parts by call ID.
func ToolParts(st *protocol.AIState) map[string]protocol.Part {
	out := map[string]protocol.Part{}
	for _, p := range st.Messages[len(st.Messages)-1].Parts {
		if p.ToolCallID != "" {
			out[p.ToolCallID] = p
		}
	}
	return out
}
