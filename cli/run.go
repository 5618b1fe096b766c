package cli

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/gpu"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/state"
)

func init() {
	register(&command{
		name:     "run",
		synopsis: "submit a job to the cluster",
		usage: "reclaimnet run [--data-dir DIR] [--name ID] [--gpus N] [--vram 20GiB] [--capability 8.0] [--loss-budget 10m]\n" +
			"       [--size-hint 3GiB] [--runtime-hint 6h] [--signal USR1] [--grace 30s] [--memory 16GiB] [--cpus 4]\n" +
			"       [--env KEY=VALUE]... [--dir DIR] -- CMD ARGS...",
		run: runRun,
	})
}

func runRun(ctx context.Context, env *Env, args []string) error {
	fs := newFlagSet(env, "run")
	dir := dataDirFlag(fs)
	name := fs.String("name", "", "job ID (default: a generated one)")
	gpus := fs.Int("gpus", 1, "GPUs the job needs")
	vram := fs.String("vram", "", "VRAM per GPU, e.g. 20GiB")
	capability := fs.String("capability", "", "minimum CUDA compute capability, e.g. 8.0")
	lossBudget := fs.Duration("loss-budget", 10*time.Minute, "tolerated expected loss of work per emergency")
	sizeHint := fs.String("size-hint", "", "expected checkpoint size, e.g. 3GiB")
	runtimeHint := fs.Duration("runtime-hint", 0, "expected runtime, e.g. 6h")
	signal := fs.String("signal", "USR1", "checkpoint request signal: "+strings.Join(state.CheckpointSignals, ", "))
	grace := fs.Duration("grace", 30*time.Second, "time between SIGTERM and SIGKILL at stop (at most 1h)")
	memory := fs.String("memory", "", "the job's memory limit, e.g. 16GiB (default: none of its own; the node's --guest-memory bounds all guest jobs)")
	cpus := fs.Float64("cpus", 0, "the job's CPU limit in CPUs, e.g. 4 or 0.5 (default: none of its own; the node's --guest-cpus bounds all guest jobs)")
	workDir := fs.String("dir", "", "working directory on the node that runs the job (default: the job's own directory)")
	var envs listFlag
	fs.Var(&envs, "env", "KEY=VALUE added to the job's environment (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cmd := fs.Args()
	if len(cmd) == 0 {
		return usagef("run: no command (put it after --)")
	}
	jr := &localapi.JobRequest{Name: *name, Command: cmd, Env: envs, Dir: *workDir, GPUs: *gpus,
		LossBudget: *lossBudget, RuntimeHint: *runtimeHint, Owner: env.Getenv("USER")}
	if *name != "" {
		if err := localapi.ValidJobName(*name); err != nil {
			return usagef("--name: %v", err)
		}
	}
	if *gpus < 1 {
		return usagef("--gpus %d: want at least 1", *gpus)
	}
	if *lossBudget <= 0 {
		return usagef("--loss-budget %v: want a positive duration", *lossBudget)
	}
	if *runtimeHint < 0 {
		return usagef("--runtime-hint %v: must not be negative", *runtimeHint)
	}
	if err := state.ValidStopGrace(*grace); err != nil {
		return usagef("--grace: %v", err)
	}
	var err error
	if *vram != "" {
		if jr.VRAM, err = gpu.ParseBytes(*vram); err != nil {
			return usagef("--vram: %v", err)
		}
	}
	if *sizeHint != "" {
		if jr.SizeHint, err = gpu.ParseBytes(*sizeHint); err != nil {
			return usagef("--size-hint: %v", err)
		}
	}
	if *capability != "" {
		c, err := gpu.ParseCapability(*capability)
		if err != nil {
			return usagef("--capability: %v", err)
		}
		jr.Capability = c.Float()
	}
	if *memory != "" {
		if jr.Memory, err = gpu.ParseBytes(*memory); err != nil {
			return usagef("--memory: %v", err)
		}
	}
	jr.CPUs = *cpus
	if err := state.ValidJobLimits(jr.Memory, jr.CPUs); err != nil {
		return usagef("--memory/--cpus: %v", err)
	}
	sig, err := state.CanonicalSignal(*signal)
	if err != nil {
		return usagef("--signal: %v", err)
	}
	for _, e := range envs {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return usagef("--env %q: want KEY=VALUE", e)
		}
	}
	// Only what was given goes into the job's record: a job without them
	// gets the defaults of whichever node runs it (USR1, 30 s).
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "signal":
			jr.Signal = sig
		case "grace":
			jr.Grace = *grace
		}
	})
	resp, err := callAgent(ctx, resolveDataDir(env, *dir), localapi.Request{Op: localapi.OpRun, Job: jr})
	if err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, resp.JobID)
	return nil
}
