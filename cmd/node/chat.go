package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/term"

	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/protocol"
)

const chatHelp = `Type a message and press Enter. While a turn runs:
  /steer TEXT   steer the running turn after its current step
  /queue TEXT   queue a message for after the turn (same as typing it)
  /pause        pause after the turn (messages then wait in the inbox)
  /pause now    pause at once, in the middle of the step
  /resume       resume: the inbox runs; a step cut by /pause now runs again
                from its start (a fresh model request)
  /stop         stop the running turn where you see it
  /retry        retry a failed answer
  /quit         leave (the session stays on the node)
`

// runChat is the chat subcommand: a terminal client of a node built on
// package client. It reads lines from stdin, streams the answers as they
// arrive, and exits on /quit, on ctx's end, or at the end of stdin once
// everything it sent has been answered.
func runChat(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", env("A2_URL", "http://127.0.0.1:8080"), "the node's base URL (A2_URL)")
	session := fs.String("session", "", "the session to join or resume (default: a new one)")
	agent := fs.String("agent", defaultAgent, "the agent")
	token := fs.String("token", env("A2_TOKEN", ""), "bearer token sent with every request, for an authorize policy (A2_TOKEN)")
	plain := fs.Bool("plain", false, "plain line output even on a terminal (the default when standard output is not one)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *session == "" {
		*session = "chat-" + strings.ToLower(rand.Text()[:12])
	}
	c, err := client.New(*url, *agent, client.Options{Token: *token, MaxAttempts: 4})
	if err != nil {
		return err
	}
	openCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	s, err := c.Open(openCtx, *session)
	cancel()
	if err != nil {
		return openError(*session, *url, *agent, err)
	}
	defer s.Close()
	if !*plain && isTerminal(stdin) && isTerminal(stdout) {
		_, err := tea.NewProgram(newTUI(ctx, s, *url), tea.WithContext(ctx), tea.WithInput(stdin), tea.WithOutput(stdout)).Run()
		if errors.Is(err, tea.ErrProgramKilled) || errors.Is(err, context.Canceled) {
			err = nil
		}
		// The full-screen chat leaves nothing on the terminal: say where
		// the session is, and how to come back to it.
		fmt.Fprintf(stdout, "Left session %s; it stays on the node. Resume it with:\n  %s\n", *session, resumeCommand(*session, *url, *agent, getenv))
		return err
	}
	fmt.Fprintf(stdout, "Session %s at %s (resume it with --session %s).\n%s\n", *session, *url, *session, chatHelp)

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()

	r := &renderer{out: stdout, printed: map[string]string{}}
	var sent []string
	eof := false
	for {
		changed := s.Changed()
		st, _ := s.Confirmed()
		r.render(st)
		if err := s.Err(); err != nil {
			return err
		}
		if eof && settled(st, sent, s.Pending()) {
			r.closeLine()
			return nil
		}
		select {
		case <-ctx.Done():
			r.closeLine()
			return nil
		case <-changed:
		case line, ok := <-lines:
			if !ok {
				eof, lines = true, nil
				continue
			}
			id, quit := r.command(ctx, s, strings.TrimSpace(line))
			if quit {
				r.closeLine()
				return nil
			}
			if id != "" {
				sent = append(sent, id)
			}
		}
	}
}

// resumeCommand is the command that reopens the session: the flags that
// differ from the defaults, and the session.
func resumeCommand(session, url, agent string, getenv func(string) string) string {
	cmd := "go run ./cmd/node chat"
	if def := getenv("A2_URL"); url != "http://127.0.0.1:8080" && url != def {
		cmd += " --url " + url
	}
	if agent != defaultAgent {
		cmd += " --agent " + agent
	}
	return cmd + " --session " + session
}

// settled reports whether everything sent has been admitted and answered:
// every sent message is in the transcript, no turn runs and nothing waits
// for a decision (a paused inbox counts as settled).
func settled(st *protocol.AIState, sent []string, pending []protocol.Event) bool {
	if len(pending) > 0 || st.Active != nil || (len(st.Inbox.Items) > 0 && !st.Inbox.Paused) {
		return false
	}
	for _, id := range sent {
		if !slices.ContainsFunc(st.Messages, func(m protocol.TranscriptMessage) bool { return m.ID == id }) &&
			!slices.ContainsFunc(st.Inbox.Items, func(it protocol.InboxItem) bool { return it.ID == id }) {
			return false
		}
	}
	return true
}

