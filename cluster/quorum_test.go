package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/a2-runtime/a2/cluster/gossip"
)

// The quorum decision (quorum.go), case by case: who counts, who is
// forgotten, and whether the member may serve.
func TestQuorumDecision(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const forget = 10 * time.Second
	alive := func(id string) knownMember { return knownMember{ID: id, Addr: id + ":7947", Alive: true} }
	dead := func(id string, ago time.Duration) knownMember {
		return knownMember{ID: id, Addr: id + ":7947", FailedAt: now.Add(-ago)}
	}
	at := func(k knownMember, addr string) knownMember { k.Addr = addr; return k }
	cases := []struct {
		name           string
		known          []knownMember
		down           bool
		quorum         bool
		alive, counted int
		missing        []string
		forget         []string
	}{
		{"one member alone", []knownMember{alive("a")}, false, true, 1, 1, nil, nil},
		{"two members", []knownMember{alive("a"), alive("b")}, false, true, 2, 2, nil, nil},
		{"two members, the other dead: one or two never step down", []knownMember{alive("a"), dead("b", time.Second)}, false, true, 1, 2, []string{"b"}, nil},
		{"two members, the other dead, already down: steps up (a rule of two)", []knownMember{alive("a"), dead("b", time.Second)}, true, true, 1, 2, []string{"b"}, nil},
		{"three members", []knownMember{alive("a"), alive("b"), alive("c")}, false, true, 3, 3, nil, nil},
		{"three, one just died: two of three", []knownMember{alive("a"), alive("b"), dead("c", time.Second)}, false, true, 2, 3, []string{"c"}, nil},
		{"three, cut off from the two others", []knownMember{alive("a"), dead("b", time.Second), dead("c", 500*time.Millisecond)}, false, false, 1, 3, []string{"b", "c"}, nil},
		{"three, cut off: the first noticed only", []knownMember{alive("a"), dead("b", time.Second), alive("c")}, false, true, 2, 3, []string{"b"}, nil},
		{"three, one dead longer than the bound: forgotten, two go on", []knownMember{alive("a"), alive("b"), dead("c", 11*time.Second)}, false, true, 2, 2, nil, []string{"c"}},
		{"then another dies: two counted, serves", []knownMember{alive("a"), dead("b", time.Second)}, false, true, 1, 2, []string{"b"}, nil},
		{"three, one dead at the bound exactly: forgotten", []knownMember{alive("a"), alive("b"), dead("c", forget)}, false, true, 2, 2, nil, []string{"c"}},
		{"three, two dead within the bound of each other: the older forgotten first", []knownMember{alive("a"), dead("b", 12*time.Second), dead("c", time.Second)}, false, true, 1, 2, []string{"c"}, []string{"b"}},
		{"stepped down, the others dead for long: forgets no one, stays down", []knownMember{alive("a"), dead("b", time.Hour), dead("c", time.Hour)}, true, false, 1, 3, []string{"b", "c"}, nil},
		{"stepped down, the others back: steps up", []knownMember{alive("a"), alive("b"), alive("c")}, true, true, 3, 3, nil, nil},
		{"stepped down, one back: a majority again", []knownMember{alive("a"), alive("b"), dead("c", time.Hour)}, true, true, 2, 3, []string{"c"}, nil},
		{"a dead member whose address an alive one has: started again, forgotten even when down",
			[]knownMember{alive("a"), dead("b", time.Second), dead("c", time.Second), at(alive("c2"), "b:7947"), at(alive("c3"), "c:7947")}, true, true, 3, 3, nil, []string{"b", "c"}},
		{"four, split two and two: no majority", []knownMember{alive("a"), alive("b"), dead("c", time.Second), dead("d", time.Second)}, false, false, 2, 4, []string{"c", "d"}, nil},
		{"four, one dead: three of four", []knownMember{alive("a"), alive("b"), alive("c"), dead("d", time.Second)}, false, true, 3, 4, []string{"d"}, nil},
		{"five, split three and two: the three serve", []knownMember{alive("a"), alive("b"), alive("c"), dead("d", time.Second), dead("e", time.Second)}, false, true, 3, 5, []string{"d", "e"}, nil},
		{"five, split three and two: the two step down", []knownMember{alive("d"), alive("e"), dead("a", time.Second), dead("b", time.Second), dead("c", time.Second)}, false, false, 2, 5, []string{"a", "b", "c"}, nil},
		{"five, two long dead and one just now: two of three", []knownMember{alive("a"), alive("b"), dead("c", time.Second), dead("d", time.Minute), dead("e", time.Minute)}, false, true, 2, 3, []string{"c"}, []string{"d", "e"}},
	}
	for _, c := range cases {
		d := decideQuorum(c.known, c.down, now, forget)
		if d.Quorum != c.quorum || d.Alive != c.alive || d.Counted != c.counted || !slices.Equal(d.Missing, c.missing) || !slices.Equal(d.Forget, c.forget) {
			t.Errorf("%s: got quorum %v, alive %d of %d, missing %v, forget %v; want %v, %d of %d, %v, %v",
				c.name, d.Quorum, d.Alive, d.Counted, d.Missing, d.Forget, c.quorum, c.alive, c.counted, c.missing, c.forget)
		}
		// The order of the members does not matter.
		rev := slices.Clone(c.known)
		slices.Reverse(rev)
		if r := decideQuorum(rev, c.down, now, forget); r.Quorum != d.Quorum || r.Counted != d.Counted || !slices.Equal(r.Forget, d.Forget) {
			t.Errorf("%s: another order of the members decides otherwise: %+v, %+v", c.name, d, r)
		}
	}
}

