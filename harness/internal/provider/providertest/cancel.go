package providertest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/a2-runtime/a2/harness"
)

// Provider describes an HTTP provider to the shared checks.
type Provider struct {
	// Model returns the provider's model sending to baseURL.
	Model func(baseURL string) harness.Model
	// Request is a request the fixture answers.
	Request harness.Request
	// Fixture is a server-sent events response with a text part.
	Fixture []byte
	// HeldAfter is how many of the fixture's events (Events) reach the
	// text's start: the slow server sends those, then stalls.
	HeldAfter int
	// Closed is the error Next returns after Close.
	Closed error
}

// wait bounds every wait of the checks; they never assert speed.
const wait = 10 * time.Second

// CheckCancellation checks how a provider's stream ends early: cancelling
// the context while the model stalls mid-stream ends Next with
// context.Canceled; cancelling before the response arrives ends Stream
// with ctx.Err(); Close ends Next with p.Closed, and closing twice is
// fine.
func CheckCancellation(t *testing.T, p Provider) {
	t.Run("cancel-a-stalled-stream", func(t *testing.T) {
		evs := Events(p.Fixture)
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			for _, e := range evs[:p.HeldAfter] {
				_, _ = w.Write(e)
			}
			w.(http.Flusher).Flush()
			select { // a model that stalls
			case <-r.Context().Done():
			case <-release:
			}
		}))
		defer srv.Close()
		defer close(release) // before srv.Close, which waits for the handler
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := p.Model(srv.URL).Stream(ctx, p.Request)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for {
			c, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			if c.Type == "text-start" {
				break
			}
		}
		cancel()
		done := make(chan error, 1)
		go func() {
			for {
				if _, err := s.Next(); err != nil {
					done <- err
					return
				}
			}
		}()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("want context.Canceled, got %v", err)
			}
		case <-time.After(wait):
			t.Fatal("the stream did not return after cancellation")
		}
	})
	t.Run("cancel-before-the-response", func(t *testing.T) {
		arrived := make(chan struct{})
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			close(arrived)
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
		defer srv.Close()
		defer close(release) // before srv.Close, which waits for the handler
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := p.Model(srv.URL).Stream(ctx, p.Request)
			done <- err
		}()
		select {
		case <-arrived:
		case <-time.After(wait):
			t.Fatal("the request never arrived")
		}
		cancel()
		select {
		case err := <-done:
			if err != context.Canceled {
				t.Fatalf("want ctx.Err(), got %v", err)
			}
		case <-time.After(wait):
			t.Fatal("Stream did not return after cancellation")
		}
	})
	t.Run("close-stops-the-stream", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write(p.Fixture)
		}))
		defer srv.Close()
		s, err := p.Model(srv.URL).Stream(context.Background(), p.Request)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := s.Next(); err != nil || c.Type != "start" {
			t.Fatal(c, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal("a second Close must be fine:", err)
		}
		if _, err := s.Next(); !errors.Is(err, p.Closed) {
			t.Fatalf("Next after Close: %v", err)
		}
	})
}
