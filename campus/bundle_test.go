package campus

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
)

// bundleJob is the bundle's entry point. Its input (a token) is a file of
// the bundle; each checkpoint holds its step, and its outputs hold one
// line per step done, written just before the checkpoint completes, so the
// outputs of every version match its step. After a deadline's checkpoint
// it pauses. Twenty steps after its second restart it writes result.txt
// and exits 0.
const bundleJob = `#!/bin/sh
token=$(cat input/token.txt)
step=0
if [ -n "$RECLAIMNET_RESTORE_DIR" ]; then step=$(cat "$RECLAIMNET_RESTORE_DIR/step"); fi
out="$RECLAIMNET_OUTPUT_DIR/lines.txt"
written=$(cat "$out" 2>/dev/null | wc -l)
echo "started at step $step (restart $RECLAIMNET_RESTART_COUNT) in $PWD with token $token"
stop=0
if [ "$RECLAIMNET_RESTART_COUNT" -ge 2 ]; then stop=$((step+20)); fi
flush() {
  while [ "$written" -lt "$step" ]; do written=$((written+1)); echo "step $written $token" >> "$out"; done
}
ck=0
paused=
trap 'ck=1' USR1
trap 'exit 0' TERM
touch "$RECLAIMNET_READY_FILE"
while :; do
  if [ "$ck" = 1 ]; then
    ck=0
    flush
    echo "$step" > "$RECLAIMNET_CKPT_DIR/step"
    touch "$RECLAIMNET_CKPT_DIR/.complete"
    if [ -s "$RECLAIMNET_DEADLINE_FILE" ]; then paused=1; fi
  fi
  if [ -z "$paused" ]; then step=$((step+1)); fi
  if [ "$stop" -gt 0 ] && [ "$step" -ge "$stop" ]; then
    flush
    echo "done $step $token" > "$RECLAIMNET_OUTPUT_DIR/result.txt"
    exit 0
  fi
  sleep 0.2
done
`

