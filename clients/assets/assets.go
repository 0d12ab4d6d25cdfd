// Package assets serves what a browser client of A2 loads from a node: the
// fold's WebAssembly build (clients/wasm, GET /fold.wasm), Go's
// wasm_exec.js, which runs it (GET /wasm_exec.js), the JavaScript
// client's modules (clients/js, GET /client/index.js), and the playground
// (clients/playground, GET / and /playground/). docs/clients.md.
//
// A binary built with the tag a2embed carries both (go generate
// ./clients/assets writes them first). Any other build makes them from
// the source tree it was built from, when that tree and a Go toolchain are
// there (go run ./cmd/node): the module is built once per version of the
// fold's sources, in the background from Start, and kept in a cache
// directory, so a later start serves it at once.
package assets

//go:generate sh -c "GOOS=js GOARCH=wasm go build -trimpath -ldflags='-s -w' -o fold.wasm ../wasm && cp \"$(go env GOROOT)/lib/wasm/wasm_exec.js\" wasm_exec.js"

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	jsclient "github.com/a2-runtime/a2/clients/js"
	"github.com/a2-runtime/a2/clients/playground"
)

// Options configure the assets.
type Options struct {
	// CacheDir keeps built modules (default: a2 in the user's cache
	// directory).
	CacheDir string
	// Logger receives the build's progress.
	Logger *slog.Logger
	// Go is the go command (default: go on PATH).
	Go string
}

// Assets serves the fold's module, wasm_exec.js, the client's modules and
// the playground.
type Assets struct {
	o    Options
	once sync.Once
	done chan struct{}
	wasm []byte
	exec []byte
	err  error
}

// New makes the assets; nothing is built until Start or a request.
func New(o Options) *Assets {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Assets{o: o, done: make(chan struct{})}
}

// Start makes the module ready in the background: embedded, cached, or
// built from the source tree.
func (a *Assets) Start() {
	a.once.Do(func() { go a.load() })
}

func (a *Assets) load() {
	defer close(a.done)
	if embedded != nil {
		a.wasm, a.exec = embedded.wasm, embedded.exec
		return
	}
	start := time.Now()
	a.wasm, a.exec, a.err = a.build()
	if a.err != nil {
		a.o.Logger.Warn("the fold's WebAssembly build is not available: browser clients cannot load it from this node", "err", a.err)
		return
	}
	a.o.Logger.Info("the fold's WebAssembly build is ready", "bytes", len(a.wasm), "took", time.Since(start).Round(time.Millisecond))
}

// ErrNoSource is the error of a binary built without the module and away
// from the source tree it was built from.
var ErrNoSource = errors.New("assets: this binary carries no fold module (build it with -tags a2embed after go generate ./clients/assets) and its source tree is not here to build one")

// build makes the module from the source tree, or takes it from the cache.
func (a *Assets) build() (wasm, wasmExec []byte, err error) {
	_, file, _, ok := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if !ok {
		return nil, nil, ErrNoSource
	}
	if _, err := os.Stat(filepath.Join(root, "clients", "wasm", "main.go")); err != nil {
		return nil, nil, ErrNoSource
	}
	goCmd := a.o.Go
	if goCmd == "" {
		if goCmd, err = exec.LookPath("go"); err != nil {
			return nil, nil, fmt.Errorf("assets: building the fold's module needs the go command: %w", err)
		}
	}
	goroot, err := exec.Command(goCmd, "env", "GOROOT").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("assets: go env GOROOT: %w", err)
	}
	if wasmExec, err = os.ReadFile(filepath.Join(strings.TrimSpace(string(goroot)), "lib", "wasm", "wasm_exec.js")); err != nil {
		return nil, nil, fmt.Errorf("assets: Go's wasm_exec.js: %w", err)
	}
	version, err := sourceVersion(root, goCmd)
	if err != nil {
		return nil, nil, err
	}
	dir := a.o.CacheDir
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return nil, nil, fmt.Errorf("assets: a cache directory: %w", err)
		}
		dir = filepath.Join(base, "a2")
	}
	cached := filepath.Join(dir, "fold-"+version+".wasm")
	if wasm, err = os.ReadFile(cached); err == nil && bytes.HasPrefix(wasm, []byte("\x00asm")) {
		return wasm, wasmExec, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("assets: %w", err)
	}
	tmp := cached + ".tmp" + fmt.Sprint(os.Getpid())
	cmd := exec.Command(goCmd, "build", "-trimpath", "-ldflags=-s -w", "-o", tmp, "./clients/wasm")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=js", "GOARCH=wasm")
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return nil, nil, fmt.Errorf("assets: GOOS=js GOARCH=wasm go build ./clients/wasm: %v: %s", err, out)
	}
	if err := os.Rename(tmp, cached); err != nil {
		return nil, nil, fmt.Errorf("assets: %w", err)
	}
	wasm, err = os.ReadFile(cached)
	return wasm, wasmExec, err
}

