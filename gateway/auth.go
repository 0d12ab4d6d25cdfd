package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Users: bearer tokens verified as JWTs (docs/security.md, "Users").
//
// With Options.Tokens set, every request of the untrusted routes needs
// "Authorization: Bearer <JWT>": signed by a key of the JWKS, not expired,
// of the expected issuer and audience. Its subject is the participant; the
// token's "a2" claim names the agents and sessions it may use:
//
//	{"sub": "alice", "a2": {"agents": ["support"], "sessions": ["alice:*", "shared-42"]}}
//
// Without "agents", every agent; without "sessions", the subject's own:
// the session IDs that start with the subject and a colon ("alice:…"),
// which its client creates by naming them so. A session pattern ending in
// "*" is a prefix. A request without a valid token is 401; a valid token
// for another agent or session is 403, and nothing is read or written.
// The Authorize hook still runs after, and finds the identity with
// IdentityFrom.

// Tokens verifies bearer tokens.
type Tokens struct {
	// Keys are the keys tokens may be signed with (a JWKS file's), or,
	// when KeysFrom is set, an OpenID issuer's published ones (started).
	Keys     jose.JSONWebKeySet
	KeysFrom *IssuerKeys
	// Issuer, when set, must be the token's "iss"; Audience, when set,
	// one of its "aud".
	Issuer, Audience string
	// Leeway is the clock skew allowed on "exp" and "nbf" (default 30 s).
	Leeway time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Identity is a verified token's holder and what it may use.
type Identity struct {
	// Subject is the token's "sub": the participant.
	Subject string
	// Agents the holder may use; nil: every agent.
	Agents []string
	// Sessions the holder may use, exact IDs or prefixes ending in "*";
	// nil: the IDs that start with Subject + ":".
	Sessions []string
}

// Allows reports whether the identity may use agent's session (session ""
// asks about the agent alone).
func (id *Identity) Allows(agent, session string) bool {
	if id.Agents != nil && !slices.Contains(id.Agents, agent) {
		return false
	}
	if session == "" {
		return true
	}
	if id.Sessions == nil {
		return strings.HasPrefix(session, id.Subject+":")
	}
	for _, p := range id.Sessions {
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(session, prefix) || p == session {
			return true
		}
	}
	return false
}

// LoadJWKS reads a JWKS file ({"keys": [...]}, as an identity provider
// publishes it).
func LoadJWKS(path string) (jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	b, err := os.ReadFile(path)
	if err != nil {
		return set, fmt.Errorf("the JWKS file: %w", err)
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return set, fmt.Errorf("the JWKS file %s: %w", path, err)
	}
	if len(set.Keys) == 0 {
		return set, fmt.Errorf("the JWKS file %s holds no key", path)
	}
	for i, k := range set.Keys {
		if !k.Valid() || !k.IsPublic() {
			return set, fmt.Errorf("the JWKS file %s: key %d (kid %q) is not a valid public key", path, i, k.KeyID)
		}
	}
	return set, nil
}

// tokenAlgorithms are the signatures accepted: asymmetric ones only, so
// that a public key can never verify a token signed with it as an HMAC
// secret.
var tokenAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA}

// a2Claims is the token's claim of what it may use.
type a2Claims struct {
	A2 *struct {
		Agents   []string `json:"agents"`
		Sessions []string `json:"sessions"`
	} `json:"a2"`
}

// Verify checks a token and returns its identity.
func (t *Tokens) Verify(raw string) (*Identity, error) {
	tok, err := jwt.ParseSigned(raw, tokenAlgorithms)
	if err != nil {
		return nil, fmt.Errorf("the token is not a signed JWT: %w", err)
	}
	var std jwt.Claims
	var own a2Claims
	keys := t.Keys
	if t.KeysFrom != nil {
		keys = t.KeysFrom.current()
	}
	if err := tok.Claims(keys, &std, &own); err != nil {
		// A key the issuer has just rotated in: its keys again, once.
		kid := ""
		if len(tok.Headers) > 0 {
			kid = tok.Headers[0].KeyID
		}
		if t.KeysFrom == nil || kid == "" || !t.KeysFrom.unknownKey(kid) || tok.Claims(t.KeysFrom.current(), &std, &own) != nil {
			return nil, errUnknownKey
		}
	}
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	exp := jwt.Expected{Issuer: t.Issuer, Time: now()}
	if t.Audience != "" {
		exp.AnyAudience = jwt.Audience{t.Audience}
	}
	leeway := t.Leeway
	if leeway == 0 {
		leeway = 30 * time.Second
	}
	if err := std.ValidateWithLeeway(exp, leeway); err != nil {
		switch {
		case errors.Is(err, jwt.ErrExpired):
			return nil, errors.New("the token has expired")
		case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
			return nil, errors.New("the token is not valid yet")
		case errors.Is(err, jwt.ErrInvalidAudience):
			return nil, fmt.Errorf("the token is not for this audience (want %q)", t.Audience)
		case errors.Is(err, jwt.ErrInvalidIssuer):
			return nil, fmt.Errorf("the token is not of this issuer (want %q)", t.Issuer)
		}
		return nil, fmt.Errorf("the token's claims: %w", err)
	}
	if std.Expiry == nil {
		return nil, errors.New("the token has no expiry (exp)")
	}
	if std.Subject == "" {
		return nil, errors.New("the token has no subject (sub)")
	}
	id := &Identity{Subject: std.Subject}
	if own.A2 != nil {
		id.Agents, id.Sessions = own.A2.Agents, own.A2.Sessions
	}
	return id, nil
}

type identityKey struct{}

// IdentityFrom is the verified identity of a request's token (Authorize
// sees it in its context); nil without Options.Tokens.
func IdentityFrom(ctx context.Context) *Identity {
	id, _ := ctx.Value(identityKey{}).(*Identity)
	return id
}

// authenticate verifies the request's bearer token when Tokens is set and
// returns the request with the identity in its context.
func (g *Gateway) authenticate(r *http.Request) (*http.Request, error) {
	if g.opts.Tokens == nil {
		return r, nil
	}
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(raw) == "" {
		return r, errorf(http.StatusUnauthorized, CodeUnauthorized, "Authorization", "this node admits its users only: send Authorization: Bearer <token>")
	}
	id, err := g.opts.Tokens.Verify(strings.TrimSpace(raw))
	if err != nil {
		return r, errorf(http.StatusUnauthorized, CodeUnauthorized, "Authorization", "%s", err)
	}
	return r.WithContext(context.WithValue(r.Context(), identityKey{}, id)), nil
}
