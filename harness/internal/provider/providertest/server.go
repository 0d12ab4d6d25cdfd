package providertest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Captured is what a test server saw of the last request.
type Captured struct {
	mu     sync.Mutex
	Host   string
	Path   string
	Header http.Header
	Body   []byte
}

// Record keeps r's host, path, headers and body.
func (c *Captured) Record(r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Host, c.Path, c.Header, c.Body = r.Host, r.URL.Path, r.Header.Clone(), body
}

// BodyJSON decodes the recorded body, failing t when it is not JSON.
func (c *Captured) BodyJSON(t testing.TB) map[string]any {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var m map[string]any
	if err := json.Unmarshal(c.Body, &m); err != nil {
		t.Fatalf("request body is not JSON: %v\n%s", err, c.Body)
	}
	return m
}

// Fixture reads testdata/name.
func Fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Replay serves the server-sent events fixture testdata/name event by
// event, flushing after each, so the client reads it across many network
// reads; it records each request.
func Replay(t testing.TB, name string) (*httptest.Server, *Captured) {
	t.Helper()
	raw := Fixture(t, name)
	c := &Captured{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.Record(r)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range Events(raw) {
			_, _ = w.Write(e)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, c
}

// MustJSON encodes v, failing t on an error.
func MustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
