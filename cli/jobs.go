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
			"every start, stop, checkpoint and move with its cause and node, checkpoints and their holders,\nrestarts and failures.",
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
