package main

import "testing"

// The demonstration the README's run command shows must keep working.
func TestDemonstrationRuns(t *testing.T) {
	if err := run(true); err != nil {
		t.Fatal(err)
	}
}
