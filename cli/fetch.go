package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/transfer"
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
rest. The job's owner (or a cluster admin) may fetch it, without root: the agent checks the
caller, fetches the job's chunks and relays them; this command writes the files, as the caller.
An ended job's results are kept for its --keep (docs/jobs.md).`,
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
	ckOut := ""
	if withCkpt {
		ckOut = abs + ".checkpoint"
	}
	for _, d := range []string{abs, ckOut} {
		if err := emptyOrAbsent(d); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Hour)
	defer cancel()
	// This process runs as the caller: it keeps the chunks the agent
	// relays and writes the files, so they are the caller's.
	var info *localapi.FetchInfo
	_, err = transfer.Stage(abs, ckOut, slog.New(slog.DiscardHandler), func(staging transfer.ChunkStore) (transfer.FetchResult, error) {
		end, err := localapi.Fetch(ctx, dataDir, job, localapi.FetchRequest{Checkpoint: withCkpt}, fetchSink{staging})
		if err != nil {
			return transfer.FetchResult{}, err
		}
		if end.Error != "" {
			if end.Kind == localapi.KindBadRequest {
				return transfer.FetchResult{}, usagef("%s", end.Error)
			}
			return transfer.FetchResult{}, errors.New(end.Error)
		}
		m, err := ckpt.ParseManifest(end.Manifest)
		if err != nil || end.Fetched == nil || m.JobID != job {
			return transfer.FetchResult{}, fmt.Errorf("fetch %s: the agent's answer names no version of it (%v)", job, err)
		}
		info = end.Fetched
		return transfer.FetchResult{Manifest: m}, nil
	})
	switch {
	case errors.Is(err, ckpt.ErrDiskFull), errors.Is(err, ckpt.ErrQuota):
		return fmt.Errorf("fetch %s: %w (what arrived is kept in %s for the next fetch)", job, err, transfer.StagingDir(abs))
	case errors.Is(err, transfer.ErrDestExists):
		return usagef("fetch: %v", err)
	case err != nil:
		return err
	}
	info.Out, info.CheckpointOut = abs, ckOut
	if asJSON {
		return printJSON(env.Stdout, info)
	}
	fmt.Fprintf(env.Stdout, "fetched %s version %d from %s: %d files, %s, into %s\n", info.Job, info.Version, info.From, info.Files, ckpt.FormatBytes(info.Bytes), info.Out)
	if info.CheckpointOut != "" {
		fmt.Fprintf(env.Stdout, "checkpoint into %s\n", info.CheckpointOut)
	}
	if info.AlreadyHad > 0 {
		fmt.Fprintf(env.Stdout, "resumed: %d chunks were here from an earlier fetch, %d received now\n", info.AlreadyHad, info.Received)
	}
	return nil
}

// fetchSink keeps what the agent relays in the fetch's staging store.
type fetchSink struct{ staging transfer.ChunkStore }

func (s fetchSink) Missing(offer []localapi.ChunkRef) []localapi.ChunkRef {
	refs := make([]ckpt.ChunkRef, 0, len(offer))
	for _, o := range offer {
		if h, err := ckpt.ParseHash(o.Hash); err == nil {
			refs = append(refs, ckpt.ChunkRef{Hash: h, Size: o.Size})
		}
	}
	out := []localapi.ChunkRef{}
	for _, r := range s.staging.Missing(refs) {
		out = append(out, localapi.ChunkRef{Hash: r.Hash.String(), Size: r.Size})
	}
	return out
}

// PutChunk stores a chunk; the store checks it against its hash.
func (s fetchSink) PutChunk(h [32]byte, data []byte) error {
	return s.staging.PutChunk(ckpt.Hash(h), data)
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
