package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/gpu"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/web"
)

func init() { register(newJobsCmd) }

func newJobsCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs [JOB]",
		Short: "list the cluster's jobs, or tell one job's story",
		Long: "Lists the cluster's jobs: state, node, checkpoint interval, last committed checkpoint and\nwhere it is held, restarts, bundle size, where an ended job's results are and until when (reclaimnet fetch),\ncommand and why (a pending job's reason, a failure, who cancelled).\n" +
			"With JOB, tells that job's story from the replicated state: spec, owner, state and reason,\n" +
			"every start, stop, checkpoint and move with its cause and node, checkpoints and their holders,\nrestarts and failures, and each move off a reclaimed or departed node with its downtime, the\ndowntime's limit and where the time went (detection, placement, restore, start).",
		GroupID: groupJobs,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("jobs takes at most one job ID")
			}
			return nil
		},
	}
	fs := cmd.Flags()
	dir := dataDirFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON (the document of GET /v1/jobs; with JOB, the job's story)")
	cmd.ValidArgsFunction = completeJobs(env, dir)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 1 {
			return runJobStory(cmd.Context(), env, resolveDataDir(env, *dir), args[0], *asJSON)
		}
		return runJobs(cmd.Context(), env, resolveDataDir(env, *dir), *asJSON)
	}
	return cmd
}

func runJobStory(ctx context.Context, env *Env, dataDir, job string, asJSON bool) error {
	if err := localapi.ValidJobName(job); err != nil {
		return usagef("%v", err)
	}
	resp, err := callAgent(ctx, dataDir, localapi.Request{Op: localapi.OpJob, JobID: job})
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(env.Stdout, resp.Story)
	}
	printJobStory(env.Stdout, resp.Story)
	return nil
}

