package cli

import (
	"context"
	"fmt"

	"github.com/reclaimnet/reclaimnet/localapi"
)

func init() {
	register(&command{
		name:     "cancel",
		synopsis: "cancel a job (its processes are stopped)",
		usage:    "reclaimnet cancel [--data-dir DIR] JOB",
		run:      runCancel,
	})
}

func runCancel(ctx context.Context, env *Env, args []string) error {
	fs := newFlagSet(env, "cancel")
	dir := dataDirFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("cancel takes one job ID")
	}
	resp, err := callAgent(ctx, resolveDataDir(env, *dir), localapi.Request{Op: localapi.OpCancel, JobID: fs.Arg(0)})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "cancelled %s\n", resp.JobID)
	return nil
}
