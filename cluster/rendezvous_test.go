package cluster

import (
	"fmt"
	"math"
	"testing"

	"github.com/a2-runtime/a2/cluster/gossip"
)

func members(n int) []gossip.Meta {
	out := make([]gossip.Meta, n)
	for i := range out {
		out[i] = gossip.Meta{ID: fmt.Sprintf("m%d", i), Host: "127.0.0.1", Port: 7947 + 2*i, Kinds: []string{KindSession}}
	}
	return out
}

func sessionIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("session-%d", i)
	}
	return out
}

// 100,000 session IDs spread within 10% of the mean over 3, 4 and 5
// members (protoactor's own rendezvous splits them 50/25/25 over three).
func TestPlacementSpread(t *testing.T) {
	ids := sessionIDs(100_000)
	for _, n := range []int{3, 4, 5} {
		hosts := members(n)
		count := map[string]int{}
		for _, s := range ids {
			o, ok := ownerOf(s, hosts)
			if !ok {
				t.Fatal("no owner")
			}
			count[o.ID]++
		}
		mean := float64(len(ids)) / float64(n)
		worst := 0.0
		for _, m := range hosts {
			dev := math.Abs(float64(count[m.ID])-mean) / mean
			worst = max(worst, dev)
			if dev > 0.10 {
				t.Errorf("%d members: %s has %d sessions, %.1f%% off the mean %.0f", n, m.ID, count[m.ID], 100*dev, mean)
			}
		}
		t.Logf("%d members: %v (worst %.2f%% off the mean)", n, count, 100*worst)
	}
}

// When a member leaves, exactly the sessions it had move (each to some
// other member); when one joins, the sessions that move all move to it;
// either way about 1/N of them.
func TestPlacementMovesOnlyWhatChanges(t *testing.T) {
	ids := sessionIDs(100_000)
	for _, n := range []int{3, 4, 5} {
		before := members(n)
		owners := map[string]string{}
		for _, s := range ids {
			o, _ := ownerOf(s, before)
			owners[s] = o.ID
		}
		// A leave: the last member goes.
		gone := before[n-1].ID
		after := before[:n-1]
		moved := 0
		for _, s := range ids {
			o, _ := ownerOf(s, after)
			if owners[s] == gone {
				moved++
				continue
			}
			if o.ID != owners[s] {
				t.Fatalf("%d members, leave: %s moved from %s to %s, though %s stayed", n, s, owners[s], o.ID, owners[s])
			}
		}
		checkFraction(t, "leave", n, moved, len(ids))
		// A join: a new member comes.
		joined := members(n + 1)[n]
		grown := append(append([]gossip.Meta{}, before...), joined)
		moved = 0
		for _, s := range ids {
			o, _ := ownerOf(s, grown)
			if o.ID == owners[s] {
				continue
			}
			if o.ID != joined.ID {
				t.Fatalf("%d members, join: %s moved from %s to %s, not to the new member", n, s, owners[s], o.ID)
			}
			moved++
		}
		checkFraction(t, "join", n+1, moved, len(ids))
	}
}

func checkFraction(t *testing.T, what string, n, moved, total int) {
	t.Helper()
	frac, want := float64(moved)/float64(total), 1/float64(n)
	t.Logf("%s with %d members: %.2f%% moved (1/N = %.2f%%)", what, n, 100*frac, 100*want)
	if frac < 0.8*want || frac > 1.2*want {
		t.Errorf("%s with %d members: %.2f%% of the sessions moved, want about %.2f%%", what, n, 100*frac, 100*want)
	}
}

// Every node computes the same owner, whatever the order it lists the
// members in.
func TestPlacementIgnoresMemberOrder(t *testing.T) {
	a := members(5)
	b := []gossip.Meta{a[3], a[1], a[4], a[0], a[2]}
	for _, s := range sessionIDs(10_000) {
		x, _ := ownerOf(s, a)
		y, _ := ownerOf(s, b)
		if x.ID != y.ID {
			t.Fatalf("%s: %s in one order, %s in another", s, x.ID, y.ID)
		}
	}
	if _, ok := ownerOf("s", nil); ok {
		t.Fatal("an owner among no members")
	}
}

// BenchmarkOwnerOf measures one placement decision (a node makes one per
// request it routes) over 3 and 5 members.
func BenchmarkOwnerOf(b *testing.B) {
	ids := sessionIDs(1024)
	for _, n := range []int{3, 5} {
		hosts := members(n)
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			for i := range b.N {
				_, _ = ownerOf(ids[i%len(ids)], hosts)
			}
		})
	}
}
