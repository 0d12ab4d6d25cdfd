package httptool

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Each call is a real request to a server on loopback: what the endpoint
// receives, and what the model gets back, for good and bad answers.
func TestCalls(t *testing.T) {
	var got struct {
		method, path, query, body, auth, ctype string
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.method, got.path, got.query, got.body = r.Method, r.URL.Path, r.URL.RawQuery, string(b)
		got.auth, got.ctype = r.Header.Get("Authorization"), r.Header.Get("Content-Type")
		switch r.URL.Path {
		case "/json":
			_, _ = w.Write([]byte(`{"status":"shipped"}`))
		case "/text":
			_, _ = w.Write([]byte("plain words"))
		case "/missing":
			http.Error(w, "no such order\n  A-9", http.StatusNotFound)
		case "/big":
			_, _ = w.Write([]byte(strings.Repeat("x", 2000)))
		case "/slow":
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
			}
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name              string
		o                 Options
		input             string
		wantOut, wantErr  string
		method, query     string
		body, auth, ctype string
	}{
		{name: "POST sends the input as a JSON body, and a JSON answer is the output as it is",
			o: Options{URL: srv.URL + "/json", Headers: map[string]string{"Authorization": "Bearer t0k"}}, input: `{"id":"A-1"}`,
			wantOut: `{"status":"shipped"}`, method: "POST", body: `{"id":"A-1"}`, auth: "Bearer t0k", ctype: "application/json"},
		{name: "GET sends the input's fields as the query",
			o: Options{URL: srv.URL + "/json?v=2", Method: "get"}, input: `{"id":"A-1","n":3}`,
			wantOut: `{"status":"shipped"}`, method: "GET", query: "id=A-1&n=3&v=2"},
		{name: "an answer that is not JSON is a JSON string",
			o: Options{URL: srv.URL + "/text"}, input: `{}`, wantOut: `"plain words"`, method: "POST", body: `{}`, ctype: "application/json"},
		{name: "a status of 400 or more fails the call with the status and the body's start",
			o: Options{URL: srv.URL + "/missing"}, input: `{}`, wantErr: "404 Not Found: no such order A-9", method: "POST", body: `{}`, ctype: "application/json"},
		{name: "a body over the bound fails the call",
			o: Options{URL: srv.URL + "/big", MaxResponseBytes: 1000}, input: `{}`, wantErr: "the response is larger than 1000 bytes", method: "POST", body: `{}`, ctype: "application/json"},
		{name: "a call over its timeout fails",
			o: Options{URL: srv.URL + "/slow", Timeout: 50 * time.Millisecond}, input: `{}`, wantErr: "context deadline exceeded", method: "POST", body: `{}`, ctype: "application/json"},
		{name: "GET of an input that is not an object fails before any request",
			o: Options{URL: srv.URL + "/json", Method: "GET"}, input: `[1]`, wantErr: "the input is not an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got.method, got.path, got.query, got.body, got.auth, got.ctype = "", "", "", "", "", ""
			tc.o.Name = "t"
			tool, err := New(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			out, err := tool.Execute(context.Background(), json.RawMessage(tc.input))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Execute = %s, %v; want an error with %q", out, err, tc.wantErr)
				}
			} else if err != nil || string(out) != tc.wantOut {
				t.Fatalf("Execute = %s, %v; want %s", out, err, tc.wantOut)
			}
			if got.method != tc.method || got.query != tc.query || got.body != tc.body || got.auth != tc.auth || got.ctype != tc.ctype {
				t.Fatalf("the endpoint got %+v", got)
			}
		})
	}
}

func TestNewRefusesWhatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{URL: "ftp://example.invalid/x"}, "is not an http or https URL"},
		{Options{URL: "http:///nohost"}, "is not an http or https URL"},
		{Options{URL: "http://127.0.0.1:1/", Method: "SEND"}, `the method "SEND" is not one of`},
	} {
		if _, err := New(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v; want an error with %q", tc.o, err, tc.want)
		}
	}
}
