package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/reclaimnet/reclaimnet/pki"
)

func init() {
	register(&command{
		name:     "tls",
		synopsis: "create the cluster CA and node certificates",
		usage: `reclaimnet tls ca create [--dir DIR] [--name NAME]
reclaimnet tls cert create --node NAME [--ca-dir DIR] [--out DIR] [--host ADDR]... [--days N]

'ca create' writes ca.pem and ca-key.pem (keep ca-key.pem private).
'cert create' signs a certificate for one node and writes ca.pem, node.pem
and node-key.pem into --out (default ./NAME), ready for 'reclaimnet agent
--tls-dir'.`,
		run: runTLS,
	})
}

func runTLS(_ context.Context, env *Env, args []string) error {
	if len(args) < 2 {
		return usagef("want 'tls ca create' or 'tls cert create'")
	}
	switch args[0] + " " + args[1] {
	case "ca create":
		return runTLSCACreate(env, args[2:])
	case "cert create":
		return runTLSCertCreate(env, args[2:])
	}
	return usagef("unknown tls command %q", args[0]+" "+args[1])
}

func runTLSCACreate(env *Env, args []string) error {
	fs := newFlagSet(env, "tls")
	dir := fs.String("dir", ".", "directory to write ca.pem and ca-key.pem into")
	name := fs.String("name", "reclaimnet-ca", "the CA's name")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	for _, f := range []string{pki.CAFile, pki.CAKeyFile} {
		if _, err := os.Stat(filepath.Join(*dir, f)); err == nil {
			return fmt.Errorf("%s already exists in %s; refusing to overwrite a CA", f, *dir)
		}
	}
	ca, err := pki.NewCA(*name, time.Now())
	if err != nil {
		return fmt.Errorf("create CA: %w", err)
	}
	if err := ca.Write(*dir); err != nil {
		return fmt.Errorf("write CA: %w", err)
	}
	fmt.Fprintf(env.Stdout, "==> Saved %s\n==> Saved %s\n", filepath.Join(*dir, pki.CAFile), filepath.Join(*dir, pki.CAKeyFile))
	return nil
}

func runTLSCertCreate(env *Env, args []string) error {
	fs := newFlagSet(env, "tls")
	node := fs.String("node", "", "node name the certificate is for (required)")
	caDir := fs.String("ca-dir", ".", "directory with ca.pem and ca-key.pem")
	out := fs.String("out", "", "directory to write ca.pem, node.pem, node-key.pem (default ./NODE)")
	days := fs.Int("days", int(pki.DefaultValidity/(24*time.Hour)), "validity in days")
	var hosts listFlag
	fs.Var(&hosts, "host", "extra IP address or DNS name of the node (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *node == "" {
		return usagef("--node is required")
	}
	if err := pki.ValidNodeName(*node); err != nil {
		return usagef("--node %q: %v", *node, err)
	}
	if *days <= 0 {
		return usagef("--days must be positive")
	}
	if *out == "" {
		*out = *node
	}
	ca, err := pki.LoadCA(*caDir)
	if err != nil {
		if errors.Is(err, pki.ErrMissing) {
			return fmt.Errorf("no CA in %s (create one with 'reclaimnet tls ca create'): %w", *caDir, err)
		}
		return fmt.Errorf("load CA from %s: %w", *caDir, err)
	}
	nc, err := ca.Issue(*node, hosts, time.Duration(*days)*24*time.Hour, time.Now())
	if err != nil {
		return fmt.Errorf("issue certificate: %w", err)
	}
	if err := nc.Write(*out); err != nil {
		return fmt.Errorf("write certificate: %w", err)
	}
	for _, f := range []string{pki.CAFile, pki.NodeFile, pki.NodeKeyFile} {
		fmt.Fprintf(env.Stdout, "==> Saved %s\n", filepath.Join(*out, f))
	}
	return nil
}
