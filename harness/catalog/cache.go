package catalog

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// Cache defaults.
const (
	// DefaultTTL is how long a fetched catalog is used before it is
	// fetched again.
	DefaultTTL = time.Hour
	// DefaultTimeout bounds one fetch.
	DefaultTimeout = 5 * time.Second
	// DefaultErrorTTL is how long a failed fetch is remembered, so that a
	// catalog that is down costs one timeout per minute, not one per model
	// step.
	DefaultErrorTTL = time.Minute
)

// Cache keeps catalogs by URL (or file path) for a TTL. It is safe for
// concurrent use; concurrent lookups of one URL share a single fetch. The
// zero value is ready to use with the defaults.
//
// When a refresh fails, the catalog fetched before keeps being served
// (for ErrorTTL, then the refresh is tried again); with nothing fetched
// before, the error is returned, and remembered for ErrorTTL.
type Cache struct {
	// TTL is how long a catalog is fresh (DefaultTTL when zero).
	TTL time.Duration
	// Timeout bounds each fetch (DefaultTimeout when zero).
	Timeout time.Duration
	// ErrorTTL is how long a failure is remembered (DefaultErrorTTL when
	// zero).
	ErrorTTL time.Duration
	// HTTPClient fetches http(s) catalogs (http.DefaultClient when nil).
	HTTPClient *http.Client

	// now is the clock; tests set it.
	now func() time.Time

	mu      sync.Mutex
	entries map[string]*entry
}

type entry struct {
	catalog Catalog
	err     error
	expires time.Time
	loading chan struct{} // closed when the running fetch ends
}

func (c *Cache) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Get returns the catalog of source (see Fetch), from the cache while it
// is fresh.
func (c *Cache) Get(ctx context.Context, source string) (Catalog, error) {
	for {
		c.mu.Lock()
		if c.entries == nil {
			c.entries = map[string]*entry{}
		}
		e := c.entries[source]
		if e == nil {
			e = &entry{}
			c.entries[source] = e
		}
		if e.loading == nil && (e.catalog != nil || e.err != nil) && c.clock().Before(e.expires) {
			cat, err := e.catalog, e.err
			c.mu.Unlock()
			return cat, err
		}
		if wait := e.loading; wait != nil {
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		e.loading = make(chan struct{})
		c.mu.Unlock()
		return c.load(ctx, source, e)
	}
}

// load fetches source for the entry whose loading channel the caller
// created.
func (c *Cache) load(ctx context.Context, source string, e *entry) (Catalog, error) {
	fctx, cancel := context.WithTimeout(ctx, orDefault(c.Timeout, DefaultTimeout))
	client := c.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	cat, err := fetch(fctx, client, source)
	cancel()

	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	switch {
	case err == nil:
		e.catalog, e.err, e.expires = cat, nil, now.Add(orDefault(c.TTL, DefaultTTL))
	case ctx.Err() != nil:
		// The caller gave up: nothing is learnt about the catalog, and the
		// entry stays as it was for the next lookup.
	case e.catalog != nil:
		cat, err = e.catalog, nil
		e.expires = now.Add(orDefault(c.ErrorTTL, DefaultErrorTTL))
	default:
		e.err, e.expires = err, now.Add(orDefault(c.ErrorTTL, DefaultErrorTTL))
	}
	close(e.loading)
	e.loading = nil
	return cat, err
}

// Lookup returns a model of source's catalog. found is false for a model
// the catalog does not list.
func (c *Cache) Lookup(ctx context.Context, source, modelID string) (m Model, found bool, err error) {
	cat, err := c.Get(ctx, source)
	if err != nil {
		return Model{}, false, err
	}
	m, found = cat[modelID]
	return m, found, nil
}
