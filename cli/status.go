package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/web"
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
	resp, err := callAgent(ctx, resolveDataDir(env, *dir), localapi.Request{Op: localapi.OpStatus})
	if err != nil {
		return err
	}
	st := resp.Status
	if st == nil || len(resp.Document) == 0 {
		return errors.New("the agent sent no status document (is it an older version?)")
	}
	if *asJSON {
		// The agent's own /v1/status bytes: nothing is recomputed here.
		_, err := env.Stdout.Write(resp.Document)
		return err
	}
	var doc web.Status
	if err := json.Unmarshal(resp.Document, &doc); err != nil {
		return fmt.Errorf("read the agent's status document: %w", err)
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
		fmt.Fprintf(w, "Page:      http://%s/ (JSON: /v1/status, metrics: /metrics)\n", st.HTTPAddr)
	}
	if p := doc.Cluster.Protocols; p.Summary != "" {
		by := ""
		if p.DecidedBy != "" {
			by = " (leader " + string(p.DecidedBy) + ")"
		}
		fmt.Fprintf(w, "Protocols: %s%s\n", p.Summary, by)
		if !p.Agree {
			fmt.Fprintf(w, "           this node's own setting differs: %s (applies only while it leads)\n", p.Local)
		}
	}
	if sb := doc.Sandbox; sb.Summary != "" {
		fmt.Fprintf(w, "Sandbox:   %s\n", sb.Summary)
	}
	fmt.Fprintln(w)
	printMembers(w, st.Members)
	fmt.Fprintln(w)
	printJobs(w, doc.Jobs)
	return nil
}

// printJobs writes the jobs table from the status document: state, host,
// P1's interval and why, the last committed checkpoint.
func printJobs(w io.Writer, jobs []web.Job) {
	if len(jobs) == 0 {
		fmt.Fprintln(w, "No jobs.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tNODE\tINTERVAL\tHAZARD\tBANDWIDTH\tCHECKPOINT\tRESTARTS")
	for _, j := range jobs {
		node := string(j.Node)
		if node == "" {
			node = "-"
		}
		interval, hazard, bw := "-", "-", "-"
		if d := j.Decision; d != nil {
			interval = d.Interval.Round(time.Second).String()
			if d.LossBudgetInfeasible {
				interval += " (loss budget infeasible)"
			}
			hazard = formatHazard(d.Hazard)
			bw = fmt.Sprintf("%.0fMb/s", d.Bandwidth*8/1e6)
		}
		ckpt := "-"
		if c := j.LastCheckpoint; c != nil {
			ckpt = fmt.Sprintf("v%d, %s old, on %d node(s)", c.Version, c.Age.Round(time.Second), len(c.Holders))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", j.ID, j.State, node, interval, hazard, bw, ckpt, j.Restarts)
	}
	tw.Flush()
}
