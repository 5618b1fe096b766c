package agent

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"

	"github.com/reclaimnet/reclaimnet/agent/jobs"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
)

// e2eStepJob is agent/jobs' test job (a POSIX sh job following the
// contract): it counts steps, restores its step from
// RECLAIMNET_RESTORE_DIR, writes it into the checkpoint directory on
// SIGUSR1, and logs "id event step [restart-count]" lines to steps.log in
// its working directory (id is fresh for each process: in its own PID
// namespace every instance has the same $$). It also prints one line to
// stdout, for the logs operation.
const e2eStepJob = `#!/bin/sh
id=$(cat /proc/sys/kernel/random/uuid)
log="$HOME/steps.log"
step=0
if [ -n "$RECLAIMNET_RESTORE_DIR" ]; then step=$(cat "$RECLAIMNET_RESTORE_DIR/step"); fi
echo "$id start $step $RECLAIMNET_RESTART_COUNT" >> "$log"
echo "started at step $step"
ck=0
trap 'ck=1' USR1
trap 'echo "$id term $step" >> "$log"; exit 0' TERM
touch "$RECLAIMNET_READY_FILE"
while :; do
  if [ "$ck" = 1 ]; then
    ck=0
    echo "$step" > "$RECLAIMNET_CKPT_DIR/step"
    touch "$RECLAIMNET_CKPT_DIR/.complete"
    echo "$id ckpt $step" >> "$log"
  fi
  step=$((step+1)); echo "$id step $step" >> "$log"
  sleep 0.05
done
`

// stepLine is one line of the step log.
type stepLine struct {
	pid, event string
	step       int
	restarts   string
}

// readStepLog reads the step logs matching pattern (one per node the job
// ran on: c.jobFiles(job, "steps.log")).
func readStepLog(t *testing.T, pattern string) []stepLine {
	t.Helper()
	paths, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	var out []stepLine
	for _, p := range paths {
		out = append(out, readStepFile(t, p)...)
	}
	return out
}

func readStepFile(t *testing.T, path string) []stepLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	defer f.Close()
	var out []stepLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue // a line being written
		}
		n, err := strconv.Atoi(fields[2])
		if err != nil {
			continue
		}
		l := stepLine{pid: fields[0], event: fields[1], step: n}
		if len(fields) > 3 {
			l.restarts = fields[3]
		}
		out = append(out, l)
	}
	return out
}

// call sends a control request to node n's socket, as the CLI does.
func call(t *testing.T, n *testNode, req localapi.Request) localapi.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := localapi.Call(ctx, n.agent.DataDir(), req)
	if err != nil {
		t.Fatalf("%s %s: %v", n.info.Node, req.Op, err)
	}
	return resp
}

func findJob(jobs []localapi.JobInfo, id string) (localapi.JobInfo, bool) {
	for _, j := range jobs {
		if j.ID == id {
			return j, true
		}
	}
	return localapi.JobInfo{}, false
}

