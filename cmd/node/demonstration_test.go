package main

import "testing"

// The demonstration (go run ./cmd/node demo) must keep working.
func TestDemonstrationRuns(t *testing.T) {
	if err := runDemonstration(true); err != nil {
		t.Fatal(err)
	}
}
