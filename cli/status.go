package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/reclaimnet/reclaimnet/agent"
)

func init() {
	register(&command{
		name:     "status",
		synopsis: "show the local agent's view of the cluster",
		usage:    "reclaimnet status [--data-dir DIR] [--json]",
		run:      runStatus,
	})
}

func runStatus(ctx context.Context, env *Env, args []string) error {
	fs := newFlagSet(env, "status")
	dir := dataDirFlag(fs)
	asJSON := fs.Bool("json", false, "print the status as JSON (the same document as /v1/status)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("status takes no arguments")
	}
	resp, err := callAgent(ctx, resolveDataDir(env, *dir), agent.Request{Op: agent.OpStatus})
	if err != nil {
		return err
	}
	st := resp.Status
	if *asJSON {
		return printJSON(env.Stdout, st)
	}
	w := env.Stdout
	alive := 0
	for _, m := range st.Members {
		if m.State == "alive" {
			alive++
		}
	}
	building := st.Building
	if building == "" {
		building = "-"
	}
	fmt.Fprintf(w, "Node:      %s (building %s), up %s, version %s\n", st.Node, building, time.Since(st.Started).Round(time.Second), st.Version)
	fmt.Fprintf(w, "Gossip:    %s, %d of %d members alive, encrypted %v\n", st.GossipAddr, alive, len(st.Members), st.Encrypted)
	switch {
	case !st.Raft.Running:
		fmt.Fprintf(w, "Raft:      not running on this node\n")
	case st.Raft.Leader == "":
		fmt.Fprintf(w, "Raft:      %s, role %s, NO LEADER\n", st.RaftAddr, st.Raft.Role)
	default:
		fmt.Fprintf(w, "Raft:      %s, role %s, leader %s, voters %v\n", st.RaftAddr, st.Raft.Role, st.Raft.Leader, st.Raft.Voters)
	}
	if st.HTTPAddr != "" {
		fmt.Fprintf(w, "Status:    http://%s/v1/status\n", st.HTTPAddr)
	}
	fmt.Fprintln(w)
	printMembers(w, st.Members)
	return nil
}