// stepInVersion restores version v of job from the agent's checkpoint
// store and returns the step the job wrote into it.
func stepInVersion(t *testing.T, a *Agent, job string, v uint64) int {
	t.Helper()
	dir := t.TempDir()
	if err := a.jobs.store.Restore(job, v, dir); err != nil {
		t.Fatalf("restore %s v%d on %s: %v", job, v, a.cfg.Name, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "step"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("step file of v%d: %v", v, err)
	}
	return n
}

// startJobCluster starts three agents with one declared GPU each, P1 off
// (a fixed 1 s checkpoint interval) and load pinned low, and waits for
// three voters. It returns them by name too.
func startJobCluster(t *testing.T) (*testCluster, map[string]*testNode) {
	t.Helper()
	c := newTestCluster(t)
	c.load = func() float64 { return 0.25 } // this machine's load may exceed P2's θ
	c.raftConfig = func(rc *raft.Config) {
		// P1 off: checkpoints every second instead of minutes.
		rc.Params.Switches.P1 = false
		rc.Params.FixedInterval = time.Second
	}
	for i, b := range []string{"physics", "chemistry", "library"} {
		cfg := c.config("node-0" + strconv.Itoa(i))
		cfg.Building = b
		cfg.GPUs = []string{"RTX-4090:24GiB:8.9:x1"}
		cfg.CacheSize = Size(256 << 20)
		c.start(cfg)
	}
	c.waitConfig(3, 3, 60*time.Second)
	byName := map[string]*testNode{}
	for _, n := range c.nodes {
		byName[n.info.Node] = n
	}
	return c, byName
}

// TestJobSurvivesHostLoss is the job's main flow with three real agents
// (gossip, Raft, QUIC transfers over mutual TLS on loopback, separate data
// dirs): a sh job submitted through the control socket's run operation
// (what 'reclaimnet run' sends) starts on one node, its checkpoints are
// committed and replicated to another node (visible in the jobs
// operation), its host is stopped abruptly, and it resumes on another node
// from the replicated checkpoint: its step counter continues from that
// checkpoint, not from zero.
func TestJobSurvivesHostLoss(t *testing.T) {
	t.Parallel()
	c, byName := startJobCluster(t)
	script, stepLog := c.writeScript("e2e.sh", e2eStepJob), c.jobFiles("e2e", "steps.log")
	// 1. Submit through the control socket, as 'reclaimnet run' does.
	submitter := c.nodes[2]
	resp := call(t, submitter, localapi.Request{Op: localapi.OpRun, Job: &localapi.JobRequest{Name: "e2e", Command: []string{"/bin/sh", script},
		GPUs: 1, LossBudget: time.Hour, SizeHint: 1 << 10}})
	if resp.Error != "" || resp.JobID != "e2e" {
		t.Fatalf("run: got id %q error %q (%s), want id e2e", resp.JobID, resp.Error, resp.Kind)
	}
	// The same job again with another definition is refused.
	resp = call(t, submitter, localapi.Request{Op: localapi.OpRun, Job: &localapi.JobRequest{Name: "e2e", Command: []string{"/bin/false"}}})
	if resp.Kind != localapi.KindJobExists {
		t.Errorf("second run of e2e with another command: got kind %q (%q), want %q", resp.Kind, resp.Error, localapi.KindJobExists)
	}

	// 2. It runs, and checkpoints reach a node other than its host.
	var before localapi.JobInfo
	wait.For(t, 90*time.Second, "job e2e running with a committed checkpoint held off its host", func() bool {
		j, ok := findJob(call(t, submitter, localapi.Request{Op: localapi.OpJobs}).Jobs, "e2e")
		if !ok || j.State != policy.JobRunning.String() || j.Node == "" || j.LastCommitted < 2 {
			return false
		}
		before = j
		return slices.ContainsFunc(j.Holders, func(h string) bool { return h != j.Node })
	})
	host := byName[before.Node]
	if host == nil {
		t.Fatalf("job runs on %q, not one of the agents", before.Node)
	}
	if before.Interval != time.Second {
		t.Errorf("jobs: interval %v, want the fixed 1s", before.Interval)
	}
	// Logs: the host returns the job's output; another node says where
	// it runs.
	lr := call(t, host, localapi.Request{Op: localapi.OpLogs, JobID: "e2e"})
	if lr.Error != "" || !strings.Contains(lr.Log, "started at step 0") {
		t.Errorf("logs on host %s: got log %q error %q, want the job's first line", host.info.Node, lr.Log, lr.Error)
	}
	var other *testNode
	for _, n := range c.nodes {
		if n != host {
			other = n
			break
		}
	}
	if lr := call(t, other, localapi.Request{Op: localapi.OpLogs, JobID: "e2e"}); lr.Kind != localapi.KindElsewhere || lr.Node != host.info.Node {
		t.Errorf("logs on %s: got kind %q node %q (%q), want %q naming %s", other.info.Node, lr.Kind, lr.Node, lr.Error, localapi.KindElsewhere, host.info.Node)
	}
	if lr := call(t, other, localapi.Request{Op: localapi.OpLogs, JobID: "nope"}); lr.Kind != localapi.KindUnknownJob {
		t.Errorf("logs of an unknown job: got kind %q, want %q", lr.Kind, localapi.KindUnknownJob)
	}
	// The checkpoint really is on another node: restore it from a holder
	// that is not the host.
	var holder *testNode
	for _, h := range before.Holders {
		if h != before.Node {
			holder = byName[h]
		}
	}
	committedStep := stepInVersion(t, holder.agent, "e2e", before.LastCommitted)
	if committedStep <= 0 {
		t.Fatalf("committed v%d holds step %d, want progress", before.LastCommitted, committedStep)
	}
	// The host's manager shows the pushes it made to the holder.
	if !slices.ContainsFunc(host.agent.Jobs().Transfers(), func(tv jobs.TransferView) bool {
		return tv.Job == "e2e" && string(tv.To) == holder.info.Node && tv.BytesTotal > 0
	}) {
		t.Errorf("host %s: transfers %+v, want one of e2e to %s", host.info.Node, host.agent.Jobs().Transfers(), holder.info.Node)
	}
	oldPids := map[string]bool{}
	for _, l := range readStepLog(t, stepLog) {
		oldPids[l.pid] = true
	}

	// 3. The host goes away abruptly (no graceful leave).
	host.stop(t, true)
	var survivor *testNode
	for _, n := range c.nodes {
		if n != host {
			survivor = n
			break
		}
	}

	// 4. The job resumes elsewhere from the replicated checkpoint.
	var after localapi.JobInfo
	wait.For(t, 120*time.Second, "job e2e running again on another node", func() bool {
		j, ok := findJob(call(t, survivor, localapi.Request{Op: localapi.OpJobs}).Jobs, "e2e")
		after = j
		return ok && j.State == policy.JobRunning.String() && j.Node != "" && j.Node != before.Node
	})
	newHost := byName[after.Node]
	var start stepLine
	wait.For(t, 60*time.Second, "the resumed process's start line", func() bool {
		for _, l := range readStepLog(t, stepLog) {
			if l.event == "start" && !oldPids[l.pid] {
				start = l
				return true
			}
		}
		return false
	})
	var restoredFrom uint64
	for _, v := range newHost.agent.Jobs().View() {
		if v.Job == "e2e" {
			restoredFrom = v.RestoredFrom
		}
	}
	if restoredFrom < before.LastCommitted {
		t.Fatalf("new host %s restored from v%d, want the committed v%d or newer", newHost.info.Node, restoredFrom, before.LastCommitted)
	}
	if want := stepInVersion(t, newHost.agent, "e2e", restoredFrom); start.step != want || start.step < committedStep {
		t.Errorf("resumed at step %d, want %d (v%d's step; v%d held %d)", start.step, want, restoredFrom, before.LastCommitted, committedStep)
	}
	t.Logf("ran on %s, v%d (step %d) held by %v; resumed on %s from v%d at step %d, restart count %s",
		before.Node, before.LastCommitted, committedStep, before.Holders, after.Node, restoredFrom, start.step, start.restarts)
	if start.restarts == "0" || start.restarts == "" {
		t.Errorf("resumed process saw RECLAIMNET_RESTART_COUNT %q, want ≥ 1", start.restarts)
	}
	if after.Restarts < 1 {
		t.Errorf("jobs: restarts %d after the recovery, want ≥ 1", after.Restarts)
	}
	wait.For(t, 30*time.Second, "steps after the resume", func() bool {
		for _, l := range readStepLog(t, stepLog) {
			if l.pid == start.pid && l.event == "step" && l.step > start.step {
				return true
			}
		}
		return false
	})

	// 5. Cancel stops it: root on a voter (the leader: of the two nodes
	// left only one votes) is a cluster admin.
	var admin *testNode
	wait.For(t, 30*time.Second, "a leader", func() bool { admin = c.leader(); return admin != nil })
	if resp := call(t, admin, localapi.Request{Op: localapi.OpCancel, JobID: "e2e"}); resp.Error != "" {
		t.Fatalf("cancel: %s", resp.Error)
	}
	wait.For(t, 60*time.Second, "the resumed process to stop after cancel", func() bool {
		for _, l := range readStepLog(t, stepLog) {
			if l.pid == start.pid && l.event == "term" {
				return true
			}
		}
		return false
	})
	if resp := call(t, survivor, localapi.Request{Op: localapi.OpCancel, JobID: "nope"}); resp.Kind != localapi.KindUnknownJob {
		t.Errorf("cancel of an unknown job: got kind %q, want %q", resp.Kind, localapi.KindUnknownJob)
	}
}
