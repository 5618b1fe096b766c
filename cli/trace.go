package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/trace"
)

func init() {
	register(&command{
		name:     "trace",
		synopsis: "export the cluster's history as a simulator trace",
		usage: `reclaimnet trace export [--out FILE] [--data-dir DIR]

Writes the cluster's history, as the local agent knows it, in the
simulator's trace format (trace/README.md): the nodes with GPUs and their
links, departures (scheduled with their notice, emergency), returns, the
bandwidth samples this agent saw since it started, and the jobs. Replay it
with 'reclaimnet sim --trace DIR' (the file is DIR/trace.jsonl).
--out FILE writes the file (a directory gets trace.jsonl inside it);
without it the trace goes to standard output. See docs/agent.md for what
the cluster keeps and what is estimated.`,
		run: runTrace,
	})
}

func runTrace(ctx context.Context, env *Env, args []string) error {
	if len(args) == 0 || args[0] != "export" {
		return usagef("want 'reclaimnet trace export [--out FILE]'")
	}
	fs := newFlagSet(env, "trace export")
	dir := dataDirFlag(fs)
	out := fs.String("out", "", "file (or directory) to write; default standard output")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	resp, err := callAgent(ctx, resolveDataDir(env, *dir), localapi.Request{Op: localapi.OpTraceExport})
	if err != nil {
		return err
	}
	if resp.Trace == "" {
		return fmt.Errorf("the agent sent no trace (is it an older version?)")
	}
	// Check what is written with the simulator's own reader.
	tr, err := trace.Read(strings.NewReader(resp.Trace), "trace.jsonl")
	if err != nil {
		return fmt.Errorf("the agent's trace does not read back: %w", err)
	}
	if *out == "" {
		_, err := fmt.Fprint(env.Stdout, resp.Trace)
		return err
	}
	path := *out
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, trace.FileName)
	}
	if err := os.WriteFile(path+".tmp", []byte(resp.Trace), 0o644); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	fmt.Fprintf(env.Stderr, "wrote %s: %d nodes, %d links, %d departures, %d returns, %d bandwidth samples, %d jobs over %.0fs\n",
		path, len(tr.Nodes), len(tr.Links), len(tr.Departures), len(tr.Returns), len(tr.Bandwidth), len(tr.Jobs), tr.Header.DurationS)
	return nil
}
