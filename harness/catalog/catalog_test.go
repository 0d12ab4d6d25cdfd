package catalog

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// wait bounds every wait of these tests; the tests never assert speed.
const wait = 10 * time.Second

func fixture(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "models.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var wantModels = Catalog{
	"anthropic/claude-sonnet-4.5":   {ID: "anthropic/claude-sonnet-4.5", Type: "language", ContextWindow: 200000, MaxOutputTokens: 64000},
	"openai/gpt-5-mini":             {ID: "openai/gpt-5-mini", Type: "language", ContextWindow: 400000, MaxOutputTokens: 128000},
	"openai/text-embedding-3-small": {ID: "openai/text-embedding-3-small", Type: "embedding", ContextWindow: 8192},
	"meta/llama-4-scout":            {ID: "meta/llama-4-scout", Type: "language", ContextWindow: 131072, MaxOutputTokens: 8192},
}

func TestParse(t *testing.T) {
	c, err := Parse(fixture(t))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, wantModels) {
		t.Fatalf("got %+v", c)
	}
	openRouter := `{"data":[{"id":"x/y","context_length":32768,"top_provider":{"max_completion_tokens":4096}},
		{"id":"x/z","top_provider":{"context_length":1000,"max_completion_tokens":null}},{"id":""}]}`
	c, err = Parse([]byte(openRouter))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Catalog{"x/y": {ID: "x/y", ContextWindow: 32768, MaxOutputTokens: 4096}, "x/z": {ID: "x/z", ContextWindow: 1000}}); !reflect.DeepEqual(c, want) {
		t.Fatalf("OpenRouter shape: %+v", c)
	}
	for _, bad := range []string{`[]`, `{"object":"list"}`, `not json`, ``} {
		if _, err := Parse([]byte(bad)); !errors.Is(err, ErrFormat) {
			t.Errorf("Parse(%q) = %v, want ErrFormat", bad, err)
		}
	}
}

// server serves the fixture, counting requests; fail makes it answer 500.
type server struct {
	*httptest.Server
	hits atomic.Int32
	fail atomic.Bool
}

