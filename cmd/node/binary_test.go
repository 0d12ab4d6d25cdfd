package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The node binary, built once for every multi-process test of the package
// (a build costs seconds; the cache makes the second one cheap, but not
// free).
var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
	binaryDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binaryDir != "" {
		_ = os.RemoveAll(binaryDir)
	}
	os.Exit(code)
}

// nodeBinary returns the path of the node binary, building it on first use.
func nodeBinary(t testing.TB) string {
	t.Helper()
	binaryOnce.Do(func() {
		binaryDir, binaryErr = os.MkdirTemp("", "a2-node-bin-")
		if binaryErr != nil {
			return
		}
		binaryPath = filepath.Join(binaryDir, "node")
		build := exec.Command("go", "build", "-o", binaryPath, ".")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		binaryErr = build.Run()
	})
	if binaryErr != nil {
		t.Fatalf("building the node binary: %v", binaryErr)
	}
	return binaryPath
}
