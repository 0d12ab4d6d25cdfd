package cluster

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/a2-runtime/a2/cluster/clusterpb"
	"github.com/a2-runtime/a2/cluster/gossip"
)

// A request in flight to a member that the gossip then drops from the view
// (it died, or froze) is abandoned at once with errOwnerGone, which the
// router retries at the session's new owner, instead of waiting out its
// attempt's timeout for an answer that will not come.
func TestARequestToAMemberThatLeftTheViewIsAbandoned(t *testing.T) {
	n, _ := startTestMember(t, memberSetup{script: `{"default":{"text":"hi"}}`})
	// A "member" that accepts connections and never answers: a frozen one.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	frozen := gossip.Meta{ID: "frozen", Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port, Kinds: []string{KindSession},
		Cluster: "unit", Role: RoleMember, Status: gossip.StatusUp}
	before := n.view.Load().all
	n.onNodes(append(append([]gossip.Meta(nil), before...), frozen))

	var dropped atomic.Bool
	type result struct {
		err          error
		afterDropped bool
	}
	done := make(chan result, 1)
	go func() {
		_, err := n.ask(actor.NewPID(frozen.Address(), grainPrefix+"s"), wrap(kindIdle, &clusterpb.IdleRequest{}, time.Time{}), time.Minute)
		done <- result{err, dropped.Load()}
	}()
	time.Sleep(300 * time.Millisecond) // the request reaches the frozen member
	dropped.Store(true)
	n.onNodes(before) // the gossip declares it dead
	select {
	case r := <-done:
		if !errors.Is(r.err, errOwnerGone) || !r.afterDropped {
			t.Fatalf("the request ended with %v (after the view dropped the member: %v), want errOwnerGone once it did", r.err, r.afterDropped)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the request to a member the view dropped was still waiting 20 s later (its attempt's timeout is a minute)")
	}
}
