package cli

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

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
			for _, p := range args {
				if err := validPeer(p); err != nil {
					return usagef("peer %q: %v", p, err)
				}
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

// validPeer checks a PEER argument: a host, or host:port with a port from
// 1 to 65535 (a bare IPv6 address is a host).
func validPeer(p string) error {
	if p == "" {
		return fmt.Errorf("empty address")
	}
	if !strings.Contains(p, ":") || net.ParseIP(p) != nil {
		return nil
	}
	host, port, err := net.SplitHostPort(p)
	if err != nil {
		return fmt.Errorf("want host or host:port")
	}
	if host == "" {
		return fmt.Errorf("no host before the port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q: want a number from 1 to 65535", port)
	}
	return nil
}
