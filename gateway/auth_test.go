package gateway_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/protocol"
)

// issuer signs test tokens with its own key.
type issuer struct {
	t   *testing.T
	key *ecdsa.PrivateKey
	kid string
}

func newIssuer(t *testing.T, kid string) *issuer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &issuer{t: t, key: k, kid: kid}
}

func (i *issuer) public() jose.JSONWebKey {
	return jose.JSONWebKey{Key: &i.key.PublicKey, KeyID: i.kid, Algorithm: string(jose.ES256), Use: "sig"}
}

// token signs claims: sub, aud, exp (from now), and the a2 claim when set.
func (i *issuer) token(sub, aud string, exp time.Duration, a2 map[string][]string) string {
	i.t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: i.key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", i.kid))
	if err != nil {
		i.t.Fatal(err)
	}
	std := jwt.Claims{Subject: sub, Issuer: "https://id.test", Audience: jwt.Audience{aud}, Expiry: jwt.NewNumericDate(time.Now().Add(exp)),
		IssuedAt: jwt.NewNumericDate(time.Now())}
	b := jwt.Signed(signer).Claims(std)
	if a2 != nil {
		b = b.Claims(map[string]any{"a2": a2})
	}
	raw, err := b.Serialize()
	if err != nil {
		i.t.Fatal(err)
	}
	return raw
}

// With Tokens, the untrusted routes admit only holders of a valid token,
// each to the agents and sessions its token names: user A's token cannot
// read, stream or push to user B's session; a missing, expired, foreign or
// wrong-audience token is 401; nothing is read or written on a refusal; the
// Authorize hook sees the identity.
func TestTokensAdmitOnlyTheirHolders(t *testing.T) {
	us, them := newIssuer(t, "k1"), newIssuer(t, "k2")
	var mu sync.Mutex
	var seen []string
	f := newFixture(t, `{"default":{"text":"ok"}}`, gateway.Options{
		Tokens: &gateway.Tokens{Keys: jose.JSONWebKeySet{Keys: []jose.JSONWebKey{us.public()}}, Issuer: "https://id.test", Audience: "a2"},
		Authorize: func(ctx context.Context, op gateway.Operation) error {
			mu.Lock()
			defer mu.Unlock()
			if id := gateway.IdentityFrom(ctx); id != nil {
				seen = append(seen, id.Subject+" "+string(op.Type))
			}
			return nil
		},
	}, nil)
	passive := false
	note := func(id string) string {
		return pushBody(protocol.Inputs.Message(protocol.UIMessage{ID: id, Role: protocol.RoleUser, Parts: []protocol.Part{{Type: protocol.PartText, Text: id}}},
			protocol.MessageOptions{Generate: &passive}))
	}
	alice := us.token("alice", "a2", time.Hour, nil)
	bob := us.token("bob", "a2", time.Hour, nil)
	shared := us.token("carol", "a2", time.Hour, map[string][]string{"sessions": {"team-*", "exact"}})
	otherAgent := us.token("dave", "a2", time.Hour, map[string][]string{"agents": {"billing"}})
	bearer := func(tok string) map[string]string {
		if tok == "" {
			return nil
		}
		return map[string]string{"Authorization": "Bearer " + tok}
	}
	ctx := context.Background()
	seed := func(session string) {
		if status, b := f.do(http.MethodPost, sessionsPath+session+"/events", note("seed-"+strings.ReplaceAll(session, ":", "-")), bearer(us.token(strings.Split(session, ":")[0], "a2", time.Hour, map[string][]string{"sessions": {session}}))); status != http.StatusOK {
			t.Fatalf("seeding %s: %d %s", session, status, b)
		}
	}
	seed("bob:notes")
	cases := []struct {
		name, token, method, path, body string
		status                          int
		say                             string
	}{
		{"alice pushes to her session", alice, http.MethodPost, "alice:notes/events", note("a1"), 200, ""},
		{"alice reads her session", alice, http.MethodGet, "alice:notes/state", "", 200, ""},
		{"alice pushes to bob's session", alice, http.MethodPost, "bob:notes/events", note("a2"), 403, "of session"},
		{"alice reads bob's state", alice, http.MethodGet, "bob:notes/state", "", 403, "does not name it"},
		{"alice reads bob's history", alice, http.MethodGet, "bob:notes/events", "", 403, ""},
		{"alice streams bob's session", alice, http.MethodGet, "bob:notes/stream", "", 403, ""},
		{"bob reads his session", bob, http.MethodGet, "bob:notes/state", "", 200, ""},
		{"a session whose ID is only like hers", alice, http.MethodGet, "alice-notes/state", "", 403, ""},
		{"a claim's prefix", shared, http.MethodPost, "team-7/events", note("c1"), 200, ""},
		{"a claim's exact ID", shared, http.MethodGet, "exact/state", "", 200, ""},
		{"a claim names sessions: not her own then", shared, http.MethodGet, "carol:x/state", "", 403, ""},
		{"a token for another agent", otherAgent, http.MethodGet, "dave:x/state", "", 403, "names other agents (billing)"},
		{"no token", "", http.MethodGet, "alice:notes/state", "", 401, "Authorization: Bearer"},
		{"no token, a push", "", http.MethodPost, "alice:notes/events", note("n1"), 401, ""},
		{"an expired token", us.token("alice", "a2", -time.Hour, nil), http.MethodGet, "alice:notes/state", "", 401, "expired"},
		{"another issuer's key", them.token("alice", "a2", time.Hour, nil), http.MethodGet, "alice:notes/state", "", 401, "signature"},
		{"another audience", us.token("alice", "billing", time.Hour, nil), http.MethodGet, "alice:notes/state", "", 401, "audience"},
		{"not a JWT", "hello", http.MethodGet, "alice:notes/state", "", 401, "not a signed JWT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			session := strings.SplitN(c.path, "/", 2)[0]
			before, _ := f.Store.LastIndex(ctx, session)
			status, h, b := f.request(c.method, sessionsPath+c.path, c.body, bearer(c.token))
			if status != c.status || (c.say != "" && !strings.Contains(string(b), c.say)) {
				t.Fatalf("%d %s; want %d saying %q", status, b, c.status, c.say)
			}
			if status == http.StatusUnauthorized && !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("a 401 without WWW-Authenticate: %q", h.Get("WWW-Authenticate"))
			}
			if after, _ := f.Store.LastIndex(ctx, session); status != http.StatusOK && after != before {
				t.Fatalf("a refused request changed session %s: index %d, was %d", session, after, before)
			}
		})
	}
	// The agents a token may use are the ones listed.
	if status, b := f.do(http.MethodGet, "/v1/agents", "", bearer(otherAgent)); status != 200 || strings.Contains(string(b), "assistant") {
		t.Fatalf("GET /v1/agents with a token for another agent: %d %s", status, b)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(seen, "alice push") || !slices.Contains(seen, "carol read") {
		t.Fatalf("Authorize saw %v; want the identities of the admitted requests", seen)
	}
}
