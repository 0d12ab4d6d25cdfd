package actors

import (
	"context"
	"time"

	"github.com/a2-runtime/a2/harness/catalog"
	"github.com/a2-runtime/a2/protocol"
)

// Catalog looks up a model's limits (R-META-02). found is false for a model
// the catalog does not list; an error is a failed lookup.
type Catalog interface {
	Lookup(ctx context.Context, model string) (contextWindow, maxOutputTokens int64, found bool, err error)
}

// CatalogCache serves lookups from a catalog source (an AI Gateway models
// URL or a local JSON file) through a shared cache: one fetch per source
// and hour for the whole node, five seconds at most per fetch (R-META-04).
type CatalogCache struct {
	Source string
	Cache  *catalog.Cache
}

// Lookup implements Catalog.
func (c CatalogCache) Lookup(ctx context.Context, model string) (int64, int64, bool, error) {
	m, found, err := c.Cache.Lookup(ctx, c.Source, model)
	return m.ContextWindow, m.MaxOutputTokens, found, err
}

type metadataDone struct {
	model string
	ev    *protocol.Event
}

// lookupAttempts and lookupBackoff are the retry policy of a metadata
// lookup; after the last attempt the entry stays pending and no new lookup
// runs for it in this activation (R-META-05).
var (
	lookupAttempts = 3
	lookupBackoff  = 200 * time.Millisecond
)

// reconcileMetadata starts a lookup for every model whose metadata is
// pending, without delaying any generation (R-META-02).
func (s *sessionActor) reconcileMetadata(work []protocol.Work) {
	if s.rt.opts.Catalog == nil {
		return
	}
	if s.metaTried == nil {
		s.metaTried = map[string]bool{}
	}
	for _, w := range work {
		if w.Kind != protocol.WorkMetadata || s.metaTried[w.Model] {
			continue
		}
		s.metaTried[w.Model] = true
		s.lookups++
		cat, session, model, self, sys := s.rt.opts.Catalog, s.id, w.Model, s.self, s.rt.system
		go func() {
			done := &metadataDone{model: model}
			for attempt := 0; attempt < lookupAttempts; attempt++ {
				if attempt > 0 {
					time.Sleep(lookupBackoff << (attempt - 1))
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				window, maxOut, found, err := cat.Lookup(ctx, model)
				cancel()
				if err != nil {
					continue
				}
				p := protocol.ModelMetadataResolved{Model: model, Unavailable: !found, ContextWindow: window, MaxOutputTokens: maxOut}
				done.ev = &protocol.Event{ID: protocol.DeriveID("metadata-resolved", session, model), Type: protocol.TypeModelMetaResolved, Payload: mustJSON(p)}
				break
			}
			sys.Root.Send(self, done)
		}()
	}
}

func (s *sessionActor) onMetadataDone(m *metadataDone) {
	s.lookups--
	if m.ev != nil {
		s.queueWork(*m.ev)
	}
	s.flushSoon()
}

// metadataRequest is the ai.model.metadata.requested event that the first
// generation with a model writes in its start batch (R-META-01), or nil.
func (s *sessionActor) metadataRequest(model string) *protocol.Event {
	if model == "" || s.agent.toolbox().work.NoMetadata || s.rt.opts.Catalog == nil {
		// Without a catalog no lookup would ever answer: nothing is asked,
		// and compaction waits for limits it cannot learn (R-COMPACT-23)
		// unless the agent names a threshold.
		return nil
	}
	if _, known := s.state.AI.ModelMetadata[model]; known {
		return nil
	}
	ev := protocol.Event{ID: protocol.DeriveID("metadata", s.id, model), Type: protocol.TypeModelMetaRequested,
		Payload: mustJSON(protocol.ModelMetadataRequested{Model: model})}
	return &ev
}
