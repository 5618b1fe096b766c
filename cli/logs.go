package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/reclaimnet/reclaimnet/localapi"
)

func init() {
	register(&command{
		name:     "logs",
		synopsis: "print a job's output (from the node that runs it)",
		usage:    "reclaimnet logs [--data-dir DIR] [--tail BYTES] JOB",
		run:      runLogs,
	})
}

func runLogs(ctx context.Context, env *Env, args []string) error {
	fs := newFlagSet(env, "logs")
	dir := dataDirFlag(fs)
	tail := fs.Int64("tail", 0, "print only the last BYTES of the log (default: up to 4 MiB)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("logs takes one job ID")
	}
	if *tail < 0 {
		return usagef("--tail %d: must not be negative", *tail)
	}
	resp, err := localapi.Call(ctx, resolveDataDir(env, *dir), localapi.Request{Op: localapi.OpLogs, JobID: fs.Arg(0), Tail: *tail})
	if err != nil {
		return err
	}
	if resp.Error != "" {
		if resp.Kind == localapi.KindBadRequest {
			return usagef("%s", resp.Error)
		}
		return errors.New(resp.Error)
	}
	if resp.Note != "" {
		fmt.Fprintln(env.Stderr, "note:", resp.Note)
	}
	_, err = io.WriteString(env.Stdout, resp.Log)
	return err
}
