package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/reclaimnet/reclaimnet/demo"
	"github.com/reclaimnet/reclaimnet/gpu"
)

func init() {
	register(&command{
		name:     "demo",
		synopsis: "run a small campus on this machine and watch a job survive two reclaims",
		usage: `reclaimnet demo [--loopback] [--http ADDR] [--duration D] [--nodes N] [--buildings B]
    [--job auto|pytorch|synthetic] [--notice D] [--keep] [--json]

Starts a campus of real agents on this machine, runs a training job, takes
its machine back with notice ('reclaimnet reclaim --notice'), then takes the
next one back without ('reclaimnet reclaim --now'), and prints a timeline of
what happened and why. About two to three minutes; the status page stays up
until Ctrl-C (or --duration), and everything is cleaned up on exit.

As root: each node in its own network namespace, 2-3 buildings, shaped links
(200 Mbit/s access, 60 Mbit/s uplinks), kernel enforcement on. Without root,
or with --loopback: processes on 127.0.0.1, links not shaped, enforcement off.

The job is examples/pytorch/train.py (embedded in this binary) when
/usr/bin/python3 can import torch, else a built-in synthetic job that follows
the same checkpoint contract.`,
		run: runDemo,
	})
	register(&command{
		name:     "demo-job",
		synopsis: "the demo's built-in synthetic training job (run by the agents)",
		usage: `reclaimnet demo-job [--state SIZE] [--step-time D] [--steps N]

A training job that follows the checkpoint contract (docs/jobs.md): a step
counter and SIZE of state, checkpointed on the checkpoint signal, restored
and verified from RECLAIMNET_RESTORE_DIR.`,
		run:    runDemoJob,
		hidden: true,
	})
}

func runDemo(ctx context.Context, env *Env, args []string) error {
	fs := newFlagSet(env, "demo")
	cfg := demo.Config{}
	fs.BoolVar(&cfg.Loopback, "loopback", false, "run on loopback (no namespaces, no shaping, enforcement off) even as root")
	fs.StringVar(&cfg.HTTP, "http", demo.DefaultHTTP, "address of the status page (port 0: any free port)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "stop this long after the scenario ends (0: run until Ctrl-C)")
	fs.IntVar(&cfg.Nodes, "nodes", 5, "number of nodes, 4 to 12")
	fs.IntVar(&cfg.Buildings, "buildings", 3, "number of buildings the nodes are spread over")
	fs.StringVar(&cfg.Job, "job", demo.JobAuto, "auto, pytorch or synthetic")
	fs.StringVar(&cfg.Python, "python", "/usr/bin/python3", "python that runs the PyTorch job")
	fs.DurationVar(&cfg.Notice, "notice", 40*time.Second, "notice of the scheduled reclaim")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the work directory (agent logs, job output) after exit")
	dir := fs.String("dir", "", "work directory (default: a new temporary one)")
	asJSON := fs.Bool("json", false, "print the result (segments, reclaims, timeline events) as JSON on stdout; the timeline goes to stderr")
	verbose := fs.Bool("v", false, "log the campus's progress details to stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if err := cfg.Validate(); err != nil {
		return usagef("%v", err)
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary (the agents run it): %w", err)
	}
	cfg.Binary, cfg.Dir = bin, *dir
	cfg.Out = env.Stdout
	if *asJSON {
		cfg.Out = env.Stderr
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	cfg.Log = slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))
	res, err := demo.Run(ctx, cfg)
	if *asJSON && res != nil {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(res); jerr != nil && err == nil {
			err = jerr
		}
	}
	return err
}

func runDemoJob(ctx context.Context, env *Env, args []string) error {
	fs := newFlagSet(env, "demo-job")
	state := fs.String("state", "8MiB", "checkpoint size")
	stepTime := fs.Duration("step-time", 100*time.Millisecond, "time per step")
	steps := fs.Int64("steps", 0, "stop after this many steps (0: never)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	size, err := gpu.ParseBytes(*state)
	if err != nil || size <= 0 || size > 4<<30 {
		return usagef("--state %q: want a size like 8MiB, at most 4GiB", *state)
	}
	if *stepTime <= 0 || *steps < 0 {
		return usagef("--step-time must be positive and --steps not negative")
	}
	job := demo.SyntheticJob{StateBytes: int(size), StepTime: *stepTime, Steps: *steps, Out: env.Stdout, Getenv: env.Getenv}
	return job.Run(ctx)
}
