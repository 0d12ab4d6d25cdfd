package actors

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// A session at its size quota (Options.MaxSessionBytes) refuses clients'
// pushes with ErrQuota and appends nothing, while trusted appends go on;
// the log's size survives the runtime's restart (saved beside the
// snapshots), so the quota holds after it.
func TestSessionSizeQuota(t *testing.T) {
	f := newFixture(t, `{"default":{"text":"ok"}}`, nil)
	f.close()
	f.opts = Options{MaxSessionBytes: 2000, SnapshotEvery: 3}
	f.open(nil)
	f.recovered()
	passive := false
	note := func(id string) protocol.Event {
		return protocol.Inputs.Message(protocol.UIMessage{ID: id, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: id + " 0123456789012345678901234567890123456789"}}},
			protocol.MessageOptions{Generate: &passive})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held := regexp.MustCompile(`log holds (\d+) bytes`)
	var refusal string
	for i := 0; refusal == "" && i < 100; i++ {
		_, err := f.rt.Push(ctx, "assistant", "s1", []protocol.Event{note("n" + string(rune('a'+i%26)) + string(rune('a'+i/26)))}, false)
		switch {
		case errors.Is(err, ErrQuota):
			refusal = err.Error()
		case err != nil:
			t.Fatalf("push %d: %v", i, err)
		}
	}
	if refusal == "" {
		t.Fatal("100 pushes of 2000 bytes' quota were all taken")
	}
	before, err := f.store.LastIndex(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.rt.Push(ctx, "assistant", "s1", []protocol.Event{note("over")}, false); !errors.Is(err, ErrQuota) {
		t.Fatalf("a push at the quota: %v", err)
	}
	if after, _ := f.store.LastIndex(ctx, "s1"); after != before {
		t.Fatalf("a refused push appended: index %d, was %d", after, before)
	}
	if _, err := f.rt.Push(ctx, "assistant", "s1", []protocol.Event{note("trusted")}, true); err != nil {
		t.Fatalf("a trusted append at the quota: %v", err)
	}
	_, err = f.rt.Push(ctx, "assistant", "s1", []protocol.Event{note("again")}, false)
	m := held.FindStringSubmatch(errString(err))
	if !errors.Is(err, ErrQuota) || m == nil {
		t.Fatalf("a push after the trusted one: %v", err)
	}
	// A new runtime on the same store: the size is restored, not counted
	// from the latest snapshot on.
	f.close()
	f.open(nil)
	f.recovered()
	_, err = f.rt.Push(ctx, "assistant", "s1", []protocol.Event{note("after-restart")}, false)
	m2 := held.FindStringSubmatch(errString(err))
	if !errors.Is(err, ErrQuota) || m2 == nil || m2[1] != m[1] {
		t.Fatalf("after a restart: %v; want ErrQuota with the log's %s bytes", err, m[1])
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The log's size when the saved count is older than the state snapshot
// replay starts from (a save of the count failed): the events between the
// two are read and counted; with a count newer than the state snapshot,
// only the events after the count are.
func TestLogSizeAcrossSnapshots(t *testing.T) {
	f := newFixture(t, `{}`, nil)
	ctx := context.Background()
	var evs []protocol.Event
	for i := range 8 {
		evs = append(evs, protocol.Event{ID: "e" + string(rune('0'+i)), Type: "app.note", Payload: []byte(`{"n":` + string(rune('0'+i)) + `}`)})
	}
	stored, err := f.store.Append(ctx, "sized", 0, evs)
	if err != nil {
		t.Fatal(err)
	}
	var all int64
	for _, ev := range stored {
		all += eventBytes(ev)
	}
	var upTo2 int64
	for _, ev := range stored[:2] {
		upTo2 += eventBytes(ev)
	}
	if err := f.store.SaveSnapshot(ctx, persistence.Snapshot{Session: "sized", Reducer: logSizeReducer, Index: 2, State: []byte(strconv.FormatInt(upTo2, 10))}); err != nil {
		t.Fatal(err)
	}
	for _, first := range []uint64{6, 1} { // a state snapshot at 5; none
		l, err := loadLogSize(ctx, f.store, "sized")
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range stored[first-1:] {
			l.count(ev)
		}
		got, err := l.total(ctx, f.store, "sized")
		if err != nil || got != all {
			t.Fatalf("replay from %d: %d bytes, %v; want %d", first, got, err, all)
		}
	}
}
