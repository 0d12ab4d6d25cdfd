package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/textinput"
	"charm.land/bubbles/v2/viewport"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/protocol"
)

// The terminal interface of chat (a Bubble Tea program): the conversation
// above, rebuilt from the session's folded state at every change, so that
// nothing is ever printed twice or out of place; the inbox as a list below
// it; an input line that never mixes with the stream; a status line.
// docs/http.md ("chat") lists the keys.

const tuiHelp = `enter send · /steer T · /queue T · /pause [now] · /resume · /stop · /retry · /approve · /deny · /quit
tab: the inbox (↑↓ select, e edit, d remove, K/J move, s send now) · ctrl+r reasoning · pgup/pgdn scroll`

var (
	styleUser      = lipgloss.NewStyle().Bold(true)
	styleAssistant = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("6"))
	styleDim       = lipgloss.NewStyle().Faint(true)
	styleTool      = lipgloss.NewStyle().Foreground(lipgloss.Color("3"))
	styleError     = lipgloss.NewStyle().Foreground(lipgloss.Color("1"))
	styleStatus    = lipgloss.NewStyle().Reverse(true)
	styleSelected  = lipgloss.NewStyle().Reverse(true)
	styleNote      = lipgloss.NewStyle().Foreground(lipgloss.Color("2"))
)

type (
	// changedMsg: the session changed (its Changed channel closed).
	changedMsg struct{}
	// ackMsg: a command was pushed (durable) or refused.
	ackMsg struct {
		label string
		res   *client.PushResult
		err   error
	}
	// decidedMsg: a pushed command's events reached this client's stream.
	decidedMsg struct {
		label string
		id    string
	}
)

type tuiModel struct {
	ctx       context.Context
	sess      *client.Session
	url       string
	input     textinput.Model
	vp        viewport.Model
	width     int
	height    int
	st        *protocol.AIState
	err       error
	inbox     bool   // the inbox has the keys
	sel       int    // the selected inbox item
	editing   string // the inbox item the input edits ("" none)
	reasoning bool   // reasoning shown in full
	notes     []string
	quitting  bool
	// viewed, when set, sees every frame rendered (tests read the screen).
	viewed func(string)
}

func newTUI(ctx context.Context, s *client.Session, url string) *tuiModel {
	in := textinput.New()
	in.Prompt = "› "
	in.Placeholder = "a message, or /help"
	in.Focus()
	m := &tuiModel{ctx: ctx, sess: s, url: url, input: in, vp: viewport.New(), width: 80, height: 24, st: s.State()}
	m.note("session " + s.ID() + " at " + url + " (resume it with --session " + s.ID() + ")")
	m.layout()
	return m
}

func (m *tuiModel) Init() tea.Cmd { return tea.Batch(m.waitChange(), textinput.Blink) }

// waitChange waits for the session's next change: the channel is taken
// before the state is read, so that no change is missed.
func (m *tuiModel) waitChange() tea.Cmd {
	ch := m.sess.Changed()
	ctx := m.ctx
	return func() tea.Msg {
		select {
		case <-ch:
			return changedMsg{}
		case <-ctx.Done():
			return tea.Quit()
		}
	}
}

func (m *tuiModel) note(s string) {
	m.notes = append(m.notes, s)
	if len(m.notes) > 3 {
		m.notes = m.notes[len(m.notes)-3:]
	}
}

func (m *tuiModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	var cmds []tea.Cmd
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.layout()
	case changedMsg:
		cmd := m.waitChange()
		m.st = m.sess.State()
		if err := m.sess.Err(); err != nil {
			m.err = err
		}
		m.layout()
		return m, cmd
	case ackMsg:
		switch {
		case msg.err != nil:
			m.note(msg.label + ": not sent: " + msg.err.Error())
		case msg.res == nil || len(msg.res.Events) == 0:
			m.note(msg.label + ": nothing to do")
		default:
			res, label, id := msg.res, msg.label, msg.res.Events[0].ID
			m.note(label + ": sent")
			cmds = append(cmds, func() tea.Msg {
				select {
				case <-res.Confirmed():
				case <-time.After(30 * time.Second):
				}
				return decidedMsg{label: label, id: id}
			})
		}
		m.layout()
	case decidedMsg:
		st, _ := m.sess.Confirmed()
		if r := st.Receipt; r != nil && r.CommandID == msg.id {
			if r.Outcome == protocol.OutcomeRejected {
				m.note(msg.label + ": rejected: " + r.Reason)
			} else {
				m.note(msg.label + ": " + r.Outcome)
			}
		} else {
			m.note(msg.label + ": applied")
		}
		m.layout()
	case tea.KeyPressMsg:
		if cmd, done := m.key(msg); done {
			return m, cmd
		}
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	cmds = append(cmds, cmd)
	return m, tea.Batch(cmds...)
}

