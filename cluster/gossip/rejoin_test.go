package gossip

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"
)

// A node declared dead is tried again at its gossip address until a node
// answers there: here a new node started where the crashed one was (a
// partition's other side looks the same to memberlist: a dead node that
// answers again). The dead node is no longer reported failed once an alive
// node has its address.
func TestPartitionRejoinReachesADeadNodesAddressAgain(t *testing.T) {
	a := startNode(t, nodeOpts{})
	b := startNode(t, nodeOpts{join: []string{a.p.LocalAddr()}})
	bAddr := b.p.LocalAddr()
	waitFor(t, 5*time.Second, "a and b see each other", func() bool { return len(a.p.Nodes()) == 2 && len(b.p.Nodes()) == 2 })
	if err := b.p.Shutdown(false); err != nil { // a crash: no leave
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a declares b dead", func() bool {
		f := a.p.Failed()
		return len(a.p.Nodes()) == 1 && len(f) == 1 && f[0].Meta.ID == b.id && f[0].Addr == bAddr
	})
	// Let a few attempts fail first (nothing listens there).
	time.Sleep(time.Second)
	c := newNode(t, nodeOpts{})
	c.p.cfg.Bind = bAddr // alone, at b's address: it joins nobody itself
	if err := c.p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	waitFor(t, 10*time.Second, "a reaches c at b's address, and both see each other", func() bool {
		return slices.Equal(ids(a.p.Nodes()), sortedIDs(a, c)) && slices.Equal(ids(c.p.Nodes()), sortedIDs(a, c))
	})
	t.Logf("a joined the node at the dead node's address %v after it started", time.Since(started).Round(time.Millisecond))
	if f := a.p.Failed(); len(f) != 0 {
		t.Errorf("a still reports failures: %+v", f)
	}
}

// A seed that did not answer at start is tried again until a node answers
// there.
func TestPartitionRejoinTriesSeedsAgain(t *testing.T) {
	a := startNode(t, nodeOpts{})
	later := "127.0.0.1:" + strconv.Itoa(freePort(t))
	d := startNode(t, nodeOpts{join: []string{a.p.LocalAddr(), later}})
	waitFor(t, 5*time.Second, "a and d see each other", func() bool { return len(a.p.Nodes()) == 2 && len(d.p.Nodes()) == 2 })
	time.Sleep(time.Second)
	c := newNode(t, nodeOpts{})
	c.p.cfg.Bind = later
	if err := c.p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "d reaches c at its seed address", func() bool {
		return len(a.p.Nodes()) == 3 && len(c.p.Nodes()) == 3 && len(d.p.Nodes()) == 3
	})
}
