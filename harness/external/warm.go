package external

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"hash"
	"strings"
	"sync/atomic"

	"github.com/a2-runtime/a2/harness"
)

// A loop whose hello says warm keeps, in its memory, its state at the end
// of each session's last response (Pi's session): it saves it at the end
// of a run whose live call ended the response, and a later run may start
// from it: A2 names the run that saved it (base) and sends only the
// history after it (R-HARNESS-09). The loop finishes saving before it
// answers a run that names the state. A2 names a state only when the history
// it builds the step from, out of the log, begins with exactly the
// messages the state stands for: a state saved by a step that did not
// commit, or committed otherwise (cut at a stop's seen index, retried),
// does not match, and the run is cold, with the whole history
// (R-HARNESS-10). A loop that no longer holds a named state says missing,
// and the run is sent again whole.

// maxWarmSessions bounds the states a process is told of: past it, one is
// forgotten (its session's next run is cold).
const maxWarmSessions = 4096

// warmState is what A2 knows of a state a loop process saved for a
// session.
type warmState struct {
	run    string   // the run that saved it: the state's name
	count  int      // the messages it stands for, from the history's start
	digest [32]byte // their digest
}

// expect notes the state the loop saves for session at the end of run: it stands for messages (the history, the response's earlier
// steps and results, and the live call's content).
func (p *process) expect(session, run string, messages []harness.ModelMessage) {
	if session == "" || !p.hello.Warm {
		return
	}
	w := &warmState{run: run, count: len(messages), digest: digest(messages)}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.warm == nil {
		p.warm = map[string]*warmState{}
	}
	if _, ok := p.warm[session]; !ok && len(p.warm) >= maxWarmSessions {
		for k := range p.warm {
			delete(p.warm, k)
			break
		}
	}
	p.warm[session] = w
}

// base is the state a run of session may start from, given the history
// the step was built from: the saved state whose messages the history
// begins with, or nil.
func (p *process) base(session string, history []harness.ModelMessage) *warmState {
	p.mu.Lock()
	w := p.warm[session]
	p.mu.Unlock()
	if w == nil || w.count > len(history) || digest(history[:w.count]) != w.digest {
		return nil
	}
	return w
}

// forget drops session's state (the loop said it no longer holds it).
func (p *process) forget(session string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.warm, session)
}

// Stats count a Loop's runs, for tests and operators.
type Stats struct {
	Runs     uint64 // runs sent
	WarmRuns uint64 // of them, from a saved state
	Missing  uint64 // saved states the loop no longer held (sent again whole)
	Messages uint64 // history messages sent in runs
}

type stats struct{ runs, warm, missing, messages atomic.Uint64 }

// Stats returns the loop's counts so far.
func (l *Loop) Stats() Stats {
	return Stats{Runs: l.stats.runs.Load(), WarmRuns: l.stats.warm.Load(), Missing: l.stats.missing.Load(), Messages: l.stats.messages.Load()}
}

// digest is a digest of what model messages say: their roles, texts,
// files, tool calls and results. Reasoning and provider metadata are left
// out: a provider may render them differently when the log is read back,
// and they do not change what the conversation holds.
func digest(messages []harness.ModelMessage) [32]byte {
	h := sha256.New()
	for _, m := range messages {
		field(h, "m", m.Role)
		for _, c := range m.Content {
			switch c.Type {
			case harness.ContentText:
				if strings.TrimSpace(c.Text) != "" {
					field(h, c.Type, c.Text)
				}
			case harness.ContentFile:
				field(h, c.Type, c.MediaType, c.Filename, c.Data)
			case harness.ContentToolCall:
				field(h, c.Type, c.ToolCallID, c.ToolName, compact(c.Input))
			case harness.ContentToolResult:
				out := ""
				if c.Output != nil {
					out = c.Output.Type + ":" + compact(c.Output.Value)
				}
				field(h, c.Type, c.ToolCallID, c.ToolName, out)
			}
		}
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// field writes strings to h, each with its length.
func field(h hash.Hash, s ...string) {
	var n [binary.MaxVarintLen64]byte
	for _, x := range s {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(x)))])
		h.Write([]byte(x))
	}
}

// compact is JSON without insignificant space ("" for none).
func compact(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
