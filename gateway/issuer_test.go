package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/a2-runtime/a2/gateway"
)

// Keys from an OpenID issuer: found by its discovery document, fetched at
// start, and fetched again when a token names a key the node does not hold
// (the issuer rotated), at most once per MinRefresh; a token of a key the
// issuer does not publish stays refused.
func TestIssuerKeysFollowRotation(t *testing.T) {
	first, second := newIssuer(t, "k1"), newIssuer(t, "k2")
	var mu sync.Mutex
	published := []jose.JSONWebKey{first.public()}
	var fetches atomic.Int32
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			_ = json.NewEncoder(w).Encode(map[string]string{"issuer": srv.URL, "jwks_uri": srv.URL + "/keys"})
		case "/keys":
			fetches.Add(1)
			mu.Lock()
			defer mu.Unlock()
			_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: published})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	keys := &gateway.IssuerKeys{Issuer: srv.URL, MinRefresh: 200 * time.Millisecond}
	if err := keys.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer keys.Stop()
	tokens := &gateway.Tokens{KeysFrom: keys, Audience: "a2"}
	if _, err := tokens.Verify(first.token("alice", "a2", time.Hour, nil)); err != nil {
		t.Fatalf("a token of the published key: %v", err)
	}
	// The issuer rotates: the new key's token makes the node fetch again.
	mu.Lock()
	published = []jose.JSONWebKey{first.public(), second.public()}
	mu.Unlock()
	time.Sleep(250 * time.Millisecond) // past MinRefresh since the start's fetch
	before := fetches.Load()
	if id, err := tokens.Verify(second.token("bob", "a2", time.Hour, nil)); err != nil || id.Subject != "bob" {
		t.Fatalf("a token of the rotated-in key: %v, %v", id, err)
	}
	if fetches.Load() != before+1 {
		t.Fatalf("%d fetches for the new key, want 1", fetches.Load()-before)
	}
	// A key the issuer never published: refused, and ten such tokens in a
	// row fetch at most once (MinRefresh).
	stranger := newIssuer(t, "k9")
	before = fetches.Load()
	for range 10 {
		if _, err := tokens.Verify(stranger.token("eve", "a2", time.Hour, nil)); err == nil || !strings.Contains(err.Error(), "signature") {
			t.Fatalf("a token of an unpublished key: %v", err)
		}
	}
	if n := fetches.Load() - before; n > 1 {
		t.Fatalf("%d fetches for ten tokens of an unknown key, want at most 1", n)
	}

	for _, c := range []struct{ issuer, want string }{
		{"http://id.example.com", "https:// URL"},
		{srv.URL + "/nothing-here", "discovery document"},
	} {
		k := &gateway.IssuerKeys{Issuer: c.issuer}
		if err := k.Start(context.Background()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Start(%s) = %v, want an error with %q", c.issuer, err, c.want)
		}
	}
}