// What a member counts from the gossip's membership: members alive
// whatever their status but leaving, dead ones as dead, not gateways; a
// member that left (no longer listed, not dead) is forgotten at once.
func TestQuorumObserve(t *testing.T) {
	q := quorum{known: map[string]knownMember{}}
	m := func(id, role, status string) gossip.Meta {
		return gossip.Meta{ID: id, Host: id, Port: 7947, Role: role, Status: status}
	}
	q.observe([]gossip.Meta{m("a", RoleMember, gossip.StatusUp), m("b", RoleMember, gossip.StatusDown), m("c", RoleMember, gossip.StatusStarting),
		m("d", RoleMember, gossip.StatusUp), m("g", RoleGateway, gossip.StatusUp)}, nil)
	if got := sortedKnown(&q); !slices.Equal(got, []string{"a+", "b+", "c+", "d+"}) {
		t.Fatalf("known %v", got)
	}
	at := time.Now()
	// b leaves gracefully (status leaving), c is declared dead, d left (a
	// gossip leave: gone, not dead).
	q.observe([]gossip.Meta{m("a", RoleMember, gossip.StatusUp), m("b", RoleMember, gossip.StatusLeaving)},
		[]gossip.Failure{{Meta: m("c", RoleMember, gossip.StatusUp), Addr: "c:7946", At: at}})
	if got := sortedKnown(&q); !slices.Equal(got, []string{"a+", "c-"}) {
		t.Fatalf("known %v", got)
	}
	if q.known["c"].FailedAt != at {
		t.Errorf("c failed at %v, want %v", q.known["c"].FailedAt, at)
	}
	// c comes back.
	q.observe([]gossip.Meta{m("a", RoleMember, gossip.StatusUp), m("c", RoleMember, gossip.StatusUp)}, nil)
	if got := sortedKnown(&q); !slices.Equal(got, []string{"a+", "c+"}) {
		t.Fatalf("known %v", got)
	}
	// A member never seen alive and reported dead is not counted.
	q.observe([]gossip.Meta{m("a", RoleMember, gossip.StatusUp), m("c", RoleMember, gossip.StatusUp)},
		[]gossip.Failure{{Meta: m("z", RoleMember, gossip.StatusUp), Addr: "z:7946", At: at}})
	if got := sortedKnown(&q); !slices.Equal(got, []string{"a+", "c+"}) {
		t.Fatalf("known %v", got)
	}
}

func sortedKnown(q *quorum) []string {
	var out []string
	for id, k := range q.known {
		if k.Alive {
			out = append(out, id+"+")
		} else {
			out = append(out, id+"-")
		}
	}
	slices.Sort(out)
	return out
}
