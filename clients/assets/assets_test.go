package assets

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The node serves the fold's module, built from the source tree once per
// version of its sources and kept in the cache: a second start serves the
// cached module without building it again. Other paths and methods are
// refused, and without a Go toolchain the module is 503 with the reason.
func TestTheFoldModuleIsBuiltOnceAndServed(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	// The real go command, each call of it logged.
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls.log")
	wrapper := filepath.Join(dir, "go")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\necho \"$1\" >> "+calls+"\nexec "+goCmd+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	get := func(a *Assets, method, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest(method, path, nil).WithContext(ctx))
		return rec
	}
	a := New(Options{CacheDir: cache, Go: wrapper})
	if err := a.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	rec := get(a, http.MethodGet, "/fold.wasm")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/wasm" || !bytes.HasPrefix(rec.Body.Bytes(), []byte("\x00asm")) {
		t.Fatalf("GET /fold.wasm: %d %q, %d bytes", rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len())
	}
	if rec := get(a, http.MethodGet, "/wasm_exec.js"); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "globalThis.Go") {
		t.Fatalf("GET /wasm_exec.js: %d, %d bytes", rec.Code, rec.Body.Len())
	}
	for _, tc := range []struct {
		method, path string
		code         int
	}{{http.MethodGet, "/other.wasm", 404}, {http.MethodPost, "/fold.wasm", 405}, {http.MethodHead, "/fold.wasm", 200}} {
		if rec := get(a, tc.method, tc.path); rec.Code != tc.code {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, rec.Code, tc.code)
		}
	}
	b, _ := os.ReadFile(calls)
	if n := strings.Count(string(b), "build\n"); n != 1 {
		t.Fatalf("the first start ran go build %d times, want 1:\n%s", n, b)
	}
	// A second start: from the cache.
	again := New(Options{CacheDir: cache, Go: wrapper})
	if err := again.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(calls)
	if n := strings.Count(string(b), "build\n"); n != 1 {
		t.Fatalf("the second start built again (%d builds in all), want the cached module", n)
	}
	if rec := get(again, http.MethodGet, "/fold.wasm"); rec.Code != http.StatusOK || rec.Body.Len() == 0 {
		t.Fatalf("the cached module: %d", rec.Code)
	}
	// Without a toolchain.
	none := New(Options{CacheDir: filepath.Join(dir, "other"), Go: filepath.Join(dir, "no-such-go")})
	rec = get(none, http.MethodGet, "/fold.wasm")
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(string(body), "go env") {
		t.Fatalf("without a toolchain: %d %q", rec.Code, body)
	}
}

// The JavaScript client's modules are served at /client/ as they are in
// clients/js/src, with no module build needed; anything else there is
// 404.
func TestTheClientsModulesAreServed(t *testing.T) {
	a := New(Options{CacheDir: t.TempDir(), Go: filepath.Join(t.TempDir(), "no-such-go")})
	for _, tc := range []struct {
		method, path string
		code         int
		says         string
	}{
		{http.MethodGet, "/client/index.js", 200, "createAgentClient"},
		{http.MethodGet, "/client/client.js", 200, "class Session"},
		{http.MethodGet, "/client/fold.js", 200, "loadFold"},
		{http.MethodHead, "/client/index.js", 200, ""},
		{http.MethodGet, "/client/nope.js", 404, ""},
		{http.MethodGet, "/client/embed.go", 404, ""},
		{http.MethodGet, "/client/../assets.go", 404, ""},
		{http.MethodGet, "/client/sub/index.js", 404, ""},
		{http.MethodGet, "/client/", 404, ""},
		{http.MethodPost, "/client/index.js", 405, ""},
	} {
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.says) {
			t.Errorf("%s %s: %d (%d bytes), want %d saying %q", tc.method, tc.path, rec.Code, rec.Body.Len(), tc.code, tc.says)
		}
		if tc.code == 200 && rec.Header().Get("Content-Type") != "text/javascript; charset=utf-8" {
			t.Errorf("%s: Content-Type %q", tc.path, rec.Header().Get("Content-Type"))
		}
	}
}

// The playground's page is served at / with a policy that keeps it to this
// node, and its script and style at /playground/; anything else there is
// 404, and only GET and HEAD are allowed.
func TestThePlaygroundIsServed(t *testing.T) {
	a := New(Options{CacheDir: t.TempDir(), Go: filepath.Join(t.TempDir(), "no-such-go")})
	for _, tc := range []struct {
		method, path string
		code         int
		says, ct     string
	}{
		{http.MethodGet, "/", 200, `src="/playground/playground.js"`, "text/html; charset=utf-8"},
		{http.MethodHead, "/", 200, "", "text/html; charset=utf-8"},
		{http.MethodGet, "/playground/playground.js", 200, `from "/client/index.js"`, "text/javascript; charset=utf-8"},
		{http.MethodGet, "/playground/playground.css", 200, "#messages", "text/css; charset=utf-8"},
		{http.MethodGet, "/playground/index.html", 404, "", ""},
		{http.MethodGet, "/playground/embed.go", 404, "", ""},
		{http.MethodGet, "/playground/../assets.go", 404, "", ""},
		{http.MethodGet, "/playground/", 404, "", ""},
		{http.MethodPost, "/", 405, "", ""},
		{http.MethodDelete, "/playground/playground.js", 405, "", ""},
	} {
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.says) {
			t.Errorf("%s %s: %d (%d bytes), want %d saying %q", tc.method, tc.path, rec.Code, rec.Body.Len(), tc.code, tc.says)
		}
		if tc.ct != "" && rec.Header().Get("Content-Type") != tc.ct {
			t.Errorf("%s: Content-Type %q, want %q", tc.path, rec.Header().Get("Content-Type"), tc.ct)
		}
		if tc.path == "/" && tc.code == 200 && rec.Header().Get("Content-Security-Policy") != PlaygroundCSP {
			t.Errorf("/: Content-Security-Policy %q", rec.Header().Get("Content-Security-Policy"))
		}
	}
}
