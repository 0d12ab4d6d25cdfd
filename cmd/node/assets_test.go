package main

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"
)

// A node serves the fold's WebAssembly build and Go's wasm_exec.js to
// browser clients (clients/assets), made from this source tree at the
// first request.
func TestTheNodeServesTheFold(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	n := startNode(t, config{})
	c := &http.Client{Timeout: 3 * time.Minute}
	for path, want := range map[string]string{"/fold.wasm": "application/wasm", "/wasm_exec.js": "text/javascript; charset=utf-8", "/client/index.js": "text/javascript; charset=utf-8"} {
		resp, err := c.Get(n.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != want || len(body) == 0 {
			t.Fatalf("GET %s: %d %q, %d bytes: %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body), body[:min(len(body), 200)])
		}
		if path == "/fold.wasm" && !bytes.HasPrefix(body, []byte("\x00asm")) {
			t.Fatalf("GET /fold.wasm is not a WebAssembly module")
		}
	}
}