// TestCampusBundleTravels: a job whose script and input exist only in a
// directory of the submitting node's home (every agent has its own mount
// namespace: the same path on the other nodes is absent, and so is the
// submitter's data directory), is reclaimed with notice and resumes on
// another node from its bundle and checkpoint, is reclaimed again without notice and recovers on a third,
// finishes there, and 'reclaimnet fetch' returns exactly the outputs it
// wrote (their tree hash against the lines the job must have written).
func TestCampusBundleTravels(t *testing.T) {
	requireScenarios(t)
	if testing.Short() {
		t.Skip("campus in a box: 6 agents in namespaces, minutes")
	}
	a := startAgentsForTest(t, AgentsConfig{Topology: SmallTopology(), ExtraArgs: []string{"--protocols", "p1,p2,p3", "--fixed-interval", "8s"}})
	ctx := context.Background()
	names := a.Names()
	submitter := names[0]

	// The submitter keeps the job in its home: at src for it, and for
	// no other node.
	src := filepath.Join(a.HomePath(), "exp")
	tok := make([]byte, 8)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	for name, body := range map[string]string{"job.sh": bundleJob, "input/token.txt": token + "\n", "notes.log": "left out\n", ".reclaimnetignore": "*.log\n"} {
		host := filepath.Join(a.HomeDir(submitter), "exp", name)
		if err := os.MkdirAll(filepath.Dir(host), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(host, []byte(body), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		for _, p := range []string{filepath.Join(src, "job.sh"), filepath.Join(a.DataDir(submitter), localapi.InfoFile)} {
			sees, err := a.Sees(n, p)
			if err != nil || sees != (n == submitter) {
				t.Fatalf("%s sees %s: %v (%v); want only the submitter %s to", n, p, sees, err, submitter)
			}
		}
	}
	if _, err := a.CLI(ctx, submitter, "run", "--name", "bund", "--workdir", src, "--gpus", "1", "--loss-budget", "8s", "--size-hint", "4KiB", "--grace", "5s",
		"--keep", "1h", "--", "./job.sh"); err != nil {
		t.Fatalf("submit: %v", err)
	}

	gone := map[string]bool{} // reclaimed nodes
	job := func() (localapi.JobInfo, string) {
		for _, n := range names {
			if gone[n] {
				continue
			}
			resp, err := a.Call(ctx, n, localapi.Request{Op: localapi.OpJobs})
			if err != nil || resp.Error != "" {
				continue
			}
			for _, j := range resp.Jobs {
				if j.ID == "bund" {
					return j, n
				}
			}
		}
		return localapi.JobInfo{}, ""
	}
	// waitOn waits until the job runs on a node other than those gone,
	// with a committed version held off that node, and returns the node.
	waitOn := func(what string, restarts int) string {
		t.Helper()
		var host string
		wait.ForWhy(t, 3*time.Minute, what, func() (bool, string) {
			j, _ := job()
			host = j.Node
			ok := j.State == "running" && host != "" && !gone[host] && j.Restarts >= restarts &&
				slices.ContainsFunc(j.Holders, func(h string) bool { return h != host && !gone[h] })
			return ok, fmt.Sprintf("%+v", j)
		})
		return host
	}
	jobLog := func(node string) string {
		b, _ := os.ReadFile(filepath.Join(a.DataDir(node), "jobs", "bund", "run", "job.log"))
		return string(b)
	}
	// started waits for the job's start line of restart n on node.
	started := func(node string, n int) string {
		t.Helper()
		want := fmt.Sprintf("(restart %d)", n)
		wait.For(t, 30*time.Second, "the job's start line on "+node, func() bool { return strings.Contains(jobLog(node), want) })
		return jobLog(node)
	}

	x1 := waitOn("the job running with a committed checkpoint off its node", 0)
	layout := filepath.Join(a.DataDir(x1), "jobs", "bund", "bundle")
	if l := started(x1, 0); !strings.Contains(l, "started at step 0 (restart 0) in "+layout+" with token "+token) {
		t.Fatalf("first start on %s: log %q, want the job in its bundle's layout with its token", x1, jobLog(x1))
	}
	if _, err := os.Stat(filepath.Join(layout, "notes.log")); err == nil {
		t.Errorf("the ignored notes.log is in the layout on %s", x1)
	}

	// 1. Reclaimed with notice: it hands off and resumes on another node.
	if out, err := a.CLI(ctx, x1, "reclaim", "--notice", "30s", "--detach"); err != nil {
		t.Fatalf("reclaim --notice on %s: %v\n%s", x1, err, out)
	}
	gone[x1] = true
	x2 := waitOn("the job resumed after the scheduled reclaim of "+x1, 1)
	if l := started(x2, 1); !strings.Contains(l, "(restart 1) in "+filepath.Join(a.DataDir(x2), "jobs", "bund", "bundle")+" with token "+token) ||
		strings.Contains(l, "started at step 0 ") {
		t.Fatalf("start on %s after the hand-off: log %q, want a resume from a checkpoint in the layout there", x2, l)
	}

	// 2. Reclaimed without notice: it recovers on a third node.
	if out, err := a.CLI(ctx, x2, "reclaim", "--now"); err != nil {
		t.Logf("reclaim --now on %s: %v\n%s", x2, err, out) // the agent may be gone before it answers
	}
	gone[x2] = true
	var info localapi.JobInfo
	var asker string
	wait.ForWhy(t, 4*time.Minute, "the job done after recovering on a third node", func() (bool, string) {
		info, asker = job()
		return info.State == "done" && len(info.ResultsOn) > 0, fmt.Sprintf("%+v", info)
	})
	var x3 string
	for _, n := range names {
		if !gone[n] && strings.Contains(jobLog(n), "(restart 2)") {
			x3 = n
		}
	}
	if x3 == "" || x3 == x1 || x3 == x2 {
		t.Fatalf("no third node ran the job after %s and %s", x1, x2)
	}

	// 3. Fetch: exactly what the job wrote.
	dest := filepath.Join(t.TempDir(), "results")
	out, err := a.CLI(ctx, asker, "fetch", "bund", "--out", dest, "--json")
	if err != nil {
		t.Fatalf("fetch on %s: %v", asker, err)
	}
	var fi localapi.FetchInfo
	if err := json.Unmarshal([]byte(out), &fi); err != nil || !slices.Contains(info.ResultsOn, fi.From) {
		t.Fatalf("fetch --json %q (%v): want it served by one of %v", out, err, info.ResultsOn)
	}
	result, err := os.ReadFile(filepath.Join(dest, "result.txt"))
	var last int
	if _, serr := fmt.Sscanf(string(result), "done %d "+token, &last); err != nil || serr != nil || last < 20 {
		t.Fatalf("result.txt %q (%v, %v): want done N %s", result, err, serr, token)
	}
	var want strings.Builder
	for i := 1; i <= last; i++ {
		fmt.Fprintf(&want, "step %d %s\n", i, token)
	}
	wantHash := treeHash(map[string]string{"lines.txt": want.String(), "result.txt": string(result)})
	if got := dirHash(t, dest); got != wantHash {
		b, _ := os.ReadFile(filepath.Join(dest, "lines.txt"))
		t.Fatalf("fetched outputs hash %s, want %s (lines 1 to %d once each and result.txt); lines.txt:\n%s", got, wantHash, last, b)
	}
	t.Logf("bund: %s → %s (notice) → %s (--now), done at step %d; fetched %d files from %s", x1, x2, x3, last, fi.Files, fi.From)
}

// treeHash hashes files (path → contents) in path order.
func treeHash(files map[string]string) string {
	h := sha256.New()
	for _, p := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "%s\x00%d\x00%s", p, len(files[p]), files[p])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// dirHash is treeHash of the regular files under dir.
func dirHash(t *testing.T, dir string) string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return treeHash(files)
}