// key handles the keys of the interface; done is false for the keys the
// input line takes.
func (m *tuiModel) key(k tea.KeyPressMsg) (tea.Cmd, bool) {
	switch k.String() {
	case "ctrl+c", "ctrl+d":
		m.quitting = true
		return tea.Quit, true
	case "ctrl+r":
		m.reasoning = !m.reasoning
		m.layout()
		return nil, true
	case "pgup", "pgdown":
		var cmd tea.Cmd
		m.vp, cmd = m.vp.Update(k)
		return cmd, true
	case "tab":
		m.inbox = !m.inbox && len(m.st.Inbox.Items) > 0
		m.layout()
		return nil, true
	case "esc":
		m.inbox, m.editing = false, ""
		m.input.SetValue("")
		m.layout()
		return nil, true
	}
	if m.inbox {
		return m.inboxKey(k), true
	}
	if k.String() == "enter" {
		line := strings.TrimSpace(m.input.Value())
		m.input.SetValue("")
		if m.editing != "" {
			id := m.editing
			m.editing = ""
			if line == "" {
				return nil, true
			}
			return m.push("edit", func(ctx context.Context) (*client.PushResult, error) {
				return m.sess.QueueEdit(ctx, protocol.UIMessage{ID: id, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: line}}})
			}), true
		}
		return m.submit(line), true
	}
	return nil, false
}

// inboxKey handles a key while the inbox list has the keys.
func (m *tuiModel) inboxKey(k tea.KeyPressMsg) tea.Cmd {
	items := m.st.Inbox.Items
	if len(items) == 0 {
		m.inbox = false
		m.layout()
		return nil
	}
	m.sel = min(max(m.sel, 0), len(items)-1)
	it := items[m.sel]
	defer m.layout()
	switch k.String() {
	case "up", "k":
		m.sel = max(m.sel-1, 0)
	case "down", "j":
		m.sel = min(m.sel+1, len(items)-1)
	case "e", "enter":
		m.editing, m.inbox = it.ID, false
		m.input.SetValue(messageText(it.Message.Parts))
		m.note("editing the queued message: enter saves, esc cancels")
	case "d", "delete", "backspace":
		return m.push("remove", func(ctx context.Context) (*client.PushResult, error) { return m.sess.QueueRemove(ctx, it.ID) })
	case "K", "shift+up":
		if m.sel == 0 {
			return nil
		}
		before := items[m.sel-1].ID
		m.sel--
		return m.push("move", func(ctx context.Context) (*client.PushResult, error) { return m.sess.QueueMove(ctx, it.ID, &before) })
	case "J", "shift+down":
		if m.sel >= len(items)-1 {
			return nil
		}
		var before *string
		if m.sel+2 < len(items) {
			b := items[m.sel+2].ID
			before = &b
		}
		m.sel++
		return m.push("move", func(ctx context.Context) (*client.PushResult, error) { return m.sess.QueueMove(ctx, it.ID, before) })
	case "s":
		// Send now: the queued message steers the running turn (after its
		// current step) instead of waiting for the turn to end.
		text := messageText(it.Message.Parts)
		return m.push("send now", func(ctx context.Context) (*client.PushResult, error) {
			if _, err := m.sess.QueueRemove(ctx, it.ID); err != nil {
				return nil, err
			}
			return m.sess.Steer(ctx, text)
		})
	}
	return nil
}

// push runs an action off the update loop and reports its outcome.
func (m *tuiModel) push(label string, do func(ctx context.Context) (*client.PushResult, error)) tea.Cmd {
	ctx := m.ctx
	return func() tea.Msg {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err := do(pctx)
		return ackMsg{label: label, res: res, err: err}
	}
}

