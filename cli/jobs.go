package cli

import (
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
		Use:     "jobs",
		Short:   "list the cluster's jobs",
		Long:    "Lists the cluster's jobs: state, node, checkpoint interval, last committed checkpoint and\nwhere it is held, restarts, bundle size, where an ended job's results are and until when\n(reclaimnet fetch), and command.",
		GroupID: groupJobs,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	dir := dataDirFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON (the document of GET /v1/jobs)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return runJobs(cmd.Context(), env, resolveDataDir(env, *dir), *asJSON)
	}
	return cmd
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
	fmt.Fprintln(tw, "JOB\tSTATE\tNODE\tINTERVAL\tCHECKPOINT\tHOLDERS\tRESTARTS\tBUNDLE\tRESULTS\tCOMMAND")
	for _, j := range jobs {
		node, interval, ckpt, holders := dash(j.Node), "-", "-", "-"
		if j.Interval > 0 {
			interval = j.Interval.Round(time.Second / 10).String()
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", j.ID, j.State, node, interval, ckpt, holders, j.Restarts, bundle, results, cmd)
	}
	tw.Flush()
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
