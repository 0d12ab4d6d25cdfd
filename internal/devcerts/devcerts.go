// Package devcerts makes what a cluster needs to admit only its own nodes,
// for development and tests: a certificate authority, node certificates it
// signs (mutual TLS on the actor port) and a gossip key. `node certs`
// writes them to a directory; production deployments bring their own CA.
package devcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// CA is a certificate authority: its certificate and private key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA makes a CA valid for the given duration (ECDSA P-256).
func NewCA(name string, valid time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"A2 cluster (development)"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(valid),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Pool is a pool holding the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// CertPEM is the CA's certificate, PEM-encoded.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// Issue makes a node certificate the CA signs, for both ends of a
// connection (server and client authentication), and returns it with its
// private key, PEM-encoded.
func (ca *CA) Issue(name string, valid time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"A2 cluster (development)"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(valid),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{name},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// IssueTLS is Issue as a tls.Certificate.
func (ca *CA) IssueTLS(name string, valid time.Duration) (tls.Certificate, error) {
	c, k, err := ca.Issue(name, valid)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(c, k)
}

// NewKey makes a gossip key: 32 random bytes, base64 on one line.
func NewKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// Files name what Write wrote or kept, relative to its directory.
const (
	CAFile    = "ca.pem"
	CAKeyFile = "ca-key.pem"
	KeyFile   = "cluster.key"
)

var nodeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// Write makes dir hold a CA (kept if ca.pem and ca-key.pem exist, so that
// nodes can be added later), a gossip key (cluster.key, kept if it
// exists), and for each name a certificate NAME.pem and its key
// NAME-key.pem, valid for the given duration. Private keys are written
// readable by their owner only. It returns the files it wrote.
func Write(dir string, names []string, valid time.Duration) ([]string, error) {
	if len(names) == 0 {
		return nil, errors.New("name at least one node (its certificate is NAME.pem)")
	}
	for _, n := range names {
		if !nodeName.MatchString(n) || n == "ca" {
			return nil, fmt.Errorf("node name %q: use letters, digits, '.', '_' and '-' (up to 63), not \"ca\"", n)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var wrote []string
	write := func(name string, data []byte, mode fs.FileMode) error {
		if err := os.WriteFile(filepath.Join(dir, name), data, mode); err != nil {
			return err
		}
		wrote = append(wrote, name)
		return nil
	}
	ca, err := loadCA(filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		if ca, err = NewCA("a2-cluster-ca", valid); err != nil {
			return nil, err
		}
		kder, err := x509.MarshalECPrivateKey(ca.Key)
		if err != nil {
			return nil, err
		}
		if err := write(CAFile, ca.CertPEM(), 0o644); err != nil {
			return nil, err
		}
		if err := write(CAKeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, KeyFile)); errors.Is(err, fs.ErrNotExist) {
		if err := write(KeyFile, []byte("# the cluster's gossip key (--cluster-key-file): one base64 key per line, the first encrypts\n"+NewKey()+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	for _, n := range names {
		c, k, err := ca.Issue(n, valid)
		if err != nil {
			return nil, err
		}
		if err := write(n+".pem", c, 0o644); err != nil {
			return nil, err
		}
		if err := write(n+"-key.pem", k, 0o600); err != nil {
			return nil, err
		}
	}
	return wrote, nil
}

// loadCA reads a CA Write made.
func loadCA(certFile, keyFile string) (*CA, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	cblock, _ := pem.Decode(cb)
	kblock, _ := pem.Decode(kb)
	if cblock == nil || kblock == nil {
		return nil, fmt.Errorf("%s or %s is not PEM", certFile, keyFile)
	}
	cert, err := x509.ParseCertificate(cblock.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certFile, err)
	}
	key, err := x509.ParseECPrivateKey(kblock.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}
