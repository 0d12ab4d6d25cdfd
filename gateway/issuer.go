package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/a2-runtime/a2/internal/netaddr"
	"github.com/go-jose/go-jose/v4"
)

// IssuerKeys are the signing keys an OpenID issuer publishes: found from
// its discovery document (<issuer>/.well-known/openid-configuration, its
// jwks_uri), fetched at start, fetched again every Refresh and when a
// token names a key ID it does not hold (at most every MinRefresh), so that
// the issuer can rotate its keys without a restart of the node.
type IssuerKeys struct {
	// Issuer is the issuer's URL: https, or http on loopback (tests).
	Issuer string
	// Client fetches (default: a client with a 10 s timeout).
	Client *http.Client
	// Refresh (default 10 minutes) and MinRefresh (default 30 s).
	Refresh, MinRefresh time.Duration
	// Logger receives failed refreshes (the keys held are kept).
	Logger *slog.Logger

	mu      sync.Mutex
	keys    jose.JSONWebKeySet
	jwksURL string
	fetched time.Time
	stop    chan struct{}
}

// Start fetches the keys and refreshes them until Stop.
func (k *IssuerKeys) Start(ctx context.Context) error {
	u, err := url.Parse(k.Issuer)
	if err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && netaddr.Loopback(u.Hostname()))) {
		return fmt.Errorf("the token issuer %q: an https:// URL (http only on loopback)", k.Issuer)
	}
	if k.Client == nil {
		k.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if k.Refresh <= 0 {
		k.Refresh = 10 * time.Minute
	}
	if k.MinRefresh <= 0 {
		k.MinRefresh = 30 * time.Second
	}
	if k.Logger == nil {
		k.Logger = slog.New(slog.DiscardHandler)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := k.getJSON(ctx, strings.TrimSuffix(k.Issuer, "/")+"/.well-known/openid-configuration", &doc); err != nil {
		return fmt.Errorf("the token issuer's discovery document: %w", err)
	}
	if doc.JWKSURI == "" {
		return fmt.Errorf("the token issuer %q publishes no jwks_uri", k.Issuer)
	}
	k.jwksURL = doc.JWKSURI
	if err := k.fetch(ctx); err != nil {
		return err
	}
	k.stop = make(chan struct{})
	go k.loop()
	return nil
}

// Stop ends the refreshes.
func (k *IssuerKeys) Stop() {
	if k.stop != nil {
		close(k.stop)
	}
}

func (k *IssuerKeys) loop() {
	t := time.NewTicker(k.Refresh)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			if err := k.fetch(context.Background()); err != nil {
				k.Logger.Warn("the token issuer's keys could not be fetched again: keeping the keys held", "issuer", k.Issuer, "err", err)
			}
		}
	}
}

// fetch reads the JWKS.
func (k *IssuerKeys) fetch(ctx context.Context) error {
	var set jose.JSONWebKeySet
	if err := k.getJSON(ctx, k.jwksURL, &set); err != nil {
		return fmt.Errorf("the token issuer's keys (%s): %w", k.jwksURL, err)
	}
	if len(set.Keys) == 0 {
		return fmt.Errorf("the token issuer's keys (%s): none", k.jwksURL)
	}
	k.mu.Lock()
	k.keys, k.fetched = set, time.Now()
	k.mu.Unlock()
	return nil
}

// current is the keys held.
func (k *IssuerKeys) current() jose.JSONWebKeySet {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys
}

// unknownKey fetches the keys again if kid is not among them and the last
// fetch is older than MinRefresh; it reports whether it did.
func (k *IssuerKeys) unknownKey(kid string) bool {
	k.mu.Lock()
	if len(k.keys.Key(kid)) > 0 || time.Since(k.fetched) < k.MinRefresh {
		k.mu.Unlock()
		return false
	}
	k.fetched = time.Now() // one fetch at a time for the unknown keys
	k.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.fetch(ctx); err != nil {
		k.Logger.Warn("the token issuer's keys could not be fetched for an unknown key ID", "issuer", k.Issuer, "kid", kid, "err", err)
		return false
	}
	return true
}

func (k *IssuerKeys) getJSON(ctx context.Context, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := k.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("GET %s: not JSON: %w", u, err)
	}
	return nil
}

// errUnknownKey is a token signed by a key the verifier does not hold.
var errUnknownKey = errors.New("the token's signature is not one of the node's keys")
