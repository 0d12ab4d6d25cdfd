package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"charm.land/bubbles/v2/textinput"
	"charm.land/bubbles/v2/viewport"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/protocol"
)

// The terminal interface of chat (a Bubble Tea program): the conversation
// above, rebuilt from the session's folded state at every change, so that
// nothing is ever printed twice or out of place; the inbox as a list below
// it; an input line that never mixes with the stream; a status line.
// /help and the README's tour list the keys.

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
	// tickMsg: time passes; notes past their time leave the screen.
	tickMsg time.Time
)

// How long a note stays on screen: an acknowledgement briefly, what went
// wrong longer. The help and the editing hint stay while they apply.
const (
	noteTTL  = 8 * time.Second
	alertTTL = 20 * time.Second
)

// note is a line under the conversation: an acknowledgement, an error.
type note struct {
	key   string // a later note of the same key replaces it ("send: sent", then "send: applied")
	text  string
	until time.Time
}

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
	notes     []note
	help      bool // the help is shown (until the next line, or esc)
	// follow: the conversation shows its end as it grows; scrolling up
	// (pgup) stops it, scrolling back to the end (pgdn) starts it again.
	follow bool
	// interrupted is what a Pause now took off the screen: the parts of
	// the step it cut short (the fold drops them, and Resume runs the step
	// again from its start), shown dimmed while the turn is paused.
	interrupted []protocol.Part
	quitting    bool
	// viewed, when set, sees every frame rendered (tests read the screen).
	viewed func(string)
}

func newTUI(ctx context.Context, s *client.Session, url string) *tuiModel {
	in := textinput.New()
	in.Prompt = "› "
	in.Placeholder = "a message, or /help"
	in.Focus()
	m := &tuiModel{ctx: ctx, sess: s, url: url, input: in, vp: viewport.New(), width: 80, height: 24, st: s.State(), follow: true}
	m.note("session", "session "+s.ID()+" at "+url+" (resume it with --session "+s.ID()+")", noteTTL)
	m.layout()
	return m
}

func (m *tuiModel) Init() tea.Cmd { return tea.Batch(m.waitChange(), textinput.Blink, tick()) }

func tick() tea.Cmd { return tea.Tick(time.Second, func(t time.Time) tea.Msg { return tickMsg(t) }) }

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

// note shows text under the conversation for ttl, in place of an earlier
// note of the same key; at most three notes show.
func (m *tuiModel) note(key, text string, ttl time.Duration) {
	m.notes = slices.DeleteFunc(m.notes, func(n note) bool { return n.key == key })
	m.notes = append(m.notes, note{key: key, text: text, until: time.Now().Add(ttl)})
	if len(m.notes) > 3 {
		m.notes = m.notes[len(m.notes)-3:]
	}
}

// expire removes the notes past their time; it reports whether any went.
func (m *tuiModel) expire(now time.Time) bool {
	n := len(m.notes)
	m.notes = slices.DeleteFunc(m.notes, func(n note) bool { return now.After(n.until) })
	return len(m.notes) != n
}

