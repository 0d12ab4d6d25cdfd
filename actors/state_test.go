package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/a2-runtime/a2/protocol"
)

// StateJSON, what a member answers another node with, is the state's JSON:
// the initial state with the session's ID for a session nobody wrote to,
// the folded state at its index for one that was (mutants runtime.go:414).
func TestStateJSON(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, nil)
	ctx := context.Background()
	b, index, err := f.rt.StateJSON(ctx, "assistant", "nobody")
	if err != nil || index != 0 {
		t.Fatalf("an unwritten session: index %d, %v", index, err)
	}
	var empty struct {
		Session protocol.SessionInfo `json:"session"`
		Status  string               `json:"status"`
	}
	if err := json.Unmarshal(b, &empty); err != nil || empty.Session.ID != "nobody" || empty.Status != protocol.StatusIdle {
		t.Fatalf("an unwritten session's state %s (%v)", b, err)
	}
	f.push("s1", protocol.Inputs.Text("m1", "hi"))
	f.waitFor("s1", "the answer", func(s *protocol.AIState) bool { return idle(s) && len(s.Messages) == 2 })
	b, index, err = f.rt.StateJSON(ctx, "assistant", "s1")
	st, sindex, serr := f.rt.State(ctx, "assistant", "s1")
	if err != nil || serr != nil || index == 0 || index != sindex {
		t.Fatalf("StateJSON at %d (%v), State at %d (%v)", index, err, sindex, serr)
	}
	want, _ := st.MarshalJSON()
	if string(b) != string(want) {
		t.Fatalf("StateJSON differs from State:\n%s\n%s", b, want)
	}
	if _, _, err := f.rt.StateJSON(ctx, "nope", "s1"); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("StateJSON of an unknown agent: %v", err)
	}
}

// lastIndexFailing fails LastIndex, as a store that cannot be read does.
type lastIndexFailing struct{ *countingStore }

func (s lastIndexFailing) LastIndex(context.Context, string) (uint64, error) {
	return 0, fmt.Errorf("injected: the disk is gone")
}

// A store that cannot say where a session's log ends makes the state read
// unavailable, not an empty session (mutant runtime.go:434).
func TestStateOfAnUnreadableStoreIsUnavailable(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, nil)
	f.recovered()
	f.rt.store = lastIndexFailing{f.store}
	if _, _, err := f.rt.State(context.Background(), "assistant", "s1"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("the state of a session on an unreadable store: %v, want ErrUnavailable", err)
	}
}
