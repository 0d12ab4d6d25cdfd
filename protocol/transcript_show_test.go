// What a transcript shows of the state: the state, the view, the
// messages and the inbox (transcript_test.go runs the transcripts).

package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/cockroachdb/datadriven"
)

func (tr *transcript) showState(d *datadriven.TestData) string {
	b, err := MarshalState(tr.state)
	if err != nil {
		d.Fatalf(tr.t, "marshal: %v", err)
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	fields, ok := arg(d, "fields")
	var keys []string
	if ok {
		keys = strings.Split(fields, ",")
	} else {
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
	}
	var out strings.Builder
	for _, k := range keys {
		v, ok := m[k]
		if !ok {
			v = json.RawMessage("<absent>")
		}
		var buf bytes.Buffer
		if json.Compact(&buf, v) != nil {
			buf.Write(v)
		}
		fmt.Fprintf(&out, "%s: %s\n", k, tr.show(buf.Bytes()))
	}
	return out.String()
}

func partsText(parts []Part) string {
	var segs []string
	for _, p := range parts {
		switch {
		case p.Type == PartText || p.Type == PartReasoning:
			segs = append(segs, fmt.Sprintf("%s(%q)", p.Type, p.Text))
		case p.IsToolPart():
			s := fmt.Sprintf("%s[%s %s", p.Type, p.ToolCallID, p.State)
			if len(p.Output) > 0 {
				s += " " + string(p.Output)
			}
			if p.ErrorText != "" {
				s += fmt.Sprintf(" %q", p.ErrorText)
			}
			segs = append(segs, s+"]")
		case p.Type == PartCompaction:
			segs = append(segs, p.Type+string(p.Data))
		default:
			segs = append(segs, p.Type)
		}
	}
	return strings.Join(segs, " ")
}

// showView prints the optimistic state this client shows: messages, inbox,
// active, status, starting and the indicator.
func (tr *transcript) showView(d *datadriven.TestData) string {
	v := tr.overlay.View(tr.state)
	var b strings.Builder
	b.WriteString(tr.messagesOf(v))
	saved := tr.state
	tr.state = v
	b.WriteString("inbox: ")
	b.WriteString(strings.ReplaceAll(strings.TrimSpace(tr.showInbox()), "\n", " | "))
	tr.state = saved
	active := "null"
	if v.Active != nil {
		active = tr.show([]byte(v.Active.TurnID)) + " " + v.Active.Phase
	}
	fmt.Fprintf(&b, "\nactive: %s status: %s starting: %v indicator: %q\n", active, v.Status, v.Starting, Indicator(v))
	if _, ok := arg(d, "approvals"); ok {
		fmt.Fprintf(&b, "pendingApprovals: %d pendingInputs: %d\n", len(v.PendingApprovals), len(v.PendingInputs))
	}
	return b.String()
}

func (tr *transcript) showMessages() string { return tr.messagesOf(tr.state) }

func (tr *transcript) messagesOf(s *AIState) string {
	var b strings.Builder
	for _, m := range s.Messages {
		fmt.Fprintf(&b, "%s %s: %s\n", tr.show([]byte(m.ID)), m.Role, partsText(m.Parts))
	}
	if b.Len() == 0 {
		return "(none)\n"
	}
	return b.String()
}

func (tr *transcript) showInbox() string {
	var b strings.Builder
	if tr.state.Inbox.Paused {
		b.WriteString("paused\n")
	}
	for _, it := range tr.state.Inbox.Items {
		fmt.Fprintf(&b, "%s %s generate=%v", it.ID, it.Role, it.Generate)
		if it.AfterStepOf != "" {
			fmt.Fprintf(&b, " afterStepOf=%s", tr.show([]byte(it.AfterStepOf)))
		}
		fmt.Fprintf(&b, ": %s\n", partsText(it.Message.Parts))
	}
	if b.Len() == 0 {
		return "(empty)\n"
	}
	return b.String()
}