func (m *tuiModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	var cmds []tea.Cmd
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.layout()
	case tickMsg:
		if m.expire(time.Time(msg)) {
			m.layout()
		}
		return m, tick()
	case changedMsg:
		cmd := m.waitChange()
		prev := m.st
		m.st = m.sess.State()
		m.trackInterruption(prev)
		if len(m.st.Inbox.Items) == 0 {
			// The inbox emptied (its last item sent, removed or
			// admitted): the keys go back to the input line.
			m.inbox = false
		}
		if err := m.sess.Err(); err != nil {
			m.err = err
		}
		m.layout()
		return m, cmd
	case ackMsg:
		switch {
		case msg.err != nil:
			m.note(msg.label, msg.label+": not sent: "+msg.err.Error(), alertTTL)
		case msg.res == nil || len(msg.res.Events) == 0:
			m.note(msg.label, msg.label+": nothing to do", noteTTL)
		default:
			res, label, id := msg.res, msg.label, msg.res.Events[0].ID
			m.note(label, label+": sent", noteTTL)
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
		switch r := st.Receipt; {
		case r != nil && r.CommandID == msg.id && r.Outcome == protocol.OutcomeRejected:
			m.note(msg.label, msg.label+": rejected: "+r.Reason, alertTTL)
		case r != nil && r.CommandID == msg.id:
			m.note(msg.label, msg.label+": "+r.Outcome+outcomeHint(msg.label, st), noteTTL)
		default:
			m.note(msg.label, msg.label+": applied"+outcomeHint(msg.label, st), noteTTL)
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
		m.follow = m.vp.AtBottom()
		return cmd, true
	case "tab":
		m.inbox = !m.inbox && len(m.st.Inbox.Items) > 0
		m.layout()
		return nil, true
	case "esc":
		m.inbox, m.editing, m.help = false, "", false
		m.input.SetValue("")
		m.layout()
		return nil, true
	}
	if m.inbox && len(m.st.Inbox.Items) == 0 {
		// Nothing left to select: the key is the input line's.
		m.inbox = false
		m.layout()
	}
	if m.inbox {
		return m.inboxKey(k), true
	}
	if k.String() == "enter" {
		line := strings.TrimSpace(m.input.Value())
		m.input.SetValue("")
		m.help = false
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
		m.help = true
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
			m.note(verb, verb+": no tool call waits for approval", noteTTL)
			m.layout()
			return nil
		}
		if verb == "/approve" {
			return m.push("approve", func(ctx context.Context) (*client.PushResult, error) { return s.Approve(ctx, id) })
		}
		return m.push("deny", func(ctx context.Context) (*client.PushResult, error) { return s.Deny(ctx, id, "denied in chat") })
	}
	m.note("unknown", "unknown command "+verb+"; /help lists them", alertTTL)
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

// layout sizes the conversation to what the other lines leave and fills
// it; while it follows, it shows the conversation's end, however the lines
// under it grow or shrink.
func (m *tuiModel) layout() {
	m.input.SetWidth(max(m.width-4, 10))
	below := lipgloss.Height(m.below())
	m.vp.SetWidth(m.width)
	m.vp.SetHeight(max(m.height-below, 3))
	content := renderConversation(m.st, m.width, m.reasoning)
	if len(m.interrupted) > 0 {
		content += "\n" + renderInterrupted(m.interrupted, m.width)
	}
	m.vp.SetContent(content)
	if m.follow {
		m.vp.GotoBottom()
	}
}

// trackInterruption keeps what a Pause now took off the screen: the fold
// drops the partial output of the step it cuts short (Resume runs that
// step again, a fresh model request), so the parts the previous frame
// showed beyond the response's remaining ones are kept, and shown, until
// the turn runs again or ends.
func (m *tuiModel) trackInterruption(prev *protocol.AIState) {
	a := m.st.Active
	if a == nil || a.Phase == protocol.PhaseRunning {
		m.interrupted = nil
		return
	}
	if len(m.interrupted) > 0 || prev == nil || prev.Active == nil || prev.Active.TurnID != a.TurnID {
		return
	}
	before, now := findMessage(prev, a.ResponseMessageID), findMessage(m.st, a.ResponseMessageID)
	if before == nil {
		return
	}
	kept := 0
	if now != nil {
		kept = len(now.Parts)
	}
	if len(before.Parts) > kept {
		m.interrupted = slices.Clone(before.Parts[kept:])
	}
}

// findMessage is the transcript message with the ID, or nil.
func findMessage(st *protocol.AIState, id string) *protocol.TranscriptMessage {
	for i := range st.Messages {
		if st.Messages[i].ID == id {
			return &st.Messages[i]
		}
	}
	return nil
}

// renderInterrupted shows the parts of a step that Pause now cut short,
// dimmed, with what Resume will do.
func renderInterrupted(parts []protocol.Part, width int) string {
	w := max(width-2, 20)
	var b strings.Builder
	for _, p := range parts {
		if s := renderPart(p, w, false); s != "" {
			b.WriteString(ansi.Strip(s) + "\n")
		}
	}
	head := "⏸ paused in the middle of a step; what it had written:"
	if b.Len() == 0 {
		head = "⏸ paused in the middle of a step, before it wrote anything."
	}
	tail := "/resume runs this step again from its start (a fresh model request)"
	return styleDim.Render(lipgloss.NewStyle().Width(w).Render(head) + "\n" + strings.TrimRight(b.String(), "\n") + "\n" + lipgloss.NewStyle().Width(w).Render(tail))
}

// outcomeHint is what follows an applied command, where it is not plain.
func outcomeHint(label string, st *protocol.AIState) string {
	switch {
	case label == "pause "+protocol.PauseNow && st.Active != nil:
		return " (the step stops; /resume runs it again from its start)"
	case label == "pause "+protocol.PauseAfterTurn && st.Active != nil:
		return " (after this turn; messages wait in the inbox until /resume)"
	}
	return ""
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
	wrap := lipgloss.NewStyle().Width(max(m.width, 20))
	for _, n := range m.notes {
		b.WriteString(styleNote.Render(wrap.Render(truncate(n.text, m.width*2))) + "\n")
	}
	if m.editing != "" {
		b.WriteString(styleNote.Render(wrap.Render("editing the queued message: enter saves, esc cancels")) + "\n")
	}
	if m.help {
		b.WriteString(styleDim.Render(wrap.Render(tuiHelp)) + "\n")
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
	if m.st.Inbox.Paused {
		phase += " · /resume"
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
		if s, ok := renderCodingTool(p, w); ok {
			return s
		}
		head := "⚙ " + p.ToolNameOf() + " " + compactJSON(p.Input) + stateNote(p.State)
		switch p.State {
		case protocol.ToolOutputAvailable:
			head += " → " + compactJSON(p.Output)
		case protocol.ToolOutputError:
			return styleError.Render(wrap.Render(head + " ✗ " + p.ErrorText))
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

// stateNote is what a tool call's head says of its state, where the
// state adds to it.
func stateNote(state string) string {
	switch state {
	case protocol.ToolInputStreaming:
		return " …"
	case protocol.ToolInputAvailable, protocol.ToolApprovalResponded:
		return " running"
	case protocol.ToolApprovalRequested:
		return " needs your approval: /approve or /deny"
	case protocol.ToolOutputDenied:
		return " denied"
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
