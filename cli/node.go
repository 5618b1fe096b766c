package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/localapi"
)

func init() { register(newNodeCmd) }

func newNodeCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "node",
		Short:   "manage the cluster's nodes (cluster admins)",
		GroupID: groupNode,
		Args:    parentArgs("'node remove NAME'"),
		RunE:    func(*cobra.Command, []string) error { return nil },
	}
	remove := &cobra.Command{
		Use:   "remove NAME",
		Short: "revoke a node: every member refuses its certificate, and it leaves the cluster",
		Long: `Revokes every certificate issued to the node NAME so far: every member refuses it from
then on, its jobs are recovered elsewhere, and it is gone from 'members' however long it keeps
gossiping. The name may join again with a new token (and gets a new certificate).
Only cluster admins may remove nodes.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("node remove takes one node name")
			}
			return nil
		},
	}
	dir := dataDirFlag(remove.Flags())
	remove.RunE = func(cmd *cobra.Command, args []string) error {
		if _, err := callAgent(cmd.Context(), resolveDataDir(env, *dir), localapi.Request{Op: localapi.OpNodeRemove, Node: args[0]}); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "removed node %s: its certificates are revoked\n", args[0])
		return nil
	}
	cmd.AddCommand(remove)
	return cmd
}
