package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/exp/teatest/v2"

	"github.com/a2-runtime/a2/client"
)

// tuiScript drives the terminal tests: a held answer (gate "hold") to
// steer, queue behind, pause and stop; a failure to retry.
const tuiScript = `{"replies":[
	{"match":"hold","reasoning":"Thinking it over.","text":"Held: the rest waits for its gate","gate":"hold"},
	{"match":"steering","text":"Steered, as asked."},
	{"match":"flaky","text":"Partial","error":"provider overloaded"},
	{"match":"flaky","text":"Recovered after the retry."},
	{"match":"queued","text":"The queued one, answered."},
	{"match":"again","text":"Parked until released","gate":"again"},
	{"match":"beta edited","text":"Beta, as edited."}
],"default":{"text":"A plain answer."}}`

var ansiRE = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

// screen is the latest frame a tuiModel rendered, without styles.
type screen struct{ v atomic.Pointer[string] }

func (s *screen) set(v string) { v = ansiRE.ReplaceAllString(v, ""); s.v.Store(&v) }
func (s *screen) get() string {
	if p := s.v.Load(); p != nil {
		return *p
	}
	return ""
}

// waitScreen waits (bounded: 10 s) until the screen contains every want.
func waitScreen(t *testing.T, get func() string, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := get()
		missing := ""
		for _, w := range want {
			if !strings.Contains(s, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the screen never showed %q; it shows:\n%s", missing, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The terminal interface, driven by Bubble Tea's test driver against a
// node in test mode: send, queue, steer, pause, resume, stop and retry,
// each acknowledged with its outcome; the conversation shown whole.
func TestTUI(t *testing.T) {
	dir := t.TempDir()
	scriptFile := filepath.Join(dir, "script.json")
	if err := os.WriteFile(scriptFile, []byte(tuiScript), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, config{script: scriptFile})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.New(n.url, defaultAgent, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Open(ctx, "tui-1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var scr screen
	m := newTUI(ctx, s, n.url)
	m.viewed = scr.set
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(100, 40))
	defer func() { _ = tm.Quit() }()
	line := func(text string) {
		tm.Type(text)
		tm.Send(tea.KeyPressMsg{Code: tea.KeyEnter})
	}
	release := func(gate string) {
		resp, err := http.Post(n.url+"/v1/test/gates/"+gate, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	line("hello there")
	waitScreen(t, scr.get, "you", "hello there", "A plain answer.", "send: applied", "idle")

	line("hold on")
	waitScreen(t, scr.get, "Held:", "streaming") // the gate holds the rest
	waitScreen(t, scr.get, "▸ thinking: Thinking it over.")
	tm.Send(tea.KeyPressMsg{Code: 'r', Mod: tea.ModCtrl})
	waitScreen(t, scr.get, "thinking: Thinking it over.")
	line("/queue queued message")
	waitScreen(t, scr.get, "queued (1)", "1. queued message", "queue: applied")
	line("/steer a steering note")
	waitScreen(t, scr.get, "steer: applied")
	line("/stop")
	waitScreen(t, scr.get, "stop: applied")
	// The queued message and the steer run after the stopped turn.
	waitScreen(t, scr.get, "Steered, as asked.", "The queued one, answered.")

	line("/pause")
	waitScreen(t, scr.get, "pause after-turn: applied")
	line("queued while paused")
	waitScreen(t, scr.get, "queued (1), paused")
	line("/resume")
	waitScreen(t, scr.get, "resume: applied", "queued while paused")

	// The inbox from the keyboard, behind a held answer: move, edit,
	// remove; what is left runs once the turn is stopped.
	line("hold again")
	waitScreen(t, scr.get, "Parked", "streaming")
	line("/queue alpha")
	waitScreen(t, scr.get, "1. alpha")
	line("/queue beta")
	waitScreen(t, scr.get, "queued (2)", "2. beta")
	key := func(k tea.KeyPressMsg) { tm.Send(k) }
	key(tea.KeyPressMsg{Code: tea.KeyTab})
	waitScreen(t, scr.get, "↑↓ select")
	key(tea.KeyPressMsg{Code: tea.KeyDown})
	tm.Type("K")
	waitScreen(t, scr.get, "1. beta", "2. alpha", "move: applied")
	tm.Type("e") // beta, the first now, into the input line
	waitScreen(t, scr.get, "editing the queued message")
	line(" edited")
	waitScreen(t, scr.get, "1. beta edited", "edit: applied")
	key(tea.KeyPressMsg{Code: tea.KeyTab})
	key(tea.KeyPressMsg{Code: tea.KeyDown})
	tm.Type("d") // alpha
	waitScreen(t, scr.get, "remove: applied", "queued (1)")
	key(tea.KeyPressMsg{Code: tea.KeyEscape})
	line("/stop")
	waitScreen(t, scr.get, "Beta, as edited.")
	for _, m := range s.State().Messages {
		if messageText(m.Parts) == "alpha" {
			t.Fatal("the removed message ran")
		}
	}

	line("flaky please")
	waitScreen(t, scr.get, "the answer failed:", "provider overloaded", "/retry runs it again")
	if strings.Contains(scr.get(), "script:") {
		t.Fatalf("a Go package prefix reached the screen:\n%s", scr.get())
	}
	line("/retry")
	waitScreen(t, scr.get, "retry: applied", "Recovered after the retry.")

	line("/frobnicate")
	waitScreen(t, scr.get, "unknown command /frobnicate")
	release("hold") // nothing holds it any more; the release is harmless
}

// The real binary in a terminal (tmux): the conversation, the inbox and
// acknowledgements drawn on the screen, and a reattach that shows the
// whole conversation, the user's messages included.
func TestChatInATerminal(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (apt-get install tmux); .ci/run installs it. Run: go test ./cmd/node -run TestChatInATerminal")
	}
	dir := t.TempDir()
	scriptFile := filepath.Join(dir, "script.json")
	if err := os.WriteFile(scriptFile, []byte(tuiScript), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := nodeBinary(t)
	node := startClusterProc(t, "node", "", "--data", filepath.Join(dir, "data"), "--script", scriptFile)
	sock := filepath.Join(dir, "tmux.sock")
	tmux := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("tmux", append([]string{"-S", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", sock, "kill-server").Run() })
	start := func(name string) {
		tmux("new-session", "-d", "-s", name, "-x", "100", "-y", "32", bin+" chat --url "+node.url+" --session term-1")
	}
	pane := func(name string) func() string {
		return func() string { return tmux("capture-pane", "-p", "-t", name) }
	}
	// A session of its own keeps the tmux server up while the chats come
	// and go (the server exits with its last session).
	tmux("new-session", "-d", "-s", "keep", "sleep 600")
	start("a")
	waitScreen(t, pane("a"), "connected", "session term-1")
	tmux("send-keys", "-t", "a", "hello there", "Enter")
	waitScreen(t, pane("a"), "hello there", "A plain answer.", "send: applied")
	tmux("send-keys", "-t", "a", "hold on", "Enter")
	waitScreen(t, pane("a"), "Held:")
	tmux("send-keys", "-t", "a", "/queue queued message", "Enter")
	waitScreen(t, pane("a"), "queued (1)", "1. queued message")
	tmux("send-keys", "-t", "a", "/stop", "Enter")
	waitScreen(t, pane("a"), "stop: applied", "The queued one, answered.")
	tmux("send-keys", "-t", "a", "/quit", "Enter")
	deadline := time.Now().Add(10 * time.Second)
	for exec.Command("tmux", "-S", sock, "has-session", "-t", "a").Run() == nil {
		if time.Now().After(deadline) {
			t.Fatal("chat did not quit on /quit")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Reattach: the whole conversation, the user's side too.
	start("b")
	got := waitScreen(t, pane("b"), "hello there", "A plain answer.", "hold on", "queued message", "The queued one, answered.")
	if strings.Count(got, "A plain answer.") != 1 {
		t.Fatalf("the reattached screen repeats an answer:\n%s", got)
	}
}
