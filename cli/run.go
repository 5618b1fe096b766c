package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/gpu"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

func init() { register(newRunCmd) }

// runOptions are 'reclaimnet run's flags.
type runOptions struct {
	dataDir, name, vram, capability, sizeHint, signal, workDir, memory string
	gpus, replicas, maxFailures                                        int
	cpus                                                               float64
	lossBudget, runtimeHint, grace                                     time.Duration
	env, roPaths, secretEnv                                            []string
	// bundleDir is --workdir, maxBundle --max-bundle.
	bundleDir, maxBundle, keep string
	// signalSet and graceSet say whether the flag was given: only those
	// go into the job's record.
	signalSet, graceSet bool
}

func newRunCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run [flags] [--] CMD [ARGS...]",
		Short: "submit a job to the cluster",
		Long: `Submits a job to the cluster and prints its ID. The job is CMD with its ARGS, run on the
node the cluster chooses; it follows the checkpoint contract (docs/jobs.md). Its bundle is
--workdir (default: the current directory): the files there, less what its .reclaimnetignore
leaves out, are stored once, sent to the nodes that run or back up the job, and laid out
read-only as its working directory wherever it runs. CMD is a file of the bundle (./train.sh)
or a program every node has (python3). What the job writes to RECLAIMNET_OUTPUT_DIR moves with
its checkpoints and is kept for --keep after it ends (reclaimnet fetch). Flags end at CMD:
what follows belongs to the job.`,
		GroupID: groupJobs,
	}
	// The job's own flags follow its command: parsing stops there.
	cmd.Flags().SetInterspersed(false)
	fs := cmd.Flags()
	var o runOptions
	dir := dataDirFlag(fs)
	fs.StringVar(&o.name, "name", "", "job `ID` (default: a generated one)")
	fs.IntVar(&o.gpus, "gpus", 1, "GPUs the job needs")
	fs.StringVar(&o.vram, "vram", "", "VRAM per GPU, a `size` such as 20GiB")
	fs.StringVar(&o.capability, "capability", "", "minimum CUDA compute `capability`, e.g. 8.0")
	fs.DurationVar(&o.lossBudget, "loss-budget", 10*time.Minute, "expected work the job may lose when its node leaves without notice (its checkpoints are spaced to keep within it)")
	fs.IntVar(&o.replicas, "replicas", policy.DefaultCopies, "`K`, how many nodes other than the job's host keep its freshest committed checkpoint (1 to 8; chosen so they are unlikely to leave together)")
	fs.StringVar(&o.sizeHint, "size-hint", "", "expected checkpoint `size`, e.g. 3GiB")
	fs.DurationVar(&o.runtimeHint, "runtime-hint", 0, "expected runtime, e.g. 6h")
	fs.StringVar(&o.signal, "signal", "USR1", "`signal` that asks the job for a checkpoint: "+strings.Join(state.CheckpointSignals, ", "))
	fs.DurationVar(&o.grace, "grace", 30*time.Second, "time between SIGTERM and SIGKILL when the job is stopped (at most 1h)")
	fs.StringVar(&o.memory, "memory", "", "the job's memory limit, a `size` such as 16GiB (default: none of its own; the node's --guest-memory bounds all guest jobs)")
	fs.Float64Var(&o.cpus, "cpus", 0, "the job's CPU limit in CPUs, e.g. 4 or 0.5 (default: none of its own; the node's --guest-cpus bounds all guest jobs)")
	fs.StringVar(&o.bundleDir, "workdir", "", "`directory` whose files are the job's bundle, laid out read-only as its working directory on every node that runs it; a .reclaimnetignore in it leaves paths out (default: the current directory)")
	fs.StringVar(&o.maxBundle, "max-bundle", "1GiB", "the bundle's size cap, a `size` such as 200MiB")
	fs.StringVar(&o.keep, "keep", "7d", "how long the job's outputs and last checkpoint stay on its holders after it ends, a `duration` such as 7d or 36h (then they are purged)")
	fs.StringVar(&o.workDir, "dir", "", "working `directory` on the node that runs the job, instead of the bundle's layout")
	fs.StringArrayVar(&o.env, "env", nil, "`KEY=VALUE` added to the job's environment (repeatable)")
	fs.StringArrayVar(&o.secretEnv, "secret-env", nil, "environment variable `KEY` passed to the job with its value from this command's environment, sealed: never in the cluster's log or on a disk in the clear (repeatable)")
	fs.StringArrayVar(&o.roPaths, "ro-path", nil, "host `path` the job reads where it runs, such as a dataset on every machine (repeatable): only nodes whose owner lets guest jobs read it run the job, read-only")
	fs.IntVar(&o.maxFailures, "max-failures", 0, "application failures (exit other than 0 and 85, a signal the cluster did not send, a failed start), counted across nodes, that restart the job from its freshest checkpoint before it is failed")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		o.dataDir = resolveDataDir(env, *dir)
		o.signalSet, o.graceSet = fs.Changed("signal"), fs.Changed("grace")
		return runRun(cmd.Context(), env, o, args)
	}
	return cmd
}

