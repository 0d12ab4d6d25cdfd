package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAISDKConformance runs the AI SDK conformance suite
// (conformance/aisdk/conformance.mjs) against a node process in test mode:
// the real ai package (version 7) drives turns through the chat route with
// its DefaultChatTransport and checks A2's chunks and messages with its own
// readUIMessageStream, chunk schema, validateUIMessages and
// convertToModelMessages. .ci/run installs the package from the lockfile.
func TestAISDKConformance(t *testing.T) {
	dir, err := filepath.Abs("../../conformance/aisdk")
	if err != nil {
		t.Fatal(err)
	}
	nodeJS, err := exec.LookPath("node")
	if err != nil {
		t.Skip("Node.js is not installed: install it, then (cd conformance/aisdk && npm ci) to run the AI SDK conformance suite")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "ai", "package.json")); err != nil {
		t.Skip("the ai package is not installed: run (cd conformance/aisdk && npm ci) to run the AI SDK conformance suite (.ci/run does)")
	}
	p := startNodeProcess(t, nodeBinary(t), "", filepath.Join(dir, "script.json"), "--data", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeJS, "conformance.mjs", p.url)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		t.Log(line)
	}
	if err != nil {
		t.Fatalf("the conformance suite failed (%v): each FAIL line above names a difference", err)
	}
	if !strings.Contains(string(out), "conformance: all checks passed") {
		t.Fatal("the conformance suite did not report its result")
	}
}
