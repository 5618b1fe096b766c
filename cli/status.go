package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/web"
)

func init() { register(newStatusCmd) }

func newStatusCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "show the local agent's view of the cluster",
		Long:    "Shows the local agent's view of the cluster: this node, gossip, Raft, the protocols in force,\nthe members and the jobs.",
		GroupID: groupNode,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	dir := dataDirFlag(fs)
	asJSON := fs.Bool("json", false, "print the status as JSON (the document of GET /v1/status)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return runStatus(cmd.Context(), env, resolveDataDir(env, *dir), *asJSON)
	}
	return cmd
}

// statusDocument asks the agent for its /v1/status document.
func statusDocument(ctx context.Context, dataDir string) (web.Status, error) {
	resp, err := callAgent(ctx, dataDir, localapi.Request{Op: localapi.OpStatus})
	if err != nil {
		return web.Status{}, err
	}
	return decodeDocument(resp)
}

func decodeDocument(resp localapi.Response) (web.Status, error) {
	var doc web.Status
	if len(resp.Document) == 0 {
		return doc, errors.New("the agent sent no status document (is it an older version?)")
	}
	if err := json.Unmarshal(resp.Document, &doc); err != nil {
		return doc, fmt.Errorf("read the agent's status document: %w", err)
	}
	return doc, nil
}

func runStatus(ctx context.Context, env *Env, dataDir string, asJSON bool) error {
	resp, err := callAgent(ctx, dataDir, localapi.Request{Op: localapi.OpStatus})
	if err != nil {
		return err
	}
	st := resp.Status
	if st == nil || len(resp.Document) == 0 {
		return errors.New("the agent sent no status document (is it an older version?)")
	}
	if asJSON {
		// The agent's own /v1/status bytes: nothing is recomputed here.
		_, err := env.Stdout.Write(resp.Document)
		return err
	}
	doc, err := decodeDocument(resp)
	if err != nil {
		return err
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
