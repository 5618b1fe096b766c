package cli

import (
	"context"
	"fmt"

	"github.com/reclaimnet/reclaimnet/localapi"
)

func init() {
	register(&command{
		name:     "join",
		synopsis: "ask the local agent to join a cluster through a peer",
		usage:    "reclaimnet join [--data-dir DIR] PEER...\n\nPEER is host or host:gossip-port of any member.",
		run:      runJoin,
	})
}

func runJoin(ctx context.Context, env *Env, args []string) error {
	fs := newFlagSet(env, "join")
	dir := dataDirFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("join needs at least one peer address")
	}
	resp, err := callAgent(ctx, resolveDataDir(env, *dir), localapi.Request{Op: localapi.OpJoin, Peers: fs.Args()})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "Joined the cluster: %d peer(s) contacted.\n", resp.Joined)
	return nil
}
