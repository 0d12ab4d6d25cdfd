// Package storetest is the conformance suite of persistence.Store, in the
// spirit of the Akka Persistence journal TCK: every Store implementation
// runs the same cases with one line,
//
//	func TestConformance(t *testing.T) { storetest.Run(t, factory) }
//
// and passes only if it keeps the whole contract written on
// persistence.Store: conditional append and fencing, idempotency by event ID
// across the store, partial-duplicate rejection, ranged reads and their
// bounds, live tails without gaps or duplicates, snapshots by reducer name,
// concurrency, large payloads, close and reopen, and argument checks.
// Subtests that check a numbered rule carry its ID in their name
// (R-LOG-01, R-LOG-09, R-LOG-10, R-LOG-16, R-CONTRACT-10), so
// `go test -run 'Conformance/.*/R-LOG-10'` runs one rule.
//
// The suite only uses the Store interface; it never inspects an
// implementation's storage.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// Factory makes the stores the suite runs against.
type Factory struct {
	// Open returns a new, empty store for one case. The suite closes it.
	Open func(t *testing.T) persistence.Store
	// Reopen returns a new store over the same storage as closed, which the
	// suite has already closed: everything closed acknowledged must be
	// there. Nil skips the close-and-reopen cases, with a logged reason.
	Reopen func(t *testing.T, closed persistence.Store) persistence.Store
}

// caseTimeout bounds one case, so that a lost wake-up fails instead of
// hanging the run.
const caseTimeout = 60 * time.Second

// testCase is one conformance case.
type testCase struct {
	name string
	run  func(e *env)
	// reopen marks cases that need Factory.Reopen.
	reopen bool
}

// allCases lists the cases in the order they run; each file of this package
// contributes one group.
func allCases() []testCase {
	var cs []testCase
	for _, group := range [][]testCase{
		appendCases, fencingCases, idempotencyCases, partialDuplicateCases,
		readCases, lookupCases, sessionsCases, tailCases, followCases, snapshotCases,
		concurrencyCases, largeCases, lifecycleCases, invalidCases, workIndexCases, leaseCases,
	} {
		cs = append(cs, group...)
	}
	return cs
}

// Run runs every conformance case as a subtest of t, each on a fresh store
// from f.Open.
func Run(t *testing.T, f Factory) {
	t.Helper()
	if f.Open == nil {
		t.Fatal("storetest: Factory.Open is nil")
	}
	for _, c := range allCases() {
		t.Run(c.name, func(t *testing.T) {
			if c.reopen && f.Reopen == nil {
				t.Skip("storetest: Factory.Reopen is nil, so close-and-reopen cases cannot run")
			}
			ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
			defer cancel()
			e := &env{t: t, f: f, ctx: ctx}
			e.s = e.open()
			c.run(e)
		})
	}
}

// env is what a case works with: its store and helpers that fail the case
// with a clear message.
type env struct {
	t   *testing.T
	f   Factory
	s   persistence.Store
	ctx context.Context
}

func (e *env) open() persistence.Store {
	s := e.f.Open(e.t)
	if s == nil {
		e.t.Fatal("storetest: Factory.Open returned nil")
	}
	e.t.Cleanup(func() { closeQuietly(e.t, s) })
	return s
}

// reopen closes the case's store and replaces it with Factory.Reopen's.
func (e *env) reopen() {
	e.t.Helper()
	if err := e.s.Close(); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
	s := e.f.Reopen(e.t, e.s)
	if s == nil {
		e.t.Fatal("storetest: Factory.Reopen returned nil")
	}
	e.t.Cleanup(func() { closeQuietly(e.t, s) })
	e.s = s
}

func closeQuietly(t *testing.T, s persistence.Store) {
	if err := s.Close(); err != nil && !errors.Is(err, persistence.ErrClosed) {
		t.Errorf("Close at cleanup: %v", err)
	}
}

// ev builds an event for a batch.
func ev(id, typ, payload string) protocol.Event {
	return protocol.Event{ID: id, Type: typ, Payload: json.RawMessage(payload)}
}

// evs builds n events "<prefix>-1".."<prefix>-n" of type "test.note".
func evs(prefix string, n int) []protocol.Event {
	out := make([]protocol.Event, n)
	for i := range out {
		id := fmt.Sprintf("%s-%d", prefix, i+1)
		out[i] = ev(id, "test.note", fmt.Sprintf(`{"n":%d,"id":%q}`, i+1, id))
	}
	return out
}

