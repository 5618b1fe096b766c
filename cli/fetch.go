package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/localapi"
)

func init() { register(newFetchCmd) }

func newFetchCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fetch JOB",
		Short: "download a job's outputs (and its last checkpoint) to this machine",
		Long: `Downloads what JOB wrote under RECLAIMNET_OUTPUT_DIR, as of its newest version, from whichever
node holds it, over the mesh (QUIC, mutual TLS), into --out. With --checkpoint the checkpoint
files of the same version go to OUT.checkpoint beside it. Each destination must be absent or an
empty directory; it appears complete or not at all. A fetch that breaks off keeps what arrived in
a hidden directory beside the destination, and the next fetch to the same place asks only for the
rest. An ended job's results are kept for its --keep (docs/jobs.md).`,
		GroupID: groupJobs,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("fetch takes one job ID")
			}
			return nil
		},
	}
	fs := cmd.Flags()
	dir := dataDirFlag(fs)
	out := fs.String("out", "", "`directory` that receives the outputs (default: ./JOB-outputs)")
	withCkpt := fs.Bool("checkpoint", false, "also download the checkpoint files of the same version, to OUT.checkpoint")
	asJSON := fs.Bool("json", false, "print what was fetched as JSON")
	cmd.ValidArgsFunction = completeJobs(env, dir)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runFetch(cmd.Context(), env, resolveDataDir(env, *dir), args[0], *out, *withCkpt, *asJSON)
	}
	return cmd
}

func runFetch(ctx context.Context, env *Env, dataDir, job, out string, withCkpt, asJSON bool) error {
	if out == "" {
		out = job + "-outputs"
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return usagef("--out %s: %v", out, err)
	}
	req := &localapi.FetchRequest{Out: abs}
	if withCkpt {
		req.CheckpointOut = abs + ".checkpoint"
	}
	for _, d := range []string{req.Out, req.CheckpointOut} {
		if err := emptyOrAbsent(d); err != nil {
			return err
		}
	}
	resp, err := callAgentWithin(ctx, dataDir, localapi.Request{Op: localapi.OpFetch, JobID: job, Fetch: req}, 2*time.Hour)
	if err != nil {
		if resp.Kind == localapi.KindBadRequest {
			return usagef("%v", err)
		}
		return err
	}
	f := resp.Fetched
	if asJSON {
		return printJSON(env.Stdout, f)
	}
	fmt.Fprintf(env.Stdout, "fetched %s version %d from %s: %d files, %s, into %s\n", f.Job, f.Version, f.From, f.Files, ckpt.FormatBytes(f.Bytes), f.Out)
	if f.CheckpointOut != "" {
		fmt.Fprintf(env.Stdout, "checkpoint into %s\n", f.CheckpointOut)
	}
	if f.AlreadyHad > 0 {
		fmt.Fprintf(env.Stdout, "resumed: %d chunks were here from an earlier fetch, %d received now\n", f.AlreadyHad, f.Received)
	}
	return nil
}

// emptyOrAbsent checks a fetch destination before anything is asked of the
// agent: it must not exist or be an empty directory.
func emptyOrAbsent(dir string) error {
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return usagef("destination %s: %v", dir, err)
	case len(entries) > 0:
		return usagef("destination %s exists and is not empty", dir)
	}
	return nil
}