// sourceVersion names the fold's sources: a hash of the Go files of
// protocol/ and clients/wasm (tests left out), go.mod, go.sum and the Go
// version.
func sourceVersion(root, goCmd string) (string, error) {
	h := sha256.New()
	v, err := exec.Command(goCmd, "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("assets: go env GOVERSION: %w", err)
	}
	h.Write(v)
	var files []string
	for _, dir := range []string{"protocol", filepath.Join("clients", "wasm")} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("assets: %w", err)
		}
	}
	files = append(files, filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum"))
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("assets: %w", err)
		}
		rel, _ := filepath.Rel(root, f)
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// ServeHTTP serves GET and HEAD of /fold.wasm and /wasm_exec.js, waiting
// for the module while it is made (up to the request's end; 503 when it
// cannot be had, saying why), of the JavaScript client's modules at
// /client/ (clients/js/src), and of the playground: its page at / and its
// script and style at /playground/ (clients/playground).
func (a *Assets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == "/" {
		// The playground's page: it loads only this node's files.
		w.Header().Set("Content-Security-Policy", PlaygroundCSP)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		serveFile(w, r, playground.Files, "index.html", "text/html; charset=utf-8")
		return
	}
	if name, ok := strings.CutPrefix(r.URL.Path, "/playground/"); ok {
		types := map[string]string{"playground.js": "text/javascript; charset=utf-8", "playground.css": "text/css; charset=utf-8"}
		if ct, ok := types[name]; ok {
			serveFile(w, r, playground.Files, name, ct)
		} else {
			http.NotFound(w, r)
		}
		return
	}
	if name, ok := strings.CutPrefix(r.URL.Path, "/client/"); ok {
		// The JavaScript client's modules, as they are in clients/js/src.
		if strings.Contains(name, "/") || !strings.HasSuffix(name, ".js") {
			http.NotFound(w, r)
			return
		}
		serveFile(w, r, jsclient.Sources, "src/"+name, "text/javascript; charset=utf-8")
		return
	}
	a.Start()
	select {
	case <-a.done:
	case <-r.Context().Done():
		return
	}
	if a.err != nil {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, a.err.Error())
		return
	}
	var body []byte
	switch r.URL.Path {
	case "/fold.wasm":
		body = a.wasm
		w.Header().Set("Content-Type", "application/wasm")
	case "/wasm_exec.js":
		body = a.exec
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

// PlaygroundCSP is the playground page's Content-Security-Policy: its
// scripts, styles and requests go to this node only, and WebAssembly may
// compile (the fold).
const PlaygroundCSP = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// serveFile serves name of fsys, 404 when it is not there.
func serveFile(w http.ResponseWriter, r *http.Request, fsys fs.FS, name, contentType string) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
}

// embeddedFiles is the module and wasm_exec.js a build with the tag
// a2embed carries (embed.go); nil otherwise.
type embeddedFiles struct{ wasm, exec []byte }

var embedded *embeddedFiles

// Wait blocks until the module is ready or cannot be had, or ctx ends.
func (a *Assets) Wait(ctx context.Context) error {
	a.Start()
	select {
	case <-a.done:
		return a.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
