package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/a2-runtime/a2/protocol"
)

// A session's grain stops once its session has passivated, even when its
// idle timer fired while the session was still active. protoactor cancels
// an actor's receive timeout when it fires; a grain that ignored it stayed
// on its member for good.
func TestAGrainWhoseTimerFiredEarlyStillStops(t *testing.T) {
	m, _ := startTestMember(t, memberSetup{script: `{"default":{"text":"served"}}`,
		grainIdle: 50 * time.Millisecond, passivateAfter: 500 * time.Millisecond})
	g := startTestGateway(t, m.cfg.Bind, nil, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := g.Router().Push(ctx, "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m1", "hello")}, false); err != nil {
		t.Fatal(err)
	}
	hasGrain := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		_, ok := m.grains["s1"]
		return ok
	}
	if !hasGrain() {
		t.Fatal("the push made no grain on the member")
	}
	// The grain's timer fires 50 ms after the push, while the session
	// (passivating 500 ms after its last message) is active.
	deadline := time.Now().Add(10 * time.Second)
	for hasGrain() || m.rt.IsActive("s1") {
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the push: grain %v, session active %v", hasGrain(), m.rt.IsActive("s1"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
