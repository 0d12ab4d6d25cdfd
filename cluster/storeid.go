package cluster

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// storeIdentityType is the type of the event that names a store.
const storeIdentityType = "a2.store.identity"

// StoreIdentity returns the identity of store: a random ID written once, as
// an event with an ID derived from a fixed purpose in a log of its own, so
// that every node that opens the same store (the same PostgreSQL database)
// reads the same identity and a node on another store reads another. Event
// IDs are unique across a store, so two nodes that write it at once agree
// on the first one durable. Members gossip it: a member whose store differs
// from the cluster's is refused at join.
func StoreIdentity(ctx context.Context, store persistence.Store) (string, error) {
	id := protocol.DeriveID("a2.store-identity")
	if got, err := readStoreIdentity(ctx, store, id); err != nil || got != "" {
		return got, err
	}
	payload, _ := json.Marshal(map[string]string{"id": rand.Text()})
	ev := protocol.Event{ID: id, Type: storeIdentityType, Payload: payload}
	_, err := store.Append(ctx, protocol.DeriveID("a2.store-identity-log"), 0, []protocol.Event{ev})
	if err != nil && !errors.Is(err, persistence.ErrPartialDuplicateBatch) && !errors.Is(err, persistence.ErrIndexConflict) {
		return "", fmt.Errorf("cluster: write the store's identity: %w", err)
	}
	got, err := readStoreIdentity(ctx, store, id)
	if err == nil && got == "" {
		err = errors.New("cluster: the store's identity was written but cannot be read")
	}
	return got, err
}

func readStoreIdentity(ctx context.Context, store persistence.Store, id string) (string, error) {
	evs, err := store.Lookup(ctx, []string{id})
	if err != nil {
		return "", fmt.Errorf("cluster: read the store's identity: %w", err)
	}
	if len(evs) == 0 {
		return "", nil
	}
	var p struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(evs[0].Payload, &p); err != nil || p.ID == "" {
		return "", fmt.Errorf("%w: the store's identity is not readable: %s", persistence.ErrCorrupt, evs[0].Payload)
	}
	return p.ID, nil
}