// submit runs one line: a message or a slash command.
func (m *tuiModel) submit(line string) tea.Cmd {
	if line == "" {
		return nil
	}
	verb, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	s := m.sess
	switch {
	case !strings.HasPrefix(line, "/"):
		return m.push("send", func(ctx context.Context) (*client.PushResult, error) { return s.Send(ctx, line) })
	case verb == "/quit" || verb == "/exit":
		m.quitting = true
		return tea.Quit
	case verb == "/help":
		m.note(tuiHelp)
		m.layout()
		return nil
	case verb == "/steer" && rest != "":
		return m.push("steer", func(ctx context.Context) (*client.PushResult, error) { return s.Steer(ctx, rest) })
	case verb == "/queue" && rest != "":
		return m.push("queue", func(ctx context.Context) (*client.PushResult, error) { return s.Send(ctx, rest) })
	case verb == "/pause" && (rest == "" || rest == "now"):
		when := protocol.PauseAfterTurn
		if rest == "now" {
			when = protocol.PauseNow
		}
		return m.push("pause "+when, func(ctx context.Context) (*client.PushResult, error) { return s.Pause(ctx, when) })
	case verb == "/resume":
		return m.push("resume", s.Resume)
	case verb == "/stop":
		return m.push("stop", s.Stop)
	case verb == "/retry":
		return m.push("retry", s.Retry)
	case verb == "/approve" || verb == "/deny":
		id := rest
		if id == "" {
			id = firstApproval(m.st)
		}
		if id == "" {
			m.note(verb + ": no tool call waits for approval")
			m.layout()
			return nil
		}
		if verb == "/approve" {
			return m.push("approve", func(ctx context.Context) (*client.PushResult, error) { return s.Approve(ctx, id) })
		}
		return m.push("deny", func(ctx context.Context) (*client.PushResult, error) { return s.Deny(ctx, id, "denied in chat") })
	}
	m.note("unknown command " + verb + "; /help lists them")
	m.layout()
	return nil
}

// firstApproval is the ID of the first tool call that waits for approval.
func firstApproval(st *protocol.AIState) string {
	for _, msg := range st.Messages {
		for _, p := range msg.Parts {
			if p.IsToolPart() && p.State == protocol.ToolApprovalRequested && p.Approval != nil {
				return p.Approval.ID
			}
		}
	}
	return ""
}

// layout sizes the conversation to what the other lines leave and fills it.
func (m *tuiModel) layout() {
	below := lipgloss.Height(m.below())
	m.vp.SetWidth(m.width)
	m.vp.SetHeight(max(m.height-below, 3))
	follow := m.vp.AtBottom() || m.vp.TotalLineCount() == 0
	m.vp.SetContent(renderConversation(m.st, m.width, m.reasoning))
	if follow {
		m.vp.GotoBottom()
	}
	m.input.SetWidth(max(m.width-4, 10))
}

// below is what the screen shows under the conversation: the inbox, the
// notes, the input and the status line.
func (m *tuiModel) below() string {
	var b strings.Builder
	if items := m.st.Inbox.Items; len(items) > 0 {
		head := fmt.Sprintf("queued (%d)", len(items))
		if m.st.Inbox.Paused {
			head += ", paused"
		}
		if m.inbox {
			head += ": ↑↓ select · e edit · d remove · K/J move · s send now · esc back"
		} else {
			head += ": tab to edit"
		}
		b.WriteString(styleDim.Render(head) + "\n")
		for i, it := range items {
			line := truncate(fmt.Sprintf("  %d. %s", i+1, messageText(it.Message.Parts)), m.width)
			if m.inbox && i == m.sel {
				line = styleSelected.Render(line)
			}
			b.WriteString(line + "\n")
		}
	}
	for _, n := range m.notes {
		b.WriteString(styleNote.Render(truncate(n, m.width*2)) + "\n")
	}
	b.WriteString(m.input.View() + "\n")
	b.WriteString(styleStatus.Render(truncate(m.status(), m.width)))
	return b.String()
}

