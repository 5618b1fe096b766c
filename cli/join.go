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

type joinOptions struct {
	token, name, advertise string
}

func newJoinCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "join PEER...",
		Short: "join a cluster through a peer: the local agent's gossip, or this machine by token",
		Long: `Without --token: asks the local agent to join a cluster through any of its members (PEER is
host or host:gossip-port).

With --token (from 'reclaimnet token create'): enrolls this machine into the data dir while no
agent runs on it: makes the node's key, sends a signing request to PEER (a member's coordinator
address, host or host:port, default port 7947) after checking its CA against the token, and keeps
the certificate and the gossip key it receives. 'reclaimnet agent --data-dir DIR' then starts
the node as a member (the systemd unit does).`,
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
	fs := cmd.Flags()
	dir := dataDirFlag(fs)
	var o joinOptions
	fs.StringVar(&o.token, "token", "", "join `token`: enroll this machine instead of asking a running agent")
	fs.StringVar(&o.name, "name", "", "node `name` to enroll as, with --token (default: the host name)")
	fs.StringVar(&o.advertise, "advertise", "", "`address` the certificate names besides loopback, with --token")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if o.token == "" {
			if o.name != "" || o.advertise != "" {
				return usagef("--name and --advertise go with --token")
			}
			return runJoin(cmd.Context(), env, resolveDataDir(env, *dir), args)
		}
		return runEnroll(cmd.Context(), env, resolveDataDir(env, *dir), o, args)
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
