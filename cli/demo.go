package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/demo"
	"github.com/reclaimnet/reclaimnet/gpu"
)

func init() {
	register(newDemoCmd)
	register(newDemoJobCmd)
}

func newDemoCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "run a small campus on this machine and watch a job survive two reclaims",
		Long: `Starts a campus of real agents on this machine, runs a training job, takes its machine back
with notice ('reclaimnet reclaim --notice'), then takes the next one back without
('reclaimnet reclaim --now'), and prints a timeline of what happened and why. About two to
three minutes; the status page stays up until Ctrl-C (or --duration), and everything is
cleaned up on exit.

As root: each node in its own network namespace, 2-3 buildings, shaped links (200 Mbit/s
access, 60 Mbit/s uplinks), kernel enforcement on. Without root, or with --loopback:
processes on 127.0.0.1, links not shaped, enforcement off.

The job is examples/pytorch/train.py (embedded in this binary) when /usr/bin/python3 can
import torch, else a built-in synthetic job that follows the same checkpoint contract.`,
		GroupID: groupTools,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			return nil
		},
	}
	fs := cmd.Flags()
	cfg := demo.Config{}
	fs.BoolVar(&cfg.Loopback, "loopback", false, "run on loopback (no namespaces, no shaping, enforcement off) even as root")
	fs.StringVar(&cfg.HTTP, "http", demo.DefaultHTTP, "`address` of the status page (port 0: any free port)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "stop this long after the scenario ends (0: run until Ctrl-C)")
	fs.IntVar(&cfg.Nodes, "nodes", 5, "number of nodes, 4 to 12")
	fs.IntVar(&cfg.Buildings, "buildings", 3, "number of buildings the nodes are spread over")
	fs.StringVar(&cfg.Job, "job", demo.JobAuto, "the training job: auto, pytorch or synthetic")
	fs.StringVar(&cfg.Python, "python", "/usr/bin/python3", "`python` that runs the PyTorch job")
	fs.DurationVar(&cfg.Notice, "notice", 40*time.Second, "notice of the scheduled reclaim")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the work directory (agent logs, job output) after exit")
	dir := fs.String("dir", "", "work `directory` (default: a new temporary one)")
	asJSON := fs.Bool("json", false, "print the result (segments, reclaims, timeline events) as JSON on stdout; the timeline goes to stderr")
	verbose := fs.BoolP("verbose", "v", false, "log the campus's progress details to stderr")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := cfg.Validate(); err != nil {
			return usagef("%v", err)
		}
		cfg.Dir = *dir
		return runDemo(cmd.Context(), env, cfg, *asJSON, *verbose)
	}
	return cmd
}

func runDemo(ctx context.Context, env *Env, cfg demo.Config, asJSON, verbose bool) error {
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary (the agents run it): %w", err)
	}
	cfg.Binary = bin
	cfg.Out = env.Stdout
	if asJSON {
		cfg.Out = env.Stderr
	}
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelDebug
	}
	cfg.Log = slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))
	res, err := demo.Run(ctx, cfg)
	if asJSON && res != nil {
		if jerr := printJSON(env.Stdout, res); jerr != nil && err == nil {
			err = jerr
		}
	}
	return err
}

func newDemoJobCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo-job",
		Short: "the demo's built-in synthetic training job (run by the agents)",
		Long: `A training job that follows the checkpoint contract (docs/jobs.md): a step counter and SIZE
of state, checkpointed on the checkpoint signal, restored and verified from
RECLAIMNET_RESTORE_DIR.`,
		Hidden: true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			return nil
		},
	}
	fs := cmd.Flags()
	state := fs.String("state", "8MiB", "checkpoint `size`")
	stepTime := fs.Duration("step-time", 100*time.Millisecond, "time per step")
	steps := fs.Int64("steps", 0, "stop after this many steps (0: never)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return runDemoJob(cmd.Context(), env, *state, *stepTime, *steps)
	}
	return cmd
}

func runDemoJob(ctx context.Context, env *Env, state string, stepTime time.Duration, steps int64) error {
	size, err := gpu.ParseBytes(state)
	if err != nil || size <= 0 || size > 4<<30 {
		return usagef("--state %q: want a size like 8MiB, at most 4GiB", state)
	}
	if stepTime <= 0 || steps < 0 {
		return usagef("--step-time must be positive and --steps not negative")
	}
	job := demo.SyntheticJob{StateBytes: int(size), StepTime: stepTime, Steps: steps, Out: env.Stdout, Getenv: env.Getenv}
	return job.Run(ctx)
}
