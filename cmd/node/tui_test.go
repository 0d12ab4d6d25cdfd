package main

import (
	"context"
	"fmt"
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
	"github.com/a2-runtime/a2/protocol"
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
	{"match":"beta edited","text":"Beta, as edited."},
	{"match":"the last of all","text":"The very last answer."},
	{"match":"pausable","text":"Halfway through, then the rest","gate":"pausable"},
	{"match":"pausable","text":"Second attempt, from its start."}
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

// tuiTest is a terminal interface driven by Bubble Tea's test driver
// against a node in test mode (tuiScript), in a terminal of its own size.
type tuiTest struct {
	t   *testing.T
	tm  *teatest.TestModel
	scr screen
	s   *client.Session
	url string
}

func startTUI(t *testing.T, session string, width, height int) *tuiTest {
	t.Helper()
	dir := t.TempDir()
	scriptFile := filepath.Join(dir, "script.json")
	if err := os.WriteFile(scriptFile, []byte(tuiScript), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, config{script: scriptFile})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := client.New(n.url, defaultAgent, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Open(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	tt := &tuiTest{t: t, s: s, url: n.url}
	m := newTUI(ctx, s, n.url)
	m.viewed = tt.scr.set
	tt.tm = teatest.NewTestModel(t, m, teatest.WithInitialTermSize(width, height))
	t.Cleanup(func() { _ = tt.tm.Quit() })
	return tt
}

// line types text and Enter.
func (tt *tuiTest) line(text string) {
	tt.tm.Type(text)
	tt.tm.Send(tea.KeyPressMsg{Code: tea.KeyEnter})
}

// wait waits until the screen shows every want.
func (tt *tuiTest) wait(want ...string) string {
	tt.t.Helper()
	return waitScreen(tt.t, tt.scr.get, want...)
}

// waitGone waits (bounded: 20 s) until the screen no longer shows gone.
func (tt *tuiTest) waitGone(gone string) {
	tt.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Contains(tt.scr.get(), gone) {
		if time.Now().After(deadline) {
			tt.t.Fatalf("the screen still shows %q:\n%s", gone, tt.scr.get())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// release opens a gate of the script model.
func (tt *tuiTest) release(gate string) {
	tt.t.Helper()
	resp, err := http.Post(tt.url+"/v1/test/gates/"+gate, "application/json", nil)
	if err != nil {
		tt.t.Fatal(err)
	}
	resp.Body.Close()
}

// The terminal interface, driven by Bubble Tea's test driver against a
// node in test mode: send, queue, steer, pause, resume, stop and retry,
// each acknowledged with its outcome; the conversation shown whole.
func TestTUI(t *testing.T) {
	tt := startTUI(t, "tui-1", 100, 40)
	tm, scr, s, line, release := tt.tm, &tt.scr, tt.s, tt.line, tt.release

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
	if got := waitScreen(t, scr.get, "1. beta edited", "edit: applied"); strings.Contains(got, "editing the queued message") {
		t.Fatalf("the editing hint stays after the edit:\n%s", got)
	}
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

// The conversation follows every turn to its end, however the lines under
// it grow (the inbox while a turn runs, the help) or shrink, until the
// user scrolls up; notes (acknowledgements) leave the screen after a while.
func TestTUIFollowsEveryTurn(t *testing.T) {
	tt := startTUI(t, "tui-follow", 80, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	turns := func(n int) {
		t.Helper()
		if err := tt.s.Wait(ctx, func(st *protocol.AIState) bool {
			return st.Active == nil && len(st.Inbox.Items) == 0 && len(st.Messages) == 2*n
		}); err != nil {
			t.Fatalf("waiting for %d turns: %v", n, err)
		}
	}
	// More conversation than the screen holds.
	for i := 1; i <= 3; i++ {
		tt.line(fmt.Sprintf("message %d", i))
		turns(i)
	}
	tt.wait("message 3", "A plain answer.", "idle")
	// A message queued behind a held turn grows the lines under the
	// conversation; the turns that follow still show to their end.
	tt.line("hold on")
	tt.wait("Held:", "streaming")
	tt.line("/queue queued message")
	tt.wait("queued (1)")
	tt.release("hold")
	turns(5)
	tt.wait("The queued one, answered.", "idle")
	// So does the help.
	tt.line("/help")
	tt.wait("tab: the inbox")
	tt.line("the last of all")
	tt.wait("The very last answer.", "idle")
	// Scrolled up, the view stays where the user put it; back at the end,
	// it follows again.
	tt.tm.Send(tea.KeyPressMsg{Code: tea.KeyPgUp})
	tt.tm.Send(tea.KeyPressMsg{Code: tea.KeyPgUp})
	tt.waitGone("The very last answer.")
	tt.tm.Send(tea.KeyPressMsg{Code: tea.KeyPgDown})
	tt.tm.Send(tea.KeyPressMsg{Code: tea.KeyPgDown})
	tt.tm.Send(tea.KeyPressMsg{Code: tea.KeyPgDown})
	tt.wait("The very last answer.")
	tt.line("one more")
	turns(7)
	tt.wait("one more", "idle")
	// Acknowledgements leave the screen once read.
	tt.wait("send: applied")
	tt.waitGone("send: applied")
}

// After the inbox's last message is sent now (s), the keys are the input
// line's again: the next line typed is a command, not a message.
func TestTUIInboxGivesTheKeysBack(t *testing.T) {
	tt := startTUI(t, "tui-inbox", 100, 40)
	tt.line("hold on")
	tt.wait("Held:", "streaming")
	tt.line("/queue queued message")
	tt.wait("queued (1)", "1. queued message")
	tt.tm.Send(tea.KeyPressMsg{Code: tea.KeyTab})
	tt.wait("↑↓ select")
	tt.tm.Type("s")
	tt.wait("send now: applied")
	tt.waitGone("queued (")
	tt.line("/help")
	tt.wait("tab: the inbox (")
	for _, m := range tt.s.State().Messages {
		if strings.Contains(messageText(m.Parts), "help") {
			t.Fatalf("a keystroke was swallowed: the chat sent %q", messageText(m.Parts))
		}
	}
	tt.release("hold")
	tt.wait("The queued one, answered.")
}

// Pause now keeps on the screen what the step had written when it was cut
// short, and says what Resume does: the step runs again from its start.
func TestTUIPauseNowAndResume(t *testing.T) {
	tt := startTUI(t, "tui-pause", 100, 40)
	tt.line("pausable, please")
	tt.wait("Halfway", "streaming")
	tt.line("/pause now")
	got := tt.wait("pause now: applied", "paused in the middle of a step", "Halfway", "/resume runs this step again from its start", "paused · /resume")
	if strings.Contains(got, "streaming") {
		t.Fatalf("the status still says streaming:\n%s", got)
	}
	tt.line("/resume")
	tt.wait("resume: applied", "Second attempt, from its start.", "idle")
	got = tt.scr.get()
	if strings.Contains(got, "paused in the middle") || strings.Contains(got, "Halfway") {
		t.Fatalf("the interrupted step's words stay after the step ran again:\n%s", got)
	}
	tt.release("pausable")
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
	// The shell stays after the chat, to show what it left on the terminal.
	start := func(name string) {
		tmux("new-session", "-d", "-s", name, "-x", "100", "-y", "32", bin+" chat --url "+node.url+" --session term-1; echo chat exited $?; sleep 600")
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
	// What the chat leaves on the terminal: the session, and the command
	// that resumes it.
	waitScreen(t, pane("a"), "chat exited 0", "Left session term-1", "go run ./cmd/node chat --url "+node.url+" --session term-1")
	tmux("kill-session", "-t", "a")

	// Reattach: the whole conversation, the user's side too.
	start("b")
	got := waitScreen(t, pane("b"), "hello there", "A plain answer.", "hold on", "queued message", "The queued one, answered.")
	if strings.Count(got, "A plain answer.") != 1 {
		t.Fatalf("the reattached screen repeats an answer:\n%s", got)
	}
}
