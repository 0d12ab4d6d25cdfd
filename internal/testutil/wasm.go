package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// NeedNode returns Node.js's path, or skips the test where it is missing
// (fails with A2_REQUIRE_NODE set, as .ci/run sets it); run says how to
// run the test once it is installed.
func NeedNode(tb testing.TB, run string) string {
	tb.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("A2_REQUIRE_NODE") != "" {
			tb.Fatal("node is not installed and A2_REQUIRE_NODE is set")
		}
		tb.Skip("Node.js is not installed: install it, then " + run)
	}
	return node
}

// BuildFold builds the fold for the browser (clients/wasm, GOOS=js
// GOARCH=wasm) below a temporary directory, from the module's directory
// root; it returns the module and Go's wasm_exec.js, which loads it.
func BuildFold(tb testing.TB, root string) (wasm, wasmExec string) {
	tb.Helper()
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		tb.Fatal(err)
	}
	wasm = filepath.Join(tb.TempDir(), "fold.wasm")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", wasm, "./clients/wasm")
	build.Dir = root
	build.Env = append(os.Environ(), "GOOS=js", "GOARCH=wasm")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("GOOS=js GOARCH=wasm go build ./clients/wasm: %v\n%s", err, out)
	}
	return wasm, filepath.Join(strings.TrimSpace(string(goroot)), "lib", "wasm", "wasm_exec.js")
}
