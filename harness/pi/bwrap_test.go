package pi_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/a2-runtime/a2/harness/external/externaltest"
	"github.com/a2-runtime/a2/tools/sandbox"
)

// R-HARNESS-22: Pi works in the sandbox's working directory, with the
// sandbox's environment, in a bubblewrap sandbox as the node runs it: its
// write lands in the session's directory, its bash starts in /work (the
// directory as commands see it) without the server's secret, and sees
// nothing of the host's home.
func TestPiWorksInABubblewrapSandbox(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("A2_REQUIRE_BWRAP") != "" {
			t.Fatal("bwrap is not installed and A2_REQUIRE_BWRAP is set: apt-get install bubblewrap")
		}
		t.Skip("bwrap is not installed: apt-get install bubblewrap, then go test -run TestPiWorksInABubblewrapSandbox ./harness/pi")
	}
	t.Setenv("A2_TEST_SERVER_SECRET", "sk-do-not-leak")
	base := t.TempDir()
	pool := sandbox.NewPool(base, func(dir string) (sandbox.Sandbox, error) {
		return sandbox.NewBubblewrap(dir, sandbox.BubblewrapOptions{})
	})
	h := startPi(t, pool)
	f := newFixture(t, h, `{"default":{"toolCalls":[{"id":"w1","name":"write","input":{"path":"notes/a.txt","content":"inside"}}],
		"then":{"toolCalls":[{"id":"b1","name":"bash","input":{"command":"pwd; cat notes/a.txt; echo; echo secret=[$A2_TEST_SERVER_SECRET]; ls `+base+` 2>&1 | head -1"}}],
		"then":{"text":"done"}}}}`)
	st := f.turn("s1", "look around")
	p := externaltest.ToolParts(st)["b1"]
	var out string
	if p.State != "output-available" || json.Unmarshal(p.Output, &out) != nil {
		t.Fatalf("bash: %s %s %q", p.State, p.Output, p.ErrorText)
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 4 || lines[0] != "/work" || lines[1] != "inside" || lines[2] != "secret=[]" || !strings.Contains(lines[3], "No such file") {
		t.Fatalf("bash in the sandbox said %q: want /work, the written file, no secret, and the host's directories out of sight", out)
	}
	if got := readFile(t, pool, "s1", "notes/a.txt"); got != "inside" {
		t.Fatalf("the session's directory holds %q", got)
	}
}
