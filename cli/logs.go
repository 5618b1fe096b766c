package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/localapi"
)

func init() { register(newLogsCmd) }

func newLogsCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "logs JOB",
		Short:   "print a job's output (from the node that runs it)",
		Long:    "Prints a job's output, fetched from the node that runs it.",
		GroupID: groupJobs,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("logs takes one job ID")
			}
			return nil
		},
	}
	fs := cmd.Flags()
	dir := dataDirFlag(fs)
	tail := fs.Int64("tail", 0, "print only the last `n` bytes of the log (default: up to 4 MiB)")
	asJSON := fs.Bool("json", false, "print the job, its node, the note and the log text as JSON")
	cmd.ValidArgsFunction = completeJobs(env, dir)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *tail < 0 {
			return usagef("--tail %d: must not be negative", *tail)
		}
		return runLogs(cmd.Context(), env, resolveDataDir(env, *dir), args[0], *tail, *asJSON)
	}
	return cmd
}

// LogsView is 'reclaimnet logs --json': the log and where it came from.
type LogsView struct {
	JobID string `json:"job_id"`
	// Node is the node the log was read on.
	Node string `json:"node,omitempty"`
	// Note is a remark about the log (cut to its tail, read from a node
	// the job left).
	Note string `json:"note,omitempty"`
	Log  string `json:"log"`
}

func runLogs(ctx context.Context, env *Env, dataDir, job string, tail int64, asJSON bool) error {
	resp, err := localapi.Call(ctx, dataDir, localapi.Request{Op: localapi.OpLogs, JobID: job, Tail: tail})
	if err != nil {
		return err
	}
	if resp.Error != "" {
		if resp.Kind == localapi.KindBadRequest {
			return usagef("%s", resp.Error)
		}
		return errors.New(resp.Error)
	}
	if asJSON {
		return printJSON(env.Stdout, LogsView{JobID: job, Node: resp.Node, Note: resp.Note, Log: resp.Log})
	}
	if resp.Note != "" {
		fmt.Fprintln(env.Stderr, "note:", resp.Note)
	}
	_, err = io.WriteString(env.Stdout, resp.Log)
	return err
}
