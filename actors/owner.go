package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/a2-runtime/a2/internal/wire"
	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// Session ownership (docs/storage.md §1.1).
//
// A store keys a log by session ID alone, while the runtime, like the HTTP
// API, addresses a session by agent and ID: two agents on one store, each
// with a session "42", would otherwise write, fold and serve one log. So
// the first agent to write a session claims it: before the session's first
// write, its actor appends a claim naming the agent, an event whose ID is
// derived from the session ID, to a log of its own (also derived from the
// session ID, so outside every caller's namespace). Event IDs are unique
// across the store (R-LOG-01) and a reused ID with other content is
// refused whole (R-LOG-10), so on any store the claim is atomic and
// durable: the same agent's claim replays, another agent's fails, and that
// agent's requests for the session get ErrSessionOwned. A log written
// before claims existed is claimed by the first agent to activate it.

// ErrSessionOwned is returned for a session that another agent of the
// store has claimed (the gateway answers 409 SESSION_OWNED).
var ErrSessionOwned = wire.ErrSessionOwned

// ErrQuota is a push refused because it would take its session past
// Options.MaxSessionBytes; nothing was appended.
var ErrQuota = wire.ErrQuota

// ownerEventType is the type of a session's claim.
const ownerEventType = "a2.session.owner"

type ownerClaim struct {
	Agent string `json:"agent"`
}

func ownerLog(session string) string     { return protocol.DeriveID("a2.session-owner-log", session) }
func ownerEventID(session string) string { return protocol.DeriveID("a2.session-owner", session) }

// sessionOwner returns the agent that claimed session in store, "" if none
// has. A claim never changes once durable (its event is immutable), so the
// owners found are kept (owners) and a session's subscriptions, state reads
// and activations after the first ask the store nothing.
func sessionOwner(ctx context.Context, store persistence.Store, session string) (string, error) {
	if o, ok := owners.get(store, session); ok {
		return o, nil
	}
	evs, err := store.Lookup(ctx, []string{ownerEventID(session)})
	if err != nil || len(evs) == 0 {
		return "", err
	}
	var c ownerClaim
	if err := json.Unmarshal(evs[0].Payload, &c); err != nil || c.Agent == "" {
		return "", fmt.Errorf("%w: the claim of session %q is not readable: %s", persistence.ErrCorrupt, session, evs[0].Payload)
	}
	owners.put(store, session, c.Agent)
	return c.Agent, nil
}

// ownerCache holds durable claims: (store, session) to agent. It is
// bounded: when full it starts again empty (a claim forgotten is looked up
// again, never wrong).
type ownerCache struct {
	mu sync.Mutex
	m  map[ownerKey]string
}

type ownerKey struct {
	store   persistence.Store
	session string
}

// ownerCacheSize bounds the claims kept (about 100 bytes each).
const ownerCacheSize = 1 << 16

var owners = &ownerCache{}

func (c *ownerCache) get(store persistence.Store, session string) (string, bool) {
	if !reflect.TypeOf(store).Comparable() {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.m[ownerKey{store, session}]
	return o, ok
}

func (c *ownerCache) put(store persistence.Store, session, agent string) {
	if !reflect.TypeOf(store).Comparable() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= ownerCacheSize {
		c.m = make(map[ownerKey]string)
	}
	c.m[ownerKey{store, session}] = agent
}

// forget drops the claims of a store, which its runtime no longer uses:
// the cache would otherwise keep a closed store (its database, its ID
// filter) alive until it filled up.
func (c *ownerCache) forget(store persistence.Store) {
	if store == nil || !reflect.TypeOf(store).Comparable() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if k.store == store {
			delete(c.m, k)
		}
	}
}

// checkOwner fails with ErrSessionOwned when an agent other than agent has
// claimed session; it reports whether agent has.
func checkOwner(ctx context.Context, store persistence.Store, agent, session string) (owned bool, err error) {
	o, err := sessionOwner(ctx, store, session)
	if err != nil {
		return false, err
	}
	if o != "" && o != agent {
		return false, ownedBy(session, o)
	}
	return o == agent, nil
}

func ownedBy(session, agent string) error {
	return fmt.Errorf("%w: session %q belongs to agent %q", ErrSessionOwned, session, agent)
}

// claimSession records agent as session's owner; ErrSessionOwned if another
// agent claimed it first.
func claimSession(ctx context.Context, store persistence.Store, agent, session string) error {
	c := sessionClaim(ctx, store, agent, session)
	return c.Check(store.Append(ctx, c.Session, c.Expected, c.Events))
}

// sessionClaim is the append of agent's claim of session, to precede the
// session's first batch (persistence.Preceded: on the Pebble
// store, in the same synced write). Its Check makes a claim another agent
// made first ErrSessionOwned.
func sessionClaim(ctx context.Context, store persistence.Store, agent, session string) persistence.Preceding {
	ev := protocol.Event{ID: ownerEventID(session), Type: ownerEventType, Payload: mustJSON(ownerClaim{Agent: agent})}
	return persistence.Preceding{Session: ownerLog(session), Events: []protocol.Event{ev},
		Check: func(_ []protocol.Event, err error) error {
			if errors.Is(err, persistence.ErrPartialDuplicateBatch) || errors.Is(err, persistence.ErrIndexConflict) {
				if o, oerr := sessionOwner(ctx, store, session); oerr == nil && o != "" && o != agent {
					return ownedBy(session, o)
				}
			}
			return err
		}}
}
