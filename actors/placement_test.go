package actors

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/persistence"
	pebblestore "github.com/a2-runtime/a2/persistence/pebble"
	"github.com/a2-runtime/a2/protocol"
	"github.com/a2-runtime/a2/tools"
)

// A cluster member's runtime activates only the sessions the cluster
// places on it (Options.Place): a request for another is ErrMoved (an
// ErrUnavailable, so that a caller that does not route answers 503), and
// nothing is appended for it.
func TestPlacesRefusesSessionsPlacedElsewhere(t *testing.T) {
	g := newFixtureWith(t, `{"default":{"text":"here"}}`, Options{Place: func(session string) error {
		if session == "away" {
			return ErrMoved
		}
		return nil
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := g.rt.Push(ctx, "assistant", "away", []protocol.Event{protocol.Inputs.Text("m1", "hello")}, false)
	if !errors.Is(err, ErrMoved) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("push to a session placed elsewhere: %v, want ErrMoved", err)
	}
	if err := g.rt.Activate("assistant", "away"); !errors.Is(err, ErrMoved) {
		t.Fatalf("Activate of a session placed elsewhere: %v, want ErrMoved", err)
	}
	if last, err := g.store.LastIndex(ctx, "away"); err != nil || last != 0 {
		t.Fatalf("the refused session's log is at %d (%v), want 0", last, err)
	}
	g.push("here", protocol.Inputs.Text("m1", "hello"))
	g.waitFor("here", "the answer", func(s *protocol.AIState) bool { return s.Active == nil && lastText(s) == "here" })
}

// Release stops a session in the middle of its turn, after its write in
// flight: it is no longer active, what it wrote stays, and its next
// activation resumes the turn from the log (the interrupted attempt is
// superseded and run again).
func TestReleaseStopsABusySessionAndItsNextActivationResumes(t *testing.T) {
	f := newFixtureWith(t, `{"default":{"text":"resumed after the release","gate":"hold"}}`, Options{})
	f.push("s", protocol.Inputs.Text("m1", "hello"))
	f.waitFor("s", "the first delta", func(s *protocol.AIState) bool {
		return s.Status == protocol.StatusStreaming && lastText(s) != ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.rt.Release(ctx, "s"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if f.rt.IsActive("s") {
		t.Fatal("the session is still active after Release")
	}
	last, err := f.store.LastIndex(ctx, "s")
	if err != nil || last == 0 {
		t.Fatalf("the log after the release: %d %v", last, err)
	}
	f.model.Release("hold")
	if err := f.rt.Activate("assistant", "s"); err != nil {
		t.Fatalf("Activate: %v", err)
	}
	f.waitFor("s", "the resumed answer", func(s *protocol.AIState) bool {
		return s.Active == nil && lastText(s) == "resumed after the release"
	})
}

// newFixtureWith is newFixture with the runtime's options.
func newFixtureWith(t *testing.T, s string, opts Options) *fixture {
	t.Helper()
	sc, err := script.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, fs: vfs.NewMem(), model: script.New(sc), opts: opts}
	f.open(nil)
	return f
}

// failingLookups is a store whose lookups fail, as PostgreSQL's do while
// the server restarts.
type failingLookups struct{ persistence.Store }

func (failingLookups) Lookup(context.Context, []string) ([]protocol.Event, error) {
	return nil, errors.New("the database system is shutting down")
}

// A subscription that cannot read the store is refused with ErrUnavailable
// (the gateway's 503: retry), not with the store's raw error (a 500).
func TestSubscribeOnAStoreThatFailsIsUnavailable(t *testing.T) {
	st, err := pebblestore.Open("data", pebblestore.Options{FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sc, _ := script.Parse([]byte(`{}`))
	a, _ := scriptAgent(t, sc)
	rt, err := New(failingLookups{st}, []*Agent{a}, Options{SkipRecovery: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	_, errc := rt.Subscribe(context.Background(), "assistant", "s1", 0)
	if err := <-errc; !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("Subscribe on a failing store: %v, want ErrUnavailable with the store's reason", err)
	}
	_, errc = rt.Subscribe(context.Background(), "nope", "s1", 0)
	if err := <-errc; !errors.Is(err, ErrUnknownAgent) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Subscribe of an unknown agent: %v, want ErrUnknownAgent alone", err)
	}
}

// scriptAgent is the agent "assistant" on a script model of sc, with tools.
func scriptAgent(t testing.TB, sc *script.Script, tools ...tools.Tool) (*Agent, *script.Model) {
	t.Helper()
	model := script.New(sc)
	a, err := NewAgent(AgentOptions{Name: "assistant", Model: harness.ModelID("script/test"), Tools: tools,
		Models: func(string) (harness.Model, error) { return model, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return a, model
}