func runRun(ctx context.Context, env *Env, o runOptions, command []string) error {
	if len(command) == 0 {
		return usagef("no command (put it after --)")
	}
	if strings.TrimSpace(command[0]) == "" {
		return usagef("empty command name: the first word after -- is the program to run")
	}
	jr := &localapi.JobRequest{Name: o.name, Command: command, Env: o.env, Dir: o.workDir, GPUs: o.gpus,
		LossBudget: o.lossBudget, RuntimeHint: o.runtimeHint, Replicas: o.replicas, MaxFailures: o.maxFailures}
	for _, k := range o.secretEnv {
		if err := pki.ValidEnvName(k); err != nil {
			return usagef("--secret-env: %v", err)
		}
		v := env.Getenv(k)
		if v == "" {
			return usagef("--secret-env %s: the variable is not set (or empty) in this environment", k)
		}
		if jr.Secrets == nil {
			jr.Secrets = map[string]string{}
		}
		jr.Secrets[k] = v
	}
	if o.name != "" {
		if err := localapi.ValidJobName(o.name); err != nil {
			return usagef("--name: %v", err)
		}
	}
	if o.gpus < 1 {
		return usagef("--gpus %d: want at least 1", o.gpus)
	}
	if err := state.ValidReplicas(o.replicas); err != nil {
		return usagef("--replicas: %v", err)
	}
	if o.maxFailures < 0 || o.maxFailures > state.MaxMaxFailures {
		return usagef("--max-failures %d: want 0 to %d", o.maxFailures, state.MaxMaxFailures)
	}
	if o.lossBudget <= 0 {
		return usagef("--loss-budget %v: want a positive duration", o.lossBudget)
	}
	if o.runtimeHint < 0 {
		return usagef("--runtime-hint %v: must not be negative", o.runtimeHint)
	}
	if err := state.ValidStopGrace(o.grace); err != nil {
		return usagef("--grace: %v", err)
	}
	var err error
	if o.vram != "" {
		if jr.VRAM, err = gpu.ParseBytes(o.vram); err != nil {
			return usagef("--vram: %v", err)
		}
	}
	if o.sizeHint != "" {
		if jr.SizeHint, err = gpu.ParseBytes(o.sizeHint); err != nil {
			return usagef("--size-hint: %v", err)
		}
	}
	if o.memory != "" {
		if jr.Memory, err = gpu.ParseBytes(o.memory); err != nil {
			return usagef("--memory: %v", err)
		}
	}
	jr.CPUs = o.cpus
	if err := state.ValidJobLimits(jr.Memory, jr.CPUs); err != nil {
		return usagef("--memory/--cpus: %v", err)
	}
	if o.capability != "" {
		c, err := gpu.ParseCapability(o.capability)
		if err != nil {
			return usagef("--capability: %v", err)
		}
		jr.Capability = c.Float()
	}
	sig, err := state.CanonicalSignal(o.signal)
	if err != nil {
		return usagef("--signal: %v", err)
	}
	for _, e := range o.env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return usagef("--env %q: want KEY=VALUE", e)
		}
	}
	// Only what was given goes into the job's record: a job without them
	// gets the defaults of whichever node runs it (USR1, 30 s).
	if o.signalSet {
		jr.Signal = sig
	}
	if o.graceSet {
		jr.Grace = o.grace
	}
	if jr.Workdir, err = bundleDir(o.bundleDir); err != nil {
		return err
	}
	for _, p := range o.roPaths {
		if !filepath.IsAbs(p) {
			return usagef("--ro-path %q: want an absolute path", p)
		}
		jr.ROPaths = append(jr.ROPaths, filepath.Clean(p))
	}
	if jr.Keep, err = parseKeep(o.keep); err != nil {
		return usagef("--keep: %v", err)
	}
	if jr.MaxBundle, err = gpu.ParseBytes(o.maxBundle); err != nil || jr.MaxBundle <= 0 {
		return usagef("--max-bundle %q: want a positive size such as 200MiB", o.maxBundle)
	}
	resp, err := callAgent(ctx, o.dataDir, localapi.Request{Op: localapi.OpRun, Job: jr})
	if err != nil {
		if resp.Kind == localapi.KindBadRequest {
			// The bundle or the command the caller gave.
			return usagef("%v", err)
		}
		return err
	}
	if resp.Warning != "" {
		fmt.Fprintf(env.Stderr, "reclaimnet run: warning: %s\n", resp.Warning)
	}
	fmt.Fprintln(env.Stdout, resp.JobID)
	return nil
}

// bundleDir checks the directory run takes as the job's bundle (dir, or the
// current directory) and returns its absolute path: the local agent reads
// it. What the agent finds wrong inside it comes back as a bad request.
func bundleDir(dir string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", usagef("current directory: %v (give --workdir)", err)
		}
		dir = wd
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", usagef("--workdir %s: %v", dir, err)
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", usagef("--workdir %s: no such directory", dir)
	case err != nil:
		return "", usagef("--workdir %s: %v", dir, err)
	case !st.IsDir():
		return "", usagef("--workdir %s: not a directory", dir)
	}
	f, err := os.Open(abs)
	if err == nil {
		_, err = f.Readdirnames(1)
		f.Close()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return "", usagef("--workdir %s: cannot read it: %v", dir, err)
	}
	return abs, nil
}

// parseKeep parses --keep: a Go duration (36h, 90m) or whole days (7d).
func parseKeep(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 3650 {
			return 0, fmt.Errorf("%q: want whole days from 0 to 3650, e.g. 7d", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("%q: want a duration such as 7d or 36h", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q: want more than 0", s)
	}
	return d, nil
}
