// Pushes admitted without a lookup (write.go, onPush).
//
// A push's IDs may be stored already: a client's resubmission, answered
// with the stored events (R-LOG-09), or a reuse of an ID, refused
// (R-LOG-10). Asking the store before every push costs a round trip per
// push, which on PostgreSQL is a transaction of its own (about half of a
// cluster member's). So a session looks a push's IDs up only when one of
// them may be stored:
//   - during its activation's first Options.LookupPushesFor (a client's
//     retry after a failover or a passivation reaches a fresh activation);
//   - when an ID is among the IDs of the pushes this activation wrote
//     (recentIDs: a retry of a push whose answer was lost);
//   - when the push is a retry of the runtime's (verifiedPush, below).
// Any other push goes to the store unchecked ("optimistic"). Its append
// refuses a stored ID (persistence.ErrPartialDuplicateBatch: the store
// checks every ID it writes), or a batch of nothing but stored events
// replays: then the batch's state ran ahead on events that were already
// in it, so the actor stops, as after any failed write, and answers the
// batch's pushes with stoppingReply. The runtime asks the next
// activation again, with verifiedPush, which looks the IDs up first and
// answers as R-LOG-09 and R-LOG-10 say. A resubmission the lookups missed
// thus costs one activation, and its neighbours in the batch are written
// by the next one.

package actors

import "github.com/a2-runtime/a2/actors/sessionpb"

// verifiedPush is a push the runtime sends again after a session stopped
// before answering it: its IDs are looked up before it is admitted.
type verifiedPush struct{ *sessionpb.PushRequest }

// recentPushIDs bounds recentIDs.
const recentPushIDs = 4096

// recentIDs are the IDs of the last recentPushIDs pushed events a session
// activation wrote, oldest first out.
type recentIDs struct {
	set  map[string]struct{}
	ring []string
	next int
}

func (r *recentIDs) add(id string) {
	if r.set == nil {
		r.set = make(map[string]struct{}, 64)
	}
	if _, ok := r.set[id]; ok {
		return
	}
	if len(r.ring) < recentPushIDs {
		r.ring = append(r.ring, id)
	} else {
		delete(r.set, r.ring[r.next])
		r.ring[r.next] = id
		r.next = (r.next + 1) % recentPushIDs
	}
	r.set[id] = struct{}{}
}

func (r *recentIDs) hasAny(ids []string) bool {
	for _, id := range ids {
		if _, ok := r.set[id]; ok {
			return true
		}
	}
	return false
}