// append appends and fails the case on error. It checks what every
// successful Append must return: the batch, in order, with Session, Index and
// Time assigned and Index consecutive after expected.
func (e *env) append(session string, expected uint64, batch ...protocol.Event) []protocol.Event {
	e.t.Helper()
	got, err := e.s.Append(e.ctx, session, expected, batch)
	if err != nil {
		e.t.Fatalf("Append(%q, expected %d, %d events): %v", session, expected, len(batch), err)
	}
	checkAppended(e.t, session, expected, batch, got)
	return got
}

func checkAppended(t testing.TB, session string, expected uint64, batch, got []protocol.Event) {
	t.Helper()
	if len(got) != len(batch) {
		t.Fatalf("Append(%q) returned %d events for a batch of %d", session, len(got), len(batch))
	}
	for i, g := range got {
		b := batch[i]
		switch {
		case g.ID != b.ID || g.Type != b.Type || g.Cause != b.Cause || !bytes.Equal(g.Payload, b.Payload):
			t.Fatalf("Append(%q) event %d = %s, want the submitted %s", session, i, show(g), show(b))
		case g.Session != session:
			t.Fatalf("Append(%q) event %d has Session %q", session, i, g.Session)
		case g.Index != expected+1+uint64(i):
			t.Fatalf("Append(%q, expected %d) event %d has Index %d, want %d", session, expected, i, g.Index, expected+1+uint64(i))
		case g.Time == 0:
			t.Fatalf("Append(%q) event %d has no Time", session, i)
		}
	}
}

// log reads the whole log of session.
func (e *env) log(session string) []protocol.Event {
	e.t.Helper()
	got, err := e.s.Read(e.ctx, session, 0, 1<<30)
	if err != nil {
		e.t.Fatalf("Read(%q, 0, all): %v", session, err)
	}
	for i, g := range got {
		if g.Index != uint64(i+1) || g.Session != session {
			e.t.Fatalf("Read(%q) event %d is %s: want index %d of that session", session, i, show(g), i+1)
		}
	}
	return got
}

func (e *env) lastIndex(session string) uint64 {
	e.t.Helper()
	n, err := e.s.LastIndex(e.ctx, session)
	if err != nil {
		e.t.Fatalf("LastIndex(%q): %v", session, err)
	}
	return n
}

// wantLog fails unless session's log is exactly want (compared with
// sameEvent) and LastIndex agrees.
func (e *env) wantLog(session string, want []protocol.Event) {
	e.t.Helper()
	got := e.log(session)
	if !sameEvents(got, want) {
		e.t.Fatalf("log of %q:\n got %s\nwant %s", session, showAll(got), showAll(want))
	}
	if n := e.lastIndex(session); n != uint64(len(want)) {
		e.t.Fatalf("LastIndex(%q) = %d, want %d", session, n, len(want))
	}
}

// lookup fails the case on error.
func (e *env) lookup(ids ...string) []protocol.Event {
	e.t.Helper()
	got, err := e.s.Lookup(e.ctx, ids)
	if err != nil {
		e.t.Fatalf("Lookup(%q): %v", ids, err)
	}
	return got
}

// wantErr fails unless err matches target with errors.Is.
func wantErr(t testing.TB, what string, err, target error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v", what, target)
	}
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %q, want one matching %v", what, err, target)
	}
}

// sameEvent compares every field, payloads byte for byte.
func sameEvent(a, b protocol.Event) bool {
	return a.ID == b.ID && a.Type == b.Type && bytes.Equal(a.Payload, b.Payload) &&
		a.Index == b.Index && a.Session == b.Session && a.Time == b.Time && a.Cause == b.Cause
}

func sameEvents(a, b []protocol.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameEvent(a[i], b[i]) {
			return false
		}
	}
	return true
}

// show renders an event compactly, abbreviating a long payload.
func show(e protocol.Event) string {
	p := string(e.Payload)
	if len(p) > 80 {
		p = fmt.Sprintf("%s…(%d bytes)", p[:60], len(p))
	}
	return fmt.Sprintf("{%s %s #%d in %q t=%d cause=%q %s}", e.ID, e.Type, e.Index, e.Session, e.Time, e.Cause, p)
}

func showAll(es []protocol.Event) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = show(e)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
