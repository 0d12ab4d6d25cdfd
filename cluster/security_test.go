package cluster

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/cluster/clusterpb"
	"github.com/a2-runtime/a2/internal/devcerts"
	"github.com/a2-runtime/a2/internal/testutil"
	"github.com/a2-runtime/a2/protocol"
)

// startTestGateway starts a gateway in this process that joins join.
func startTestGateway(t testing.TB, join string, keys [][]byte, tlsc *TLS, logger *slog.Logger) *Node {
	t.Helper()
	agent := scriptAgent(t, `{"default":{"text":"x"}}`)
	n, err := New(Config{Name: "unit", Role: RoleGateway, Bind: freeGossipAddr(t), Join: []string{join}, Agents: []*actors.Agent{agent},
		Keys: keys, TLS: tlsc, Logger: logger, AttemptTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Leave(context.Background()) })
	return n
}

func tlsFrom(t *testing.T, ca *devcerts.CA, name string) *TLS {
	t.Helper()
	cert, err := ca.IssueTLS(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return NewTLS(ca.Pool(), cert)
}

// With mutual TLS on the actor port, a node whose certificate the
// cluster's CA did not sign gets nothing through, even inside the keyed
// gossip, and the member logs the refusal; a node of the cluster's CA is
// served.
func TestActorPortAdmitsOnlyTheClustersCertificates(t *testing.T) {
	ca, err := devcerts.NewCA("cluster", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := devcerts.NewCA("another", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	key := [][]byte{bytes.Repeat([]byte{7}, 32)}
	logs := &testutil.SyncBuffer{}
	m, _ := startTestMember(t, memberSetup{script: `{"default":{"text":"served"}}`, keys: key, tls: tlsFrom(t, ca, "m1"),
		logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	ours := startTestGateway(t, m.cfg.Bind, key, tlsFrom(t, ca, "g1"), nil)
	if _, err := ours.Router().Push(ctx, "assistant", "s1", []protocol.Event{protocol.Inputs.Text("m1", "hello")}, false); err != nil {
		t.Fatalf("a gateway of the cluster's CA: push: %v", err)
	}

	stranger := startTestGateway(t, m.cfg.Bind, key, tlsFrom(t, other, "g2"), nil)
	sctx, scancel := context.WithTimeout(ctx, 4*time.Second)
	defer scancel()
	if _, err := stranger.Router().Push(sctx, "assistant", "s2", []protocol.Event{protocol.Inputs.Text("m2", "hello")}, false); err == nil {
		t.Fatal("a gateway of another CA pushed through the member")
	}
	if _, _, err := stranger.Router().State(sctx, "assistant", "s1"); err == nil {
		t.Fatal("a gateway of another CA read a session's state")
	}
	if !strings.Contains(logs.String(), "refused a connection to the actor port") {
		t.Fatalf("the member did not log the refusal:\n%s", logs.String())
	}
	// The cluster's own gateway is still served.
	if _, _, err := ours.Router().State(ctx, "assistant", "s1"); err != nil {
		t.Fatalf("the cluster's gateway after the stranger: %v", err)
	}
}

// The cluster key file: base64 keys of 16, 24 or 32 bytes, one per line,
// comments and blank lines skipped; anything else is an error at its line.
func TestReadKeyFile(t *testing.T) {
	dir := t.TempDir()
	k32, k16 := devcerts.NewKey(), "AAECAwQFBgcICQoLDA0ODw=="
	cases := []struct {
		name, text, err string
		keys            int
	}{
		{"two keys and a comment", "# rotation\n" + k32 + "\n\n" + k16 + "\n", "", 2},
		{"empty", "# nothing\n\n", "no cluster key", 0},
		{"not base64", k32 + "\nnot base64!\n", ":2: a cluster key is base64", 0},
		{"wrong length", "AAEC\n", ":1: a cluster key is 16, 24 or 32 bytes, not 3", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
			if err := os.WriteFile(path, []byte(c.text), 0o600); err != nil {
				t.Fatal(err)
			}
			keys, err := ReadKeyFile(path)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("ReadKeyFile = %d keys, %v; want an error with %q", len(keys), err, c.err)
				}
				return
			}
			if err != nil || len(keys) != c.keys {
				t.Fatalf("ReadKeyFile = %d keys, %v; want %d", len(keys), err, c.keys)
			}
		})
	}
	if _, err := ReadKeyFile(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing file read")
	}
}

// FuzzActorPort sends what a peer can put in a protoactor message batch
// straight to a member's actor port: indexes past the batch's tables, a
// serializer or type the node does not know, bytes that do not decode.
// protoactor's reader panics on several of them; the node must not: the
// peer's stream ends, and the member goes on serving. (A node in this
// process: a crash would end the test binary.)
func FuzzActorPort(f *testing.F) {
	m, _ := startTestMember(f, memberSetup{script: `{"default":{"text":"still serving"}}`})
	host, port, _ := remoteAddr(m.cfg.Bind)
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	target := actor.NewPID(m.self.Address(), activatorName)
	f.Add("actor.PID", int32(0), int32(0), int32(0), []byte{})                  // a known type, empty
	f.Add("actor.PID", int32(5), int32(0), int32(0), []byte{})                  // a type index past the table
	f.Add("actor.PID", int32(0), int32(0), int32(9), []byte{})                  // a target index past the table
	f.Add("actor.PID", int32(0), int32(7), int32(0), []byte{})                  // an unknown serializer
	f.Add("no.Such", int32(0), int32(0), int32(0), []byte{1, 2})                // an unknown type
	f.Add("cluster.Envelope", int32(0), int32(0), int32(0), []byte{0xff, 0xff}) // bytes that do not decode
	f.Add("actor.PID", int32(-1), int32(-1), int32(-1), []byte{0x0a})
	turn := 0
	f.Fuzz(func(t *testing.T, typeName string, typeID, serializerID, targetIdx int32, data []byte) {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stream, err := remote.NewRemotingClient(conn).Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
			ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: "fuzz", Address: "127.0.0.1:1"}}}}})
		_ = stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: &remote.MessageBatch{
			TypeNames: []string{typeName},
			Targets:   []*actor.PID{target},
			Envelopes: []*remote.MessageEnvelope{{TypeId: typeID, SerializerId: serializerID, Target: targetIdx, MessageData: data}},
		}}})
		_ = stream.CloseSend()
		// Whatever the reader made of it, the member still serves a turn.
		turn++
		session := "fuzz-" + strconv.Itoa(turn)
		if _, err := m.Router().Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Text(session+"-m", "hi")}, false); err != nil {
			t.Fatalf("the member after the batch: %v", err)
		}
	})
}

