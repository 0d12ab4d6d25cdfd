package sse

import (
	"io"
	"testing"
)

// Buffered reports a whole event already received: true while the read
// that brought several events still holds one, false once only part of an
// event (or nothing) is buffered, so that the caller would wait.
func TestBuffered(t *testing.T) {
	pr, pw := io.Pipe()
	defer pr.Close()
	r := NewReader(pr)
	go func() {
		// Two whole events and the start of a third in one write.
		_, _ = pw.Write([]byte("data: one\n\nevent: e\ndata: two\r\n\r\ndata: thr"))
	}()
	if ev, err := r.Next(); err != nil || string(ev.Data) != "one" {
		t.Fatalf("first event: %q, %v", ev.Data, err)
	}
	if !r.Buffered() {
		t.Fatal("the second event arrived with the first, but Buffered is false")
	}
	if ev, err := r.Next(); err != nil || string(ev.Data) != "two" || ev.Name != "e" {
		t.Fatalf("second event: %q %q, %v", ev.Name, ev.Data, err)
	}
	if r.Buffered() {
		t.Fatal("only part of the third event is buffered, but Buffered is true")
	}
	go func() { _, _ = pw.Write([]byte("ee\n\n")); _ = pw.Close() }()
	if ev, err := r.Next(); err != nil || string(ev.Data) != "three" {
		t.Fatalf("third event: %q, %v", ev.Data, err)
	}
	if r.Buffered() {
		t.Fatal("nothing is buffered, but Buffered is true")
	}
}
