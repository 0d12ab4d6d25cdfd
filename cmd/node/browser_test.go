package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/internal/testutil"
)

// The playground and the React example in a real browser: headless
// Chromium (the system's) driven by playwright-core (clients/browser's
// lockfile) against a node process in test mode, the playground served by
// the node itself, which makes the fold's module from this source tree as
// go run ./cmd/node does. clients/browser/test/ holds the tests; they
// check what each page shows against the node's state after each action
// and keep screenshots in clients/browser/screenshots (A2_SCREENSHOTS).
// .ci/run installs Chromium and sets A2_REQUIRE_BROWSER, which turns the
// skips below into failures.
func TestThePlaygroundInABrowser(t *testing.T) {
	if why := os.Getenv("A2_BROWSER_TESTED"); why != "" {
		t.Skipf("A2_BROWSER_TESTED is set (%s): unset it to run this test again", why)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	nodeJS := testutil.NeedNode(t, "go test -run TestThePlaygroundInABrowser ./cmd/node")
	need := func(what, how string) {
		if os.Getenv("A2_REQUIRE_BROWSER") != "" {
			t.Fatalf("%s, and A2_REQUIRE_BROWSER is set: %s", what, how)
		}
		t.Skipf("%s: %s, then go test -run TestThePlaygroundInABrowser ./cmd/node", what, how)
	}
	chromium := os.Getenv("A2_CHROMIUM")
	if chromium == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				chromium = p
				break
			}
		}
	}
	if chromium == "" {
		need("Chromium is not installed", "apt-get install chromium (or set A2_CHROMIUM to a Chromium binary)")
	}
	if _, err := os.Stat(filepath.Join(root, "clients/browser/node_modules/playwright-core/package.json")); err != nil {
		need("playwright-core is not installed", "(cd clients/browser && npm ci)")
	}
	react := filepath.Join(root, "clients/react")
	if _, err := os.Stat(filepath.Join(react, "node_modules/esbuild/package.json")); err != nil {
		need("the React example's packages are not installed", "(cd clients/js && npm ci && npm run build) && (cd clients/react && npm ci)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	// The React example, bundled from its sources as they are now.
	build := exec.CommandContext(ctx, "npm", "run", "--silent", "build:example")
	build.Dir = react
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the React example (npm run build:example in clients/react): %v\n%s", err, out)
	}

	p := startNodeProcess(t, nodeBinary(t), "", filepath.Join(root, "clients/browser/script.json"), "--data", t.TempDir(),
		"--config", filepath.Join(root, "clients/browser/agents.yaml"))
	// The fold's module is made at the first request (from the build
	// cache, or about 25 s on a cold one); wait for it here, not in a test.
	getCtx, getCancel := context.WithTimeout(ctx, 4*time.Minute)
	req, _ := http.NewRequestWithContext(getCtx, http.MethodGet, p.url+"/fold.wasm", nil)
	resp, err := http.DefaultClient.Do(req)
	getCancel()
	if err != nil {
		t.Fatalf("GET /fold.wasm: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /fold.wasm: %s", resp.Status)
	}

	// The React example's page beside the node: a server on loopback that
	// serves clients/react/example at /example/ and passes everything else
	// to the node, so the page and the API share an origin.
	nodeURL, _ := url.Parse(p.url)
	mux := http.NewServeMux()
	mux.Handle("/example/", http.StripPrefix("/example/", http.FileServer(http.Dir(filepath.Join(react, "example")))))
	mux.Handle("/", httputil.NewSingleHostReverseProxy(nodeURL))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	front := &http.Server{Handler: mux}
	go func() { _ = front.Serve(ln) }()
	t.Cleanup(func() { _ = front.Close() })

	shots := os.Getenv("A2_SCREENSHOTS")
	if shots == "" {
		shots = filepath.Join(root, "clients/browser/screenshots")
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	// This run's screenshots only: the last run's are removed.
	old, _ := filepath.Glob(filepath.Join(shots, "*.png"))
	for _, f := range old {
		_ = os.Remove(f)
	}
	cmd := exec.CommandContext(ctx, nodeJS, "--test", "--test-force-exit", "--test-concurrency=1", "--test-reporter=spec", "test/")
	cmd.Dir = filepath.Join(root, "clients/browser")
	cmd.Env = append(os.Environ(), "A2_URL="+p.url, "A2_FRONT_URL=http://"+ln.Addr().String(), "A2_CHROMIUM="+chromium, "A2_SCREENSHOTS="+shots)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	for _, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		t.Log(line)
	}
	t.Logf("screenshots: %s", shots)
	if err != nil {
		t.Fatalf("the browser tests failed (%v): see above, and the screenshots", err)
	}
}
