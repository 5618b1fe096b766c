package demo

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/supervisor"
)

// SyntheticJob is the built-in training job the demo runs where PyTorch is
// missing (`reclaimnet demo-job`, a hidden command). It follows the
// checkpoint contract (docs/jobs.md) exactly like examples/pytorch/train.py
// and prints the same lines ("step=N", "restored step=N from DIR (restart
// K)", "checkpoint step=N ok=true"), so the demo reads both the same way.
//
// Its state is a step counter and StateBytes of model-like data: every step
// rewrites one 64 KiB block with bytes drawn from a generator seeded by the
// step, so the state is a pure function of the step. A restored job checks
// that, proving the checkpoint it got is the one for the step it claims.
type SyntheticJob struct {
	// StateBytes is the checkpoint's size (rounded up to whole blocks).
	StateBytes int
	// StepTime is the pause between steps.
	StepTime time.Duration
	// Steps stops the job after this many steps (0: never).
	Steps int64
	// Out receives the job's output lines.
	Out io.Writer
	// Getenv reads the contract's RECLAIMNET_* variables.
	Getenv func(string) string
}

// syntheticBlock is the unit one step rewrites.
const syntheticBlock = 64 << 10

// Checkpoint file names of the synthetic job.
const (
	syntheticStateFile = "state.bin"
	syntheticMetaFile  = "meta.json"
)

type syntheticMeta struct {
	Step       int64 `json:"step"`
	StateBytes int   `json:"state_bytes"`
}

// syntheticState returns the state after step steps (steps 0..step-1
// done) for blocks blocks.
func syntheticState(blocks int, step int64) []byte {
	buf := make([]byte, blocks*syntheticBlock)
	for b := 0; b < blocks; b++ {
		// The last step that wrote block b, or none (-1: the initial fill).
		last := int64(-1)
		if step > 0 {
			last = (step-1)/int64(blocks)*int64(blocks) + int64(b)
			if last > step-1 {
				last -= int64(blocks)
			}
			last = max(last, -1)
		}
		fillBlock(buf[b*syntheticBlock:(b+1)*syntheticBlock], last)
	}
	return buf
}

// fillBlock writes the bytes step s writes into a block (s = -1: initial).
func fillBlock(dst []byte, s int64) {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], uint64(s))
	rng := rand.NewChaCha8(seed)
	for i := 0; i+8 <= len(dst); i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], rng.Uint64())
	}
}

// Run trains until ctx ends (the supervisor's SIGTERM, which the command
// maps to ctx), Steps is reached, or an error. Stopping by ctx returns an
// error, so the process does not exit 0 (which would report the job done).
func (j SyntheticJob) Run(ctx context.Context) error {
	if j.Getenv == nil {
		j.Getenv = os.Getenv
	}
	blocks := max(1, (j.StateBytes+syntheticBlock-1)/syntheticBlock)
	sigName := j.Getenv("RECLAIMNET_CKPT_SIGNAL")
	if sigName == "" {
		sigName = "USR1"
	}
	sig, err := supervisor.SignalByName(sigName)
	if err != nil {
		return fmt.Errorf("checkpoint signal: %w", err)
	}
	requests := make(chan os.Signal, 1)
	signal.Notify(requests, sig)
	defer signal.Stop(requests)

	step := int64(0)
	if dir := j.Getenv("RECLAIMNET_RESTORE_DIR"); dir != "" {
		step, err = restoreSynthetic(dir, blocks)
		if err != nil {
			return err
		}
		fmt.Fprintf(j.Out, "restored step=%d from %s (restart %s) state verified\n", step, dir, j.Getenv("RECLAIMNET_RESTART_COUNT"))
	}
	state := syntheticState(blocks, step)
	if f := j.Getenv("RECLAIMNET_READY_FILE"); f != "" {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			return fmt.Errorf("ready file: %w", err)
		}
	}
	ckptDir := j.Getenv("RECLAIMNET_CKPT_DIR")
	tick := time.NewTicker(max(j.StepTime, time.Millisecond))
	defer tick.Stop()
	requested := false
	for j.Steps == 0 || step < j.Steps {
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped at step=%d: %w", step, context.Cause(ctx))
		case <-requests:
			requested = true
			continue
		case <-tick.C:
		}
		// Like train.py: "step=N" names the step being done (0-based); a
		// checkpoint holds the number of steps done, the next one to do.
		b := int(step % int64(blocks))
		fillBlock(state[b*syntheticBlock:(b+1)*syntheticBlock], step)
		fmt.Fprintf(j.Out, "step=%d\n", step)
		step++
		// Step boundary: the only place a checkpoint is written.
		select {
		case <-requests:
			requested = true
		default:
		}
		if requested && ckptDir != "" {
			requested = false
			err := writeSynthetic(ckptDir, state, step)
			fmt.Fprintf(j.Out, "checkpoint step=%d ok=%t\n", step, err == nil)
			if err != nil {
				// Tell the supervisor at once instead of letting it time out.
				os.WriteFile(filepath.Join(ckptDir, ".failed"), []byte(err.Error()), 0o644)
			}
		}
	}
	fmt.Fprintf(j.Out, "done step=%d\n", step)
	return nil
}

func writeSynthetic(dir string, state []byte, step int64) error {
	meta, _ := json.Marshal(syntheticMeta{Step: step, StateBytes: len(state)})
	if err := writeSynced(filepath.Join(dir, syntheticStateFile), state); err != nil {
		return err
	}
	if err := writeSynced(filepath.Join(dir, syntheticMetaFile), meta); err != nil {
		return err
	}
	return writeSynced(filepath.Join(dir, ".complete"), nil)
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// errBadCheckpoint: the restored state is not the state of its step.
var errBadCheckpoint = errors.New("synthetic job: restored state does not match its step")

func restoreSynthetic(dir string, blocks int) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, syntheticMetaFile))
	if err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	var meta syntheticMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return 0, fmt.Errorf("restore %s: %w", syntheticMetaFile, err)
	}
	state, err := os.ReadFile(filepath.Join(dir, syntheticStateFile))
	if err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	if meta.Step < 0 || len(state) != blocks*syntheticBlock {
		return 0, fmt.Errorf("%w: step %d, %d bytes, want %d", errBadCheckpoint, meta.Step, len(state), blocks*syntheticBlock)
	}
	want := syntheticState(blocks, meta.Step)
	for i := range want {
		if state[i] != want[i] {
			return 0, fmt.Errorf("%w: step %d, first difference at byte %d", errBadCheckpoint, meta.Step, i)
		}
	}
	return meta.Step, nil
}
