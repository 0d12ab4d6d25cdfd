package cluster

import (
	"github.com/cespare/xxhash/v2"

	"github.com/a2-runtime/a2/cluster/gossip"
)

// Placement by rendezvous (highest-random-weight) hashing.
//
// A session is placed on the member, among the live members that host
// sessions, whose score for the session ID is highest; the score mixes the
// session ID with the member's address, so every node that sees the same
// members computes the same owner without asking anyone, and a member that
// joins or leaves moves only the sessions it gains or loses (about 1/N of
// them): every other session keeps its highest score. The address, not the
// member ID (fresh at each process start), is what is hashed, so that a
// member restarted at the same address gets its sessions back.
//
// protoactor's own rendezvous (cluster.Rendezvous) hashes with FNV over a
// short key and splits 100,000 identities 50/25/25 over three members
// (PROTOACTOR-NOTES); xxhash's 64-bit mix of the whole key spreads them
// within a few percent (TestPlacementSpread).

// score is member's weight for session: the higher, the likelier its owner.
func score(session, member string) uint64 {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(session)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(member)
	return mix(d.Sum64())
}

// mix is a finalizer (splitmix64's) over the digest, so that members whose
// addresses differ in one digit do not get correlated scores.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// ownerOf returns the member among hosts that the hash places session on;
// false when hosts is empty. Ties (never seen with 64-bit scores) go to the
// lower address, so that every node agrees.
func ownerOf(session string, hosts []gossip.Meta) (gossip.Meta, bool) {
	best, bestScore, found := gossip.Meta{}, uint64(0), false
	for _, m := range hosts {
		addr := m.Address()
		s := score(session, addr)
		if !found || s > bestScore || (s == bestScore && addr < best.Address()) {
			best, bestScore, found = m, s, true
		}
	}
	return best, found
}
