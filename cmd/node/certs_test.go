package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `node certs` writes a CA, a key and each node's certificate, keeps the
// CA and the key on a second run (nodes added later), writes private keys
// for their owner only, and refuses bad input without writing.
func TestCertsCommand(t *testing.T) {
	dir := t.TempDir()
	var out strings.Builder
	if err := runCerts([]string{"-dir", dir, "m1", "gateway"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.pem", "ca-key.pem", "cluster.key", "m1.pem", "m1-key.pem", "gateway.pem", "gateway-key.pem"} {
		if !strings.Contains(out.String(), filepath.Join(dir, f)) {
			t.Errorf("the output does not name %s:\n%s", f, out.String())
		}
	}
	for _, f := range []string{"ca-key.pem", "cluster.key", "m1-key.pem"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", f, err, st.Mode().Perm())
		}
	}
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	key, _ := os.ReadFile(filepath.Join(dir, "cluster.key"))
	if err := runCerts([]string{"-dir", dir, "m2"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	ca2, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	key2, _ := os.ReadFile(filepath.Join(dir, "cluster.key"))
	if !bytes.Equal(ca, ca2) || !bytes.Equal(key, key2) {
		t.Fatal("a second run replaced the CA or the cluster key")
	}
	if _, err := os.Stat(filepath.Join(dir, "m2.pem")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-dir", filepath.Join(dir, "none")}, {"-dir", filepath.Join(dir, "bad"), "../escape"}, {"-dir", filepath.Join(dir, "bad"), "ca"},
		{"-dir", filepath.Join(dir, "bad"), "-valid", "-1h", "m1"}} {
		if err := runCerts(args, io.Discard, io.Discard); err == nil {
			t.Errorf("%q: accepted", args)
		}
		if _, err := os.Stat(filepath.Join(dir, "bad", "ca.pem")); err == nil {
			t.Errorf("%q: wrote a CA", args)
		}
	}
}
