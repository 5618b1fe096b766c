package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/localapi"
)

func init() { register(newCancelCmd) }

func newCancelCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "cancel JOB",
		Short:   "cancel a job (its processes are stopped)",
		GroupID: groupJobs,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("cancel takes one job ID")
			}
			return nil
		},
	}
	dir := dataDirFlag(cmd.Flags())
	cmd.ValidArgsFunction = completeJobs(env, dir)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runCancel(cmd.Context(), env, resolveDataDir(env, *dir), args[0])
	}
	return cmd
}

func runCancel(ctx context.Context, env *Env, dataDir, job string) error {
	resp, err := callAgent(ctx, dataDir, localapi.Request{Op: localapi.OpCancel, JobID: job, User: env.Getenv("USER")})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "cancelled %s\n", resp.JobID)
	return nil
}
