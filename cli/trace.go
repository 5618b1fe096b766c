package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/trace"
)

func init() { register(newTraceCmd) }

func newTraceCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "trace",
		Short:   "export the cluster's history as a simulator trace",
		GroupID: groupTools,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("want 'reclaimnet trace export [--out FILE]'")
			}
			return usagef("unknown trace command %q: want 'reclaimnet trace export [--out FILE]'", args[0])
		},
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	cmd.AddCommand(newTraceExportCmd(env))
	return cmd
}

func newTraceExportCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "write the cluster's history in the simulator's trace format",
		Long: `Writes the cluster's history, as the local agent knows it, in the simulator's trace format
(trace/README.md), the document of GET /v1/trace: the nodes with GPUs and their links,
departures (scheduled with their notice, emergency), returns, the bandwidth samples this
agent saw since it started, and the jobs. Replay it with 'reclaimnet sim --trace DIR' (the
file is DIR/trace.jsonl). --out FILE writes the file (a directory gets trace.jsonl inside
it); without it the trace goes to standard output. See docs/agent.md for what the cluster
keeps and what is estimated.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			return nil
		},
	}
	fs := cmd.Flags()
	dir := dataDirFlag(fs)
	out := fs.String("out", "", "`file` (or directory) to write; default standard output")
	asJSON := fs.Bool("json", false, "with --out: print what was written as JSON (the trace itself is JSON Lines)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return runTraceExport(cmd.Context(), env, resolveDataDir(env, *dir), *out, *asJSON)
	}
	return cmd
}

// TraceSummary is 'reclaimnet trace export --out FILE --json': the file
// written and what it holds.
type TraceSummary struct {
	Path       string  `json:"path"`
	Nodes      int     `json:"nodes"`
	Links      int     `json:"links"`
	Departures int     `json:"departures"`
	Returns    int     `json:"returns"`
	Bandwidth  int     `json:"bandwidth_samples"`
	Jobs       int     `json:"jobs"`
	DurationS  float64 `json:"duration_s"`
}

func runTraceExport(ctx context.Context, env *Env, dataDir, out string, asJSON bool) error {
	resp, err := callAgent(ctx, dataDir, localapi.Request{Op: localapi.OpTraceExport})
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
	if out == "" {
		_, err := fmt.Fprint(env.Stdout, resp.Trace)
		return err
	}
	path := out
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, trace.FileName)
	}
	if err := os.WriteFile(path+".tmp", []byte(resp.Trace), 0o644); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	sum := TraceSummary{Path: path, Nodes: len(tr.Nodes), Links: len(tr.Links), Departures: len(tr.Departures), Returns: len(tr.Returns),
		Bandwidth: len(tr.Bandwidth), Jobs: len(tr.Jobs), DurationS: tr.Header.DurationS}
	if asJSON {
		return printJSON(env.Stdout, sum)
	}
	fmt.Fprintf(env.Stderr, "wrote %s: %d nodes, %d links, %d departures, %d returns, %d bandwidth samples, %d jobs over %.0fs\n",
		sum.Path, sum.Nodes, sum.Links, sum.Departures, sum.Returns, sum.Bandwidth, sum.Jobs, sum.DurationS)
	return nil
}
