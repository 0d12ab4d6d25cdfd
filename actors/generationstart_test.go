// A generation's start is durable before its model says anything.

package actors

import (
	"context"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/protocol"
)

// silentModel answers nothing until release is closed, then from its
// script.
type silentModel struct {
	answer  *script.Model
	release chan struct{}
}

func (m *silentModel) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	select {
	case <-m.release:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	return m.answer.Stream(ctx, req)
}

// A generation's start waits a few milliseconds for its model's first
// chunks, to share their write (startHold), but no longer: a model that
// says nothing still shows its generation running.
func TestAGenerationStartIsWrittenWhileItsModelIsSilent(t *testing.T) {
	sc, _ := script.Parse([]byte(`{"default":{"text":"late answer"}}`))
	m := &silentModel{answer: script.New(sc), release: make(chan struct{})}
	released := false
	defer func() {
		if !released {
			close(m.release)
		}
	}()
	f := newFixture(t, `{}`, func(o *AgentOptions) {
		o.Models = func(string) (harness.Model, error) { return m, nil }
	})
	f.push("s1", protocol.Inputs.Text("m1", "Hi"))
	isStart := func(ev protocol.Event) bool { return ev.Type == protocol.TypeGenerationStarted }
	deadline := time.Now().Add(10 * time.Second)
	var batch []protocol.Event
	for batch = f.store.batchOf(isStart); batch == nil; batch = f.store.batchOf(isStart) {
		if time.Now().After(deadline) {
			t.Fatal("the start of a generation whose model is silent was not written within 10 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
	for _, ev := range batch {
		if ev.Type == protocol.TypeGenerationProgress || ev.Type == protocol.TypeGenerationCompleted {
			t.Fatalf("the start's write holds %s before the model answered", ev.Type)
		}
	}
	close(m.release)
	released = true
	f.waitFor("s1", "the late answer", func(s *protocol.AIState) bool { return s.Active == nil && lastText(s) == "late answer" })
}