func newServer(t *testing.T) *server {
	t.Helper()
	body := fixture(t)
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if r.Header.Get("Accept") != "application/json" {
			t.Errorf("Accept %q", r.Header.Get("Accept"))
		}
		if s.fail.Load() {
			http.Error(w, `{"error":"down"}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func TestFetchHTTPAndFile(t *testing.T) {
	srv := newServer(t)
	c, err := Fetch(context.Background(), srv.URL+"/v1/models")
	if err != nil || !reflect.DeepEqual(c, wantModels) {
		t.Fatalf("HTTP: %+v, %v", c, err)
	}
	abs, err := filepath.Abs(filepath.Join("testdata", "models.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{filepath.Join("testdata", "models.json"), abs, "file://" + filepath.ToSlash(abs)} {
		c, err := Fetch(context.Background(), src)
		if err != nil || !reflect.DeepEqual(c, wantModels) {
			t.Fatalf("%s: %+v, %v", src, c, err)
		}
	}
	srv.fail.Store(true)
	var se *StatusError
	if _, err := Fetch(context.Background(), srv.URL); !errors.As(err, &se) || se.StatusCode != 500 {
		t.Fatalf("status: %v", err)
	}
	if _, err := Fetch(context.Background(), "ftp://example.com/models.json"); err == nil {
		t.Fatal("an unsupported scheme must fail")
	}
	if _, err := Fetch(context.Background(), filepath.Join("testdata", "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func lookup(t *testing.T, c *Cache, src, id string) Model {
	t.Helper()
	m, found, err := c.Lookup(context.Background(), src, id)
	if err != nil || !found {
		t.Fatalf("Lookup(%s): %v, found %v", id, err, found)
	}
	return m
}

func TestCacheTTL(t *testing.T) {
	srv := newServer(t)
	clk := newClock()
	c := &Cache{now: clk.now} // the defaults: a 1 h TTL
	m := lookup(t, c, srv.URL, "anthropic/claude-sonnet-4.5")
	if m.ContextWindow != 200000 || m.MaxOutputTokens != 64000 {
		t.Fatalf("%+v", m)
	}
	lookup(t, c, srv.URL, "openai/gpt-5-mini")
	clk.advance(59 * time.Minute)
	lookup(t, c, srv.URL, "openai/gpt-5-mini")
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("%d fetches within the TTL", n)
	}
	clk.advance(2 * time.Minute)
	lookup(t, c, srv.URL, "openai/gpt-5-mini")
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("%d fetches after the TTL", n)
	}
	if _, found, err := c.Lookup(context.Background(), srv.URL, "nobody/nothing"); found || err != nil {
		t.Fatalf("unknown model: found %v, %v", found, err)
	}
}

func TestCacheKeyedBySource(t *testing.T) {
	a, b := newServer(t), newServer(t)
	c := &Cache{now: newClock().now}
	lookup(t, c, a.URL, "openai/gpt-5-mini")
	lookup(t, c, b.URL, "openai/gpt-5-mini")
	lookup(t, c, a.URL+"/other", "openai/gpt-5-mini")
	if a.hits.Load() != 2 || b.hits.Load() != 1 {
		t.Fatalf("hits a=%d b=%d", a.hits.Load(), b.hits.Load())
	}
	lookup(t, c, filepath.Join("testdata", "models.json"), "meta/llama-4-scout")
}

func TestCacheServesTheLastCatalogWhenARefreshFails(t *testing.T) {
	srv := newServer(t)
	clk := newClock()
	c := &Cache{now: clk.now, TTL: 10 * time.Minute, ErrorTTL: time.Minute}
	lookup(t, c, srv.URL, "openai/gpt-5-mini")
	srv.fail.Store(true)
	clk.advance(11 * time.Minute)
	if m := lookup(t, c, srv.URL, "openai/gpt-5-mini"); m.ContextWindow != 400000 {
		t.Fatalf("%+v", m)
	}
	if srv.hits.Load() != 2 {
		t.Fatalf("the refresh was not tried: %d", srv.hits.Load())
	}
	lookup(t, c, srv.URL, "openai/gpt-5-mini")
	if srv.hits.Load() != 2 {
		t.Fatal("a failed refresh is retried only after ErrorTTL")
	}
	srv.fail.Store(false)
	clk.advance(2 * time.Minute)
	lookup(t, c, srv.URL, "openai/gpt-5-mini")
	if srv.hits.Load() != 3 {
		t.Fatalf("hits %d", srv.hits.Load())
	}
}

func TestCacheRemembersAFailureForErrorTTL(t *testing.T) {
	srv := newServer(t)
	srv.fail.Store(true)
	clk := newClock()
	c := &Cache{now: clk.now}
	var se *StatusError
	for i := 0; i < 3; i++ {
		if _, _, err := c.Lookup(context.Background(), srv.URL, "openai/gpt-5-mini"); !errors.As(err, &se) {
			t.Fatalf("want a StatusError, got %v", err)
		}
	}
	if srv.hits.Load() != 1 {
		t.Fatalf("hits %d", srv.hits.Load())
	}
	srv.fail.Store(false)
	clk.advance(DefaultErrorTTL + time.Second)
	lookup(t, c, srv.URL, "openai/gpt-5-mini")
	if srv.hits.Load() != 2 {
		t.Fatalf("hits %d", srv.hits.Load())
	}
}

// A catalog that does not answer costs the lookup its timeout, not more.
func TestCacheTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release) // before srv.Close, which waits for the handler
	c := &Cache{now: newClock().now, Timeout: 20 * time.Millisecond}
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Lookup(context.Background(), srv.URL, "openai/gpt-5-mini")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want a deadline error, got %v", err)
		}
	case <-time.After(wait):
		t.Fatal("the lookup did not time out")
	}
}

// A caller that gives up teaches the cache nothing: the next lookup
// fetches.
func TestCacheCallerCancellationIsNotRemembered(t *testing.T) {
	arrived := make(chan struct{}, 1)
	block := atomic.Bool{}
	block.Store(true)
	body := fixture(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if block.Load() {
			arrived <- struct{}{}
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	defer close(release)
	c := &Cache{now: newClock().now}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, srv.URL)
		done <- err
	}()
	select {
	case <-arrived:
	case <-time.After(wait):
		t.Fatal("no request")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("want context.Canceled, got %v", err)
		}
	case <-time.After(wait):
		t.Fatal("Get did not return after cancellation")
	}
	block.Store(false)
	lookup(t, c, srv.URL, "openai/gpt-5-mini")
}

// Concurrent lookups of one source share one fetch (run with -race).
func TestCacheConcurrentLookups(t *testing.T) {
	srv := newServer(t)
	c := &Cache{now: newClock().now}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, found, err := c.Lookup(context.Background(), srv.URL, "anthropic/claude-sonnet-4.5")
			if err == nil && (!found || m.MaxOutputTokens != 64000) {
				err = errors.New("wrong model")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("%d fetches for one source", n)
	}
}