// command runs one line: a message or a slash command. It returns the ID
// of a message it sent, and whether to quit.
func (r *renderer) command(ctx context.Context, s *client.Session, line string) (string, bool) {
	if line == "" {
		return "", false
	}
	pushCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	verb, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	var res *client.PushResult
	var err error
	isMessage := false
	switch {
	case !strings.HasPrefix(line, "/"):
		res, err = s.Send(pushCtx, line)
		isMessage = true
	case verb == "/quit" || verb == "/exit":
		return "", true
	case verb == "/steer" && rest != "":
		res, err = s.Steer(pushCtx, rest)
		isMessage = true
	case verb == "/queue" && rest != "":
		res, err = s.Send(pushCtx, rest)
		isMessage = true
	case verb == "/pause" && (rest == "" || rest == "now"):
		when := protocol.PauseAfterTurn
		if rest == "now" {
			when = protocol.PauseNow
		}
		res, err = s.Pause(pushCtx, when)
	case verb == "/resume":
		res, err = s.Resume(pushCtx)
	case verb == "/stop":
		res, err = s.Stop(pushCtx)
		if err == nil && len(res.Events) == 0 {
			r.note("nothing to stop")
		}
	case verb == "/retry":
		res, err = s.Retry(pushCtx)
		if err == nil && len(res.Events) == 0 {
			r.note("nothing to retry")
		}
	default:
		r.note("unknown command " + verb)
		r.closeLine()
		fmt.Fprint(r.out, chatHelp)
		return "", false
	}
	if err != nil {
		r.note("not sent: " + err.Error())
		return "", false
	}
	if isMessage && len(res.Events) > 0 {
		return res.Events[0].ID, false
	}
	return "", false
}

// renderer prints a session's answers as they grow: for each assistant
// message, the part of its text not printed yet.
type renderer struct {
	out     io.Writer
	printed map[string]string // assistant message ID -> text printed
	open    bool              // a line is open (an answer is streaming)
	receipt string
	status  string
}

func (r *renderer) render(st *protocol.AIState) {
	for _, m := range st.Messages {
		if m.Role != protocol.RoleAssistant {
			continue
		}
		text := renderAnswer(m)
		old, seen := r.printed[m.ID]
		if text == old {
			continue
		}
		if !seen {
			r.closeLine()
			fmt.Fprint(r.out, "assistant: ")
		}
		switch {
		case strings.HasPrefix(text, old):
			fmt.Fprint(r.out, text[len(old):])
		case strings.HasPrefix(old, text):
			fmt.Fprint(r.out, " [cut here]")
		default:
			fmt.Fprint(r.out, "\n[revised] "+text)
		}
		r.printed[m.ID] = text
		r.open = true
	}
	if st.Active == nil {
		r.closeLine()
	}
	if rc := st.Receipt; rc != nil && rc.CommandID != r.receipt {
		r.receipt = rc.CommandID
		if rc.Outcome == protocol.OutcomeRejected {
			r.note("rejected: " + rc.Reason)
		}
	}
	if st.Status != r.status {
		r.status = st.Status
		switch st.Status {
		case protocol.StatusPaused:
			if st.Active != nil {
				r.note("paused in the middle of the turn; /resume runs the interrupted step again from its start")
			} else {
				r.note("paused: messages wait in the inbox; /resume admits them")
			}
		case protocol.StatusFailed:
			msg := "the answer failed"
			if st.Error != nil {
				msg += ": " + st.Error.Message
			}
			r.note(msg + "; /retry to run it again")
		case protocol.StatusClosed:
			r.note("the session is closed")
		}
	}
}

// renderAnswer is an assistant message as the terminal shows it: its text,
// and each tool call once it has a result.
func renderAnswer(m protocol.TranscriptMessage) string {
	var b strings.Builder
	for _, p := range m.Parts {
		switch {
		case p.Type == protocol.PartText:
			b.WriteString(p.Text)
		case p.IsToolPart() && p.State == protocol.ToolOutputAvailable:
			fmt.Fprintf(&b, "\n  [tool %s %s -> %s]\n", p.ToolNameOf(), p.Input, p.Output)
		case p.IsToolPart() && p.State == protocol.ToolOutputError:
			fmt.Fprintf(&b, "\n  [tool %s %s failed: %s]\n", p.ToolNameOf(), p.Input, p.ErrorText)
		}
	}
	return b.String()
}

func (r *renderer) closeLine() {
	if r.open {
		fmt.Fprintln(r.out)
		r.open = false
	}
}

func (r *renderer) note(s string) {
	r.closeLine()
	fmt.Fprintf(r.out, "[%s]\n", s)
}

// isTerminal reports whether f is a terminal.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(file.Fd())
}

// openError says why chat could not open its session, in words a person
// can act on: the node answered (its message, which names the problem), or
// it did not (it is probably not running).
func openError(session, url, agent string, err error) error {
	var ce *client.Error
	if errors.As(err, &ce) {
		if ce.Status == http.StatusNotFound && ce.Field == "agent" {
			// The node's message names the agents it serves.
			_, agents, ok := strings.Cut(ce.Message, "; ")
			if !ok {
				agents = fmt.Sprintf("a node of its own serves %q", defaultAgent)
			}
			return fmt.Errorf("the node at %s has no agent %q (%s; choose one with --agent)", url, agent, agents)
		}
		return fmt.Errorf("the node at %s refused session %q: %s", url, session, ce.Message)
	}
	return fmt.Errorf("cannot reach the node at %s (is it running? go run ./cmd/node; another address: --url): %w", url, err)
}
