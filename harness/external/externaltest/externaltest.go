// Package externaltest runs an agent whose steps go through an external
// harness, for the tests of harness/external and harness/pi: a runtime on
// Pebble's in-memory filesystem, the script model recording what each
// live call was asked, and a turn that waits until the session settles.
package externaltest

import (
	"context"
	"encoding/json"
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

// Requests are the requests so far, in order.
func (m *Models) Requests() []harness.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]harness.Request(nil), m.reqs...)
}

// Runtime is a runtime of one agent, named "assistant".
type Runtime struct {
	t  testing.TB
	RT *actors.Runtime
}

// Start starts a runtime of the agent o describes (its name set to
// "assistant"); the test's cleanup closes it.
func Start(t testing.TB, o actors.AgentOptions) *Runtime {
	t.Helper()
	o.Name = "assistant"
	a, err := actors.NewAgent(o)
	if err != nil {
		t.Fatal(err)
	}
	st, err := pebblestore.Open("data", pebblestore.Options{FS: vfs.NewMem(), Logger: testutil.QuietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := actors.New(st, []*actors.Agent{a}, actors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(); _ = st.Close() })
	return &Runtime{t: t, RT: rt}
}

// Turn pushes a user message and waits, up to within, until the session
// settles (idle with a response, or failed); the test fails with the last
// state seen if it does not.
func (r *Runtime) Turn(session, text string, within time.Duration) *protocol.AIState {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := r.RT.Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Text("m-"+session, text)}, false); err != nil {
		r.t.Fatal(err)
	}
	var last *protocol.AIState
	for {
		st, _, err := r.RT.State(ctx, "assistant", session)
		if err != nil {
			b, _ := json.Marshal(last)
			r.t.Fatalf("the session did not settle: %v; its state: %s", err, b)
		}
		last = st.AI
		if (st.AI.Idle() && len(st.AI.Messages) >= 2) || st.AI.Status == protocol.StatusFailed {
			return st.AI
		}
		time.Sleep(10 * time.Millisecond)
	}
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
