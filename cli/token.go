package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/localapi"
)

func init() { register(newTokenCmd) }

// TokenList is what 'token list --json' prints.
type TokenList struct {
	Tokens []localapi.TokenInfo `json:"tokens"`
}

func newTokenCmd(env *Env) *cobra.Command {
	want := "'token create', 'token list' or 'token revoke ID'"
	cmd := &cobra.Command{
		Use:   "token",
		Short: "create, list and revoke join tokens (cluster admins)",
		Long: `Join tokens let a machine join the cluster: 'reclaimnet agent --join PEER --token TOKEN'.
A token carries the fingerprint of the cluster's CA, so the joining machine checks the peer
before it sends the token; the cluster stores only a hash of its secret. Tokens expire (a day
unless --ttl says otherwise, at most 90 days) and may be limited to a number of joins (--uses).
Only cluster admins may use these commands: root, the agent's user, and those named by the
agent's --admins.`,
		GroupID: groupNode,
		Args:    parentArgs(want),
		RunE:    func(*cobra.Command, []string) error { return nil },
	}
	cmd.AddCommand(newTokenCreateCmd(env), newTokenListCmd(env), newTokenRevokeCmd(env))
	return cmd
}

func newTokenCreateCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create",
		Short: "print a new join token (shown once)",
		Args:  noArgs,
	}
	fs := cmd.Flags()
	dir := dataDirFlag(fs)
	ttl := fs.Duration("ttl", 24*time.Hour, "how long the token is valid (at most 2160h, 90 days)")
	uses := fs.Int("uses", 0, "how many machines may join with it (0: any number until it expires)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *ttl <= 0 {
			return usagef("--ttl %v: want a positive duration such as 24h", *ttl)
		}
		if *uses < 0 {
			return usagef("--uses %d: want 0 (any) or more", *uses)
		}
		resp, err := callAgent(cmd.Context(), resolveDataDir(env, *dir), localapi.Request{Op: localapi.OpTokenCreate, TTL: *ttl, Uses: *uses})
		if err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, resp.Token)
		if len(resp.Tokens) == 1 {
			t := resp.Tokens[0]
			fmt.Fprintf(env.Stderr, "Token %s expires %s (%s). On the machine to add:\n  reclaimnet agent --data-dir DIR --join THIS-HOST --token TOKEN\n",
				t.ID, t.Expires.Format(time.RFC3339), usesText(t.MaxUses))
		}
		return nil
	}
	return cmd
}

func usesText(n int) string {
	if n == 0 {
		return "any number of joins"
	}
	if n == 1 {
		return "one join"
	}
	return fmt.Sprintf("%d joins", n)
}

func newTokenListCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "list the join tokens and their state (never their secrets)",
		Args:  noArgs,
	}
	fs := cmd.Flags()
	dir := dataDirFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return runTokenList(cmd.Context(), env, resolveDataDir(env, *dir), *asJSON)
	}
	return cmd
}

func runTokenList(ctx context.Context, env *Env, dataDir string, asJSON bool) error {
	resp, err := callAgent(ctx, dataDir, localapi.Request{Op: localapi.OpTokenList})
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(env.Stdout, TokenList{Tokens: append([]localapi.TokenInfo{}, resp.Tokens...)})
	}
	printTokens(env.Stdout, resp.Tokens)
	return nil
}

func printTokens(w io.Writer, tokens []localapi.TokenInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tEXPIRES\tUSED\tNODES")
	for _, t := range tokens {
		used := fmt.Sprintf("%d", t.Used)
		if t.MaxUses > 0 {
			used += fmt.Sprintf("/%d", t.MaxUses)
		}
		nodes := strings.Join(t.Nodes, ",")
		if nodes == "" {
			nodes = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, t.State, t.Expires.UTC().Format(time.RFC3339), used, nodes)
	}
	tw.Flush()
}

func newTokenRevokeCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "revoke a join token (machines that joined with it stay)",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("token revoke takes one token ID ('reclaimnet token list' shows them)")
			}
			return nil
		},
	}
	dir := dataDirFlag(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if _, err := callAgent(cmd.Context(), resolveDataDir(env, *dir), localapi.Request{Op: localapi.OpTokenRevoke, TokenID: args[0]}); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "revoked token %s\n", args[0])
		return nil
	}
	return cmd
}
