package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
)

func init() {
	register(&command{
		name:     "jobs",
		synopsis: "list the cluster's jobs",
		usage:    "reclaimnet jobs [--data-dir DIR] [--json]",
		run:      runJobs,
	})
}

func runJobs(ctx context.Context, env *Env, args []string) error {
	fs := newFlagSet(env, "jobs")
	dir := dataDirFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("jobs takes no arguments")
	}
	resp, err := callAgent(ctx, resolveDataDir(env, *dir), localapi.Request{Op: localapi.OpJobs})
	if err != nil {
		return err
	}
	jobs := resp.Jobs
	if jobs == nil {
		jobs = []localapi.JobInfo{}
	}
	if *asJSON {
		return printJSON(env.Stdout, jobs)
	}
	printJobTable(env.Stdout, jobs)
	return nil
}

// printJobTable writes the jobs table.
func printJobTable(w io.Writer, jobs []localapi.JobInfo) {
	if len(jobs) == 0 {
		fmt.Fprintln(w, "no jobs")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tNODE\tINTERVAL\tCHECKPOINT\tHOLDERS\tRESTARTS\tCOMMAND")
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", j.ID, j.State, node, interval, ckpt, holders, j.Restarts, cmd)
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
