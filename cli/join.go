package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/localapi"
)

func init() { register(newJoinCmd) }

func newJoinCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "join PEER...",
		Short:   "ask the local agent to join a cluster through a peer",
		Long:    "Asks the local agent to join a cluster through any of its members.\nPEER is host or host:gossip-port.",
		GroupID: groupNode,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("join needs at least one peer address")
			}
			return nil
		},
	}
	dir := dataDirFlag(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runJoin(cmd.Context(), env, resolveDataDir(env, *dir), args)
	}
	return cmd
}

func runJoin(ctx context.Context, env *Env, dataDir string, peers []string) error {
	resp, err := callAgent(ctx, dataDir, localapi.Request{Op: localapi.OpJoin, Peers: peers})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "Joined the cluster: %d peer(s) contacted.\n", resp.Joined)
	return nil
}
