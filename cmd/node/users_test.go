package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/a2-runtime/a2/internal/devcerts"
)

// The node admits only its users over HTTPS: --tls-cert and --tls-key serve
// TLS, --jwks and --jwt-audience verify bearer tokens; a request without a
// token is 401, a user's token opens its own sessions and not another's,
// and the banner says who may use the node.
func TestUsersOverHTTPS(t *testing.T) {
	dir := t.TempDir()
	ca, err := devcerts.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca.Cert, &hostKey.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(hostKey)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	certFile := write("https.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	keyFile := write("https-key.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	signKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	jwks, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &signKey.PublicKey, KeyID: "k", Algorithm: "ES256", Use: "sig"}}})
	jwksFile := write("jwks.json", jwks)

	cfg, err := parseServeFlags([]string{"--tls-cert", certFile, "--tls-key", keyFile, "--jwks", jwksFile, "--jwt-audience", "a2", "--model", "demo", "--data", t.TempDir()},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, cfg)
	if !strings.Contains(n.out.String(), "https://") || !strings.Contains(n.out.String(), "bearers of tokens") {
		t.Fatalf("the banner does not say https and who may use it:\n%s", n.out.String())
	}
	base := strings.Replace(n.url, "http://", "https://", 1)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}, Timeout: 20 * time.Second}
	signer, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: signKey}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k"))
	token := func(sub string) string {
		raw, err := jwt.Signed(signer).Claims(jwt.Claims{Subject: sub, Audience: jwt.Audience{"a2"}, Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	do := func(method, path, tok, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	push := `{"events":[{"id":"m1","type":"ai.control.requested","payload":{"action":"send","message":{"id":"m1","role":"user","parts":[{"type":"text","text":"hi"}]}}}]}`
	for _, c := range []struct {
		name, method, path, token, body string
		want                            int
	}{
		{"no token", http.MethodGet, "/v1/agents", "", "", 401},
		{"a token", http.MethodGet, "/v1/agents", token("ann"), "", 200},
		{"her session", http.MethodPost, "/v1/agents/assistant/sessions/ann:1/events", token("ann"), push, 200},
		{"another's session", http.MethodGet, "/v1/agents/assistant/sessions/ann:1/state", token("ben"), "", 403},
		{"the health check needs none", http.MethodGet, "/healthz", "", "", 200},
	} {
		if got := do(c.method, c.path, c.token, c.body); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	// Plain HTTP to the HTTPS port gets nothing served.
	resp, err := http.Get(n.url + "/v1/agents")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
			t.Fatalf("plain HTTP was served: %d", resp.StatusCode)
		}
	}
}