// printJobStory writes one job's story: what it is, where it stands, what
// happened to it, its checkpoints and its failures.
func printJobStory(w io.Writer, s *localapi.JobStory) {
	fmt.Fprintf(w, "Job %s: %s", s.ID, stateText(s.JobInfo))
	if s.Node != "" {
		fmt.Fprintf(w, " on %s", s.Node)
	}
	if why := jobWhy(s.JobInfo); why != "" {
		fmt.Fprintf(w, " (%s)", why)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  command\t%s\n", strings.Join(s.Command, " "))
	fmt.Fprintf(tw, "  owner\t%s\n", dash(s.Owner))
	fmt.Fprintf(tw, "  submitted\t%s\n", s.Submitted.UTC().Format(time.RFC3339))
	need := fmt.Sprintf("%d GPU(s)", s.GPUs)
	if s.VRAM > 0 {
		need += fmt.Sprintf(", %d MiB VRAM each", s.VRAM>>20)
	}
	if s.Capability > 0 {
		need += fmt.Sprintf(", capability ≥ %.1f", s.Capability)
	}
	fmt.Fprintf(tw, "  needs\t%s\n", need)
	fmt.Fprintf(tw, "  loss budget\t%v\n", s.LossBudget)
	fmt.Fprintf(tw, "  restarts\t%d; failures %d of %d allowed\n", s.Restarts, s.Failures, s.MaxFailures)
	tw.Flush()
	fmt.Fprintln(w, "History:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, e := range s.Events {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), e.Kind, dash(e.Node), e.Detail)
	}
	tw.Flush()
	fmt.Fprintln(w, "Checkpoints:")
	if len(s.Checkpoints) == 0 {
		fmt.Fprintln(w, "  none yet")
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range s.Checkpoints {
		state := "not yet off its source"
		if c.Committed {
			state = "committed " + c.CommittedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "  v%d\t%d bytes\tfrom %s\theld by %s\t%s\n", c.Version, c.Bytes, c.Source, strings.Join(c.Holders, ","), state)
	}
	tw.Flush()
	if len(s.Moves) > 0 {
		fmt.Fprintln(w, "Moves:")
		for _, mv := range s.Moves {
			fmt.Fprintf(w, "  %s  %s → %s  %s\n    %s\n", mv.At.UTC().Format(time.RFC3339), mv.From, dash(mv.To), moveWhat(mv), moveDowntime(mv))
		}
	}
	if len(s.FailureLog) > 0 {
		fmt.Fprintln(w, "Failures:")
		for _, f := range s.FailureLog {
			fmt.Fprintf(w, "  %s on %s: %s\n", f.At.UTC().Format(time.RFC3339), f.Node, f.Description)
			for _, l := range f.LogTail {
				fmt.Fprintf(w, "    | %s\n", l)
			}
		}
	}
}

// moveWhat says how the job left a node and what it lost, as the page's
// history row does.
func moveWhat(mv localapi.JobMove) string {
	var what string
	switch {
	case mv.HandedOff && mv.FinalCheckpoint:
		what = "hand-off, final checkpoint"
	case mv.HandedOff:
		what = mv.Reason // handed off without its final checkpoint, from which version
	case mv.Detected:
		what = "departure found by failure detection: " + mv.Reason
	case mv.Emergency:
		what = "emergency reclaim: " + mv.Reason
	default:
		what = "scheduled reclaim: " + mv.Reason
	}
	if mv.Replica != "" {
		what += " on " + mv.Replica
	}
	if mv.Version > 0 && !mv.HandedOff {
		what += fmt.Sprintf(" (v%d)", mv.Version)
	}
	return what + ", lost " + roundMs(mv.WorkLost)
}

// moveDowntime is a move's downtime against its limit (docs/design.md
// P3.8d) and where it went: detection, placement, restore and start.
func moveDowntime(mv localapi.JobMove) string {
	switch {
	case mv.Resuming:
		return "not running again yet"
	case mv.Downtime <= 0:
		return "downtime not recorded"
	}
	out := "down " + roundMs(mv.Downtime)
	if mv.Limit > 0 {
		out += ", limit " + roundMs(mv.Limit)
	}
	var parts []string
	for _, p := range []struct {
		name string
		d    time.Duration
	}{{"detection", mv.Detection}, {"placement", mv.Placement}, {"restore", mv.Restore}, {"start", mv.Start}} {
		if p.d > 0 {
			parts = append(parts, p.name+" "+roundMs(p.d))
		}
	}
	if len(parts) > 0 {
		out += " (" + strings.Join(parts, ", ") + ")"
	}
	return out
}

func roundMs(d time.Duration) string { return d.Round(time.Millisecond).String() }

func runJobs(ctx context.Context, env *Env, dataDir string, asJSON bool) error {
	if asJSON {
		doc, err := statusDocument(ctx, dataDir)
		if err != nil {
			return err
		}
		jobs := doc.Jobs
		if jobs == nil {
			jobs = []web.Job{}
		}
		return printJSON(env.Stdout, web.JobsResponse{GeneratedAt: doc.GeneratedAt, Jobs: jobs})
	}
	resp, err := callAgent(ctx, dataDir, localapi.Request{Op: localapi.OpJobs})
	if err != nil {
		return err
	}
	printJobTable(env.Stdout, resp.Jobs)
	return nil
}

// printJobTable writes the jobs table.
func printJobTable(w io.Writer, jobs []localapi.JobInfo) {
	if len(jobs) == 0 {
		fmt.Fprintln(w, "no jobs")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tOWNER\tNODE\tINTERVAL\tCHECKPOINT\tHOLDERS\tRESTARTS\tBUNDLE\tRESULTS\tCOMMAND\tWHY")
	for _, j := range jobs {
		node, interval, ckpt, holders := dash(j.Node), "-", "-", "-"
		if j.Interval > 0 {
			interval = j.Interval.Round(time.Second / 10).String()
		}
		if j.BudgetUnmet {
			interval += " (loss budget unmet)"
		}
		if j.LastCommitted > 0 {
			ckpt = fmt.Sprintf("v%d", j.LastCommitted)
			holders = strings.Join(j.Holders, ",")
		}
		if j.LastVersion > j.LastCommitted {
			ckpt += fmt.Sprintf(" (v%d pending)", j.LastVersion)
		}
		cmd := strings.Join(j.Command, " ")
		if len(cmd) > 40 {
			cmd = cmd[:37] + "..."
		}
		bundle, results := "-", "-"
		if j.BundleSize > 0 {
			bundle = gpu.FormatBytes(j.BundleSize)
		}
		if len(j.ResultsOn) > 0 {
			results = "on " + strings.Join(j.ResultsOn, ",")
			if !j.KeptUntil.IsZero() {
				results += " until " + j.KeptUntil.UTC().Format("2006-01-02 15:04Z")
			}
		}
		owner := j.Owner
		if owner == "" {
			owner = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", j.ID, stateText(j), owner, node, interval, ckpt, holders, j.Restarts, bundle, results, cmd, jobWhy(j))
	}
	tw.Flush()
}

// stateText is a job's state with what is under way for a running job
// ("running (checkpointing)"); the other states name what is under way
// themselves (migrating, recovering).
func stateText(j localapi.JobInfo) string {
	if j.State == "running" && j.UnderWay != "" {
		return j.State + " (" + j.UnderWay + ")"
	}
	return j.State
}

// jobWhy is the table's last column: why a job waits, how it failed or
// who cancelled it.
func jobWhy(j localapi.JobInfo) string {
	switch {
	case j.State == "failed" && j.LastExit != nil:
		return fmt.Sprintf("%s on %s (failure %d, %d allowed)", j.LastExit.Description, j.LastExit.Node, j.Failures, j.MaxFailures)
	case j.State == "cancelled":
		return "by " + cmp.Or(j.CancelledBy, "a user")
	case j.Reason != "":
		return j.Reason
	case j.Failures > 0 && j.LastExit != nil:
		return fmt.Sprintf("restarted after %s on %s (failure %d, %d allowed)", j.LastExit.Description, j.LastExit.Node, j.Failures, j.MaxFailures)
	}
	return ""
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// completeJobs completes a job ID from the local agent's list.
func completeJobs(env *Env, dir *string) func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		defer cancel()
		resp, err := localapi.Call(ctx, resolveDataDir(env, *dir), localapi.Request{Op: localapi.OpJobs})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, j := range resp.Jobs {
			if strings.HasPrefix(j.ID, toComplete) {
				out = append(out, cobra.CompletionWithDesc(j.ID, j.State))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