// status is the status line: connection, turn phase, indicator, session.
func (m *tuiModel) status() string {
	conn := "● connected"
	if m.err != nil {
		conn = "✗ " + m.err.Error()
	}
	phase := m.st.Status
	if ind := protocol.Indicator(m.st); ind != "" {
		phase += " · " + ind
	}
	return fmt.Sprintf(" %s │ %s │ session %s │ /help ", conn, phase, m.sess.ID())
}

func (m *tuiModel) View() tea.View {
	if m.quitting {
		return tea.NewView("")
	}
	content := m.vp.View() + "\n" + m.below()
	if m.viewed != nil {
		m.viewed(content)
	}
	v := tea.NewView(content)
	v.AltScreen = true
	return v
}

// renderConversation renders every message of the transcript, wrapped to
// width: the user's, the assistant's parts (reasoning dimmed, collapsed
// unless full), tool calls with their input, state and output, compaction.
func renderConversation(st *protocol.AIState, width int, fullReasoning bool) string {
	w := max(width-2, 20)
	wrap := lipgloss.NewStyle().Width(w)
	var b strings.Builder
	for _, msg := range st.Messages {
		switch msg.Role {
		case protocol.RoleUser:
			b.WriteString(styleUser.Render("you") + "\n" + wrap.Render(messageText(msg.Parts)) + "\n\n")
		case protocol.RoleAssistant:
			b.WriteString(styleAssistant.Render("assistant") + "\n")
			for _, p := range msg.Parts {
				if s := renderPart(p, w, fullReasoning); s != "" {
					b.WriteString(s + "\n")
				}
			}
			b.WriteString("\n")
		default:
			b.WriteString(styleDim.Render(msg.Role) + "\n" + wrap.Render(messageText(msg.Parts)) + "\n\n")
		}
	}
	if st.Status == protocol.StatusFailed && st.Error != nil {
		b.WriteString(styleError.Render(wrap.Render("the answer failed: "+st.Error.Message+" (/retry runs it again)")) + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

func renderPart(p protocol.Part, w int, fullReasoning bool) string {
	wrap := lipgloss.NewStyle().Width(w)
	switch {
	case p.Type == protocol.PartText:
		if p.Text == "" {
			return ""
		}
		return wrap.Render(p.Text)
	case p.Type == protocol.PartReasoning:
		if p.Text == "" {
			return ""
		}
		if fullReasoning {
			return styleDim.Render(wrap.Render("thinking: " + p.Text))
		}
		return styleDim.Render(truncate("▸ thinking: "+strings.ReplaceAll(p.Text, "\n", " "), w) + " (ctrl+r)")
	case p.IsToolPart():
		head := "⚙ " + p.ToolNameOf() + " " + compactJSON(p.Input)
		switch p.State {
		case protocol.ToolInputStreaming:
			head += " …"
		case protocol.ToolInputAvailable, protocol.ToolApprovalResponded:
			head += " running"
		case protocol.ToolApprovalRequested:
			head += " needs your approval: /approve or /deny"
		case protocol.ToolOutputAvailable:
			head += " → " + compactJSON(p.Output)
		case protocol.ToolOutputError:
			return styleError.Render(wrap.Render(head + " ✗ " + p.ErrorText))
		case protocol.ToolOutputDenied:
			head += " denied"
		}
		return styleTool.Render(wrap.Render(head))
	case protocol.IsCompactionPart(p):
		var d protocol.CompactionData
		_ = json.Unmarshal(p.Data, &d)
		switch d.Status {
		case protocol.CompactionStatusRunning:
			return styleDim.Render("[compacting the conversation…]")
		case protocol.CompactionStatusCompleted:
			return styleDim.Render("[earlier conversation compacted]")
		default:
			return styleDim.Render("[compaction " + d.Status + "]")
		}
	}
	return ""
}

// messageText is the text of a message's text parts.
func messageText(parts []protocol.Part) string {
	var texts []string
	for _, p := range parts {
		if p.Type == protocol.PartText && p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, " ")
}

func compactJSON(b json.RawMessage) string {
	if len(b) == 0 {
		return ""
	}
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// truncate cuts s to n cells.
func truncate(s string, n int) string {
	if n <= 1 || lipgloss.Width(s) <= n {
		return s
	}
	r := []rune(s)
	for len(r) > 0 && lipgloss.Width(string(r)) > n-1 {
		r = r[:len(r)-1]
	}
	return string(r) + "…"
}
