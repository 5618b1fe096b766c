package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The closed form of the state after N steps equals applying the steps one
// by one.
func TestSyntheticStateClosedForm(t *testing.T) {
	for _, blocks := range []int{1, 3, 4} {
		state := syntheticState(blocks, 0)
		for step := int64(0); step <= int64(3*blocks+2); step++ {
			if got := syntheticState(blocks, step); string(got) != string(state) {
				t.Fatalf("blocks %d: closed form after %d steps differs from stepping", blocks, step)
			}
			b := int(step % int64(blocks))
			fillBlock(state[b*syntheticBlock:(b+1)*syntheticBlock], step)
		}
	}
	if string(syntheticState(2, 5)) == string(syntheticState(2, 6)) {
		t.Error("the state did not change between steps 5 and 6")
	}
}

// lineReader collects a job's output lines for waiting on them.
type lineReader struct {
	lines chan string
}

func newLineReader(r io.Reader) *lineReader {
	lr := &lineReader{lines: make(chan string, 10000)}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lr.lines <- sc.Text()
		}
		close(lr.lines)
	}()
	return lr
}

// waitLine returns the first line matching re (and the lines before it).
func (lr *lineReader) waitLine(t *testing.T, re *regexp.Regexp) (string, []string) {
	t.Helper()
	var seen []string
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lr.lines:
			if !ok {
				t.Fatalf("output ended before a line matching %s; saw %q", re, seen)
			}
			if re.MatchString(l) {
				return l, seen
			}
			seen = append(seen, l)
		case <-timeout:
			t.Fatalf("no line matching %s within 30s; saw %q", re, seen)
		}
	}
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// A checkpoint requested by the signal holds the step count; a job started
// from it resumes at that step, verifies the state and continues.
func TestSyntheticJobCheckpointAndResume(t *testing.T) {
	dir := t.TempDir()
	ckpt, ready := filepath.Join(dir, "ckpt"), filepath.Join(dir, "ready")
	os.Mkdir(ckpt, 0o755)
	env := map[string]string{"RECLAIMNET_CKPT_DIR": ckpt, "RECLAIMNET_READY_FILE": ready, "RECLAIMNET_CKPT_SIGNAL": "USR2"}
	pr, pw := io.Pipe()
	lines := newLineReader(pr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- SyntheticJob{StateBytes: 3*syntheticBlock - 100, StepTime: 5 * time.Millisecond, Out: pw, Getenv: envOf(env)}.Run(ctx)
		pw.Close()
	}()
	lines.waitLine(t, regexp.MustCompile(`^step=3$`))
	if _, err := os.Stat(ready); err != nil {
		t.Fatalf("ready file not touched after steps: %v", err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	line, _ := lines.waitLine(t, regexp.MustCompile(`^checkpoint step=\d+ ok=true$`))
	n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(line, "checkpoint step="), " ok=true"), 10, 64)
	if _, err := os.Stat(filepath.Join(ckpt, ".complete")); err != nil {
		t.Fatalf("no .complete after %q: %v", line, err)
	}
	cancel()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "stopped at step=") {
		t.Errorf("stopped job returned %v, want a 'stopped at step=' error (exit 0 would report the job done)", err)
	}
	for range lines.lines {
	}
	if st, err := os.Stat(filepath.Join(ckpt, syntheticStateFile)); err != nil || st.Size() != 3*syntheticBlock {
		t.Fatalf("checkpoint state: %v, %v; want %d bytes", st, err, 3*syntheticBlock)
	}

	// Resume from the checkpoint and run 5 more steps.
	env2 := map[string]string{"RECLAIMNET_RESTORE_DIR": ckpt, "RECLAIMNET_RESTART_COUNT": "1", "RECLAIMNET_CKPT_SIGNAL": "USR2"}
	pr2, pw2 := io.Pipe()
	lines2 := newLineReader(pr2)
	go func() {
		done <- SyntheticJob{StateBytes: 3 * syntheticBlock, StepTime: time.Millisecond, Steps: n + 5, Out: pw2, Getenv: envOf(env2)}.Run(context.Background())
		pw2.Close()
	}()
	restored, _ := lines2.waitLine(t, regexp.MustCompile(`^restored step=`))
	if want := fmt.Sprintf("restored step=%d from %s (restart 1) state verified", n, ckpt); restored != want {
		t.Errorf("got %q, want %q", restored, want)
	}
	first, _ := lines2.waitLine(t, regexp.MustCompile(`^step=`))
	if want := fmt.Sprintf("step=%d", n); first != want {
		t.Errorf("first step after resume %q, want %q (continues, no restart from scratch)", first, want)
	}
	last, steps := lines2.waitLine(t, regexp.MustCompile(`^done `))
	if want := fmt.Sprintf("done step=%d", n+5); last != want || len(steps) != 4 {
		t.Errorf("got %q after %d more step lines, want %q after 4", last, len(steps), want)
	}
	if err := <-done; err != nil {
		t.Errorf("finished job: %v", err)
	}
}

// A checkpoint whose state is not the state of its step is refused.
func TestSyntheticJobRejectsCorruptCheckpoint(t *testing.T) {
	dir := t.TempDir()
	if err := writeSynthetic(dir, syntheticState(2, 7), 7); err != nil {
		t.Fatal(err)
	}
	if step, err := restoreSynthetic(dir, 2); err != nil || step != 7 {
		t.Fatalf("intact checkpoint: step %d, %v; want 7, nil", step, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, syntheticStateFile))
	b[syntheticBlock+10] ^= 1
	os.WriteFile(filepath.Join(dir, syntheticStateFile), b, 0o644)
	err := SyntheticJob{StateBytes: 2 * syntheticBlock, Out: io.Discard, Getenv: envOf(map[string]string{"RECLAIMNET_RESTORE_DIR": dir})}.Run(context.Background())
	if !errors.Is(err, errBadCheckpoint) || !strings.Contains(err.Error(), fmt.Sprint(syntheticBlock+10)) {
		t.Errorf("corrupt checkpoint: got %v, want errBadCheckpoint naming byte %d", err, syntheticBlock+10)
	}
}
