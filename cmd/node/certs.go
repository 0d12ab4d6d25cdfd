package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/a2-runtime/a2/internal/devcerts"
)

// runCerts is `node certs`: a development CA, a certificate for each node
// named, and the cluster's gossip key, in a directory (docs/security.md).
func runCerts(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "certs", "directory to write to; a CA and a key already there are kept, so nodes can be added later")
	valid := fs.Duration("valid", 365*24*time.Hour, "how long the certificates are valid")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: node certs [-dir certs] [-valid 8760h] NAME...")
		fmt.Fprintln(stderr, "makes a development CA (ca.pem, ca-key.pem), NAME.pem and NAME-key.pem for each node, and cluster.key")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("certs: name at least one node")
	}
	if *valid <= 0 {
		return fmt.Errorf("certs: -valid must be positive, not %s", *valid)
	}
	wrote, err := devcerts.Write(*dir, fs.Args(), *valid)
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	for _, f := range wrote {
		fmt.Fprintln(stdout, "wrote", filepath.Join(*dir, f))
	}
	name := fs.Arg(0)
	fmt.Fprintf(stdout, "\nstart each node with (its own NAME):\n  --cluster-key-file %s --cluster-ca %s --cluster-cert %s --cluster-cert-key %s\n",
		filepath.Join(*dir, devcerts.KeyFile), filepath.Join(*dir, devcerts.CAFile), filepath.Join(*dir, name+".pem"), filepath.Join(*dir, name+"-key.pem"))
	return nil
}
