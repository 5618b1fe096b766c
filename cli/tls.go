package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/pki"
)

func init() { register(newTLSCmd) }

// parentArgs is the Args of a command that only groups subcommands: any
// argument left is an unknown subcommand.
func parentArgs(want string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usagef("want %s", want)
		}
		return usagef("unknown %s command %q: want %s", cmd.Name(), strings.Join(args, " "), want)
	}
}

func newTLSCmd(env *Env) *cobra.Command {
	want := "'tls ca create' or 'tls cert create'"
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "create the cluster CA and node certificates",
		Long: `'tls ca create' writes ca.pem and ca-key.pem (keep ca-key.pem private).
'tls cert create' signs a certificate for one node and writes ca.pem, node.pem and
node-key.pem into --out (default ./NAME), ready for 'reclaimnet agent --tls-dir'.`,
		GroupID: groupSetup,
		Args:    parentArgs(want),
		RunE:    func(*cobra.Command, []string) error { return nil },
	}
	ca := &cobra.Command{Use: "ca", Short: "the cluster's certificate authority", Args: parentArgs("'tls ca create'"),
		RunE: func(*cobra.Command, []string) error { return nil }}
	ca.AddCommand(newTLSCACreateCmd(env))
	cert := &cobra.Command{Use: "cert", Short: "node certificates", Args: parentArgs("'tls cert create'"),
		RunE: func(*cobra.Command, []string) error { return nil }}
	cert.AddCommand(newTLSCertCreateCmd(env))
	cmd.AddCommand(ca, cert)
	return cmd
}

func newTLSCACreateCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create",
		Short: "create the cluster CA (ca.pem, ca-key.pem)",
		Long:  "Creates the cluster's CA: ca.pem and ca-key.pem in --dir (keep ca-key.pem private). An existing CA\nis never overwritten.",
		Args:  noArgs,
	}
	fs := cmd.Flags()
	dir := fs.String("dir", ".", "`directory` to write ca.pem and ca-key.pem into")
	name := fs.String("name", "reclaimnet-ca", "the CA's name")
	cmd.RunE = func(*cobra.Command, []string) error { return runTLSCACreate(env, *dir, *name) }
	return cmd
}

func newTLSCertCreateCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create --node NAME",
		Short: "sign a node's certificate",
		Long:  "Signs a certificate for one node and writes ca.pem, node.pem and node-key.pem into --out,\nready for 'reclaimnet agent --tls-dir'.",
		Args:  noArgs,
	}
	fs := cmd.Flags()
	var o certOptions
	fs.StringVar(&o.node, "node", "", "node `name` the certificate is for (required)")
	fs.StringVar(&o.caDir, "ca-dir", ".", "`directory` with ca.pem and ca-key.pem")
	fs.StringVar(&o.out, "out", "", "`directory` to write ca.pem, node.pem, node-key.pem (default ./NODE)")
	fs.IntVar(&o.days, "days", int(pki.DefaultValidity/(24*time.Hour)), "validity in days")
	fs.StringArrayVar(&o.hosts, "host", nil, "extra IP `address` or DNS name of the node (repeatable)")
	cmd.RunE = func(*cobra.Command, []string) error { return runTLSCertCreate(env, o) }
	return cmd
}

type certOptions struct {
	node, caDir, out string
	days             int
	hosts            []string
}

func runTLSCACreate(env *Env, dir, name string) error {
	for _, f := range []string{pki.CAFile, pki.CAKeyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return fmt.Errorf("%s already exists in %s; refusing to overwrite a CA", f, dir)
		}
	}
	ca, err := pki.NewCA(name, time.Now())
	if err != nil {
		return fmt.Errorf("create CA: %w", err)
	}
	if err := ca.Write(dir); err != nil {
		return fmt.Errorf("write CA: %w", err)
	}
	fmt.Fprintf(env.Stdout, "==> Saved %s\n==> Saved %s\n", filepath.Join(dir, pki.CAFile), filepath.Join(dir, pki.CAKeyFile))
	return nil
}

func runTLSCertCreate(env *Env, o certOptions) error {
	if o.node == "" {
		return usagef("--node is required")
	}
	if err := pki.ValidNodeName(o.node); err != nil {
		return usagef("--node %q: %v", o.node, err)
	}
	if o.days <= 0 {
		return usagef("--days must be positive")
	}
	if o.out == "" {
		o.out = o.node
	}
	ca, err := pki.LoadCA(o.caDir)
	if err != nil {
		if errors.Is(err, pki.ErrMissing) {
			return fmt.Errorf("no CA in %s (create one with 'reclaimnet tls ca create'): %w", o.caDir, err)
		}
		return fmt.Errorf("load CA from %s: %w", o.caDir, err)
	}
	nc, err := ca.Issue(o.node, o.hosts, time.Duration(o.days)*24*time.Hour, time.Now())
	if err != nil {
		return fmt.Errorf("issue certificate: %w", err)
	}
	if err := nc.Write(o.out); err != nil {
		return fmt.Errorf("write certificate: %w", err)
	}
	for _, f := range []string{pki.CAFile, pki.NodeFile, pki.NodeKeyFile} {
		fmt.Fprintf(env.Stdout, "==> Saved %s\n", filepath.Join(o.out, f))
	}
	return nil
}