// FuzzEnvelope sends a member's grain and activator envelopes of every
// kind, with whatever version and body: each is answered (an error for
// what does not decode or is not known), ignored (a one-way kind) or
// served, never a crash, and the member goes on serving a turn. (A node
// in this process: a crash would end the test binary.)
func FuzzEnvelope(f *testing.F) {
	m, _ := startTestMember(f, memberSetup{script: `{"default":{"text":"still serving"}}`})
	for _, kind := range []string{kindPush, kindState, kindHistory, kindIdle, kindSubscribe, kindSubscribeIdle, kindPushStream,
		kindStreamBatch, kindStreamAck, kindStreamEnd, kindActivate, kindRelease, kindResult, kindError, "banana"} {
		f.Add(uint32(version), kind, []byte{}, false)
		f.Add(uint32(version), kind, []byte{0x0a, 0x02, 'x', 'y', 0x12, 0x01}, true)
	}
	f.Add(uint32(version+1), kindPush, []byte{0xff}, false)
	turn := 0
	f.Fuzz(func(t *testing.T, v uint32, kind string, body []byte, toActivator bool) {
		to := actor.NewPID(m.self.Address(), grainPrefix+"fuzz")
		if toActivator {
			to = actor.NewPID(m.self.Address(), activatorName)
		}
		env := &clusterpb.Envelope{Version: v, Kind: kind, Body: body}
		if res, err := m.ask(to, env, 2*time.Second); err == nil && res.Kind != kindError && res.Kind != kindResult {
			t.Fatalf("answered a %q envelope with kind %q", kind, res.Kind)
		}
		turn++
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		session := "after-" + strconv.Itoa(turn)
		if _, err := m.Router().Push(ctx, "assistant", session, []protocol.Event{protocol.Inputs.Text(session+"-m", "hi")}, false); err != nil {
			t.Fatalf("the member after a %q envelope: %v", kind, err)
		}
	})
}
