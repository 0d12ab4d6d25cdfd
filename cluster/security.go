// How a cluster's nodes admit each other: a shared key for gossip
// (gossip.Config.Keys) and mutual TLS on the actor port, whose server also
// survives whatever a peer sends (docs/security.md).

package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// ReadKeyFile reads a cluster key file: one key per line, base64 (the
// standard alphabet) of 16, 24 or 32 random bytes; blank lines and lines
// starting with # are skipped. The first key encrypts what the node sends,
// every key opens what it receives (gossip.Config.Keys).
func ReadKeyFile(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the cluster key file: %w", err)
	}
	return parseKeys(path, b)
}

func parseKeys(path string, b []byte) ([][]byte, error) {
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		key, err := base64.StdEncoding.DecodeString(text)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: a cluster key is base64 of 16, 24 or 32 bytes: %v", path, line, err)
		}
		if n := len(key); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("%s:%d: a cluster key is 16, 24 or 32 bytes, not %d", path, line, n)
		}
		keys = append(keys, key)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no cluster key in the file (one base64 key per line; `node certs` makes one)", path)
	}
	return keys, nil
}

// TLS is mutual TLS on the actor port: every node presents a certificate
// the cluster's CA signed and accepts a peer only if its certificate
// chains to that CA. Host names are not checked: membership is the CA's
// signature (a node's address comes from the keyed gossip), so node
// certificates need no addresses.
type TLS struct {
	server, client *tls.Config
}

// LoadTLS reads the cluster's CA certificate and this node's certificate
// and private key (PEM files, as `node certs` writes them).
func LoadTLS(caFile, certFile, keyFile string) (*TLS, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("the cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("the cluster CA %s holds no PEM certificate", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("the node certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return NewTLS(pool, cert), nil
}

// NewTLS is LoadTLS from a CA pool and a certificate in memory.
func NewTLS(ca *x509.CertPool, cert tls.Certificate) *TLS {
	verify := func(usage x509.ExtKeyUsage) func(tls.ConnectionState) error {
		return func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the peer presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: ca, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
			return err
		}
	}
	return &TLS{
		server: &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    ca,
		},
		client: &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{cert},
			// The chain is verified against the cluster's CA below, not
			// against the system's roots and a host name (see TLS).
			InsecureSkipVerify: true, //nolint:gosec // VerifyConnection checks the chain
			VerifyConnection:   verify(x509.ExtKeyUsageServerAuth),
		},
	}
}

// maxRemoteMessage is the largest message a node's actor port accepts:
// one gRPC message of protoactor's endpoint writer, which carries up to a
// thousand actor messages together. gRPC's default, 4 MiB, is less than one
// state answer of a long session or one batch of a turn's large chunks;
// a message past the limit breaks the connection, losing every message it
// carried, and the sender's retry breaks it again. The limit costs nothing
// until used (gRPC allocates the message's size, not the limit's), and
// what a peer sends is the cluster's own (mutual TLS).
const maxRemoteMessage = 512 << 20

// remoteOptions are the actor remote's gRPC server and dial options: mutual
// TLS when t is set (with refused handshakes logged), and a server that
// turns a panic while handling what a peer sent into the end of that
// peer's stream, logged, instead of the end of the process.
func remoteOptions(t *TLS, logger *slog.Logger) ([]grpc.ServerOption, []grpc.DialOption) {
	server := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxRemoteMessage),
		grpc.ChainStreamInterceptor(recoverStream(logger)),
		grpc.ChainUnaryInterceptor(recoverUnary(logger)),
	}
	if t == nil {
		return server, []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	server = append(server, grpc.Creds(loggedCreds{TransportCredentials: credentials.NewTLS(t.server), logger: logger}))
	return server, []grpc.DialOption{grpc.WithTransportCredentials(loggedCreds{TransportCredentials: credentials.NewTLS(t.client), logger: logger})}
}

// loggedCreds logs the handshakes it refuses: a peer without a certificate
// of the cluster's CA, or one that does not speak TLS.
type loggedCreds struct {
	credentials.TransportCredentials
	logger *slog.Logger
}

func (c loggedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.logger.Warn("cluster: refused a connection to the actor port: no certificate of the cluster's CA",
			"peer", conn.RemoteAddr().String(), "err", err)
	}
	return out, info, err
}

func (c loggedCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, conn)
	if err != nil {
		c.logger.Warn("cluster: refused the actor port of a peer: no certificate of the cluster's CA",
			"peer", authority, "err", err)
	}
	return out, info, err
}

func (c loggedCreds) Clone() credentials.TransportCredentials {
	return loggedCreds{TransportCredentials: c.TransportCredentials.Clone(), logger: c.logger}
}

func recoverStream(logger *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				logger.Error("cluster: a peer's message broke the actor remote's reader; its stream ends, the node goes on",
					"method", info.FullMethod, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = status.Error(codes.Internal, "the message could not be handled")
			}
		}()
		return handler(srv, ss)
	}
}

func recoverUnary(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				logger.Error("cluster: a peer's request broke the actor remote; the node goes on",
					"method", info.FullMethod, "panic", fmt.Sprint(r))
				err = status.Error(codes.Internal, "the request could not be handled")
			}
		}()
		return handler(ctx, req)
	}
}
