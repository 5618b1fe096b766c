package agent

import (
	"context"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// telemetryLoop publishes this node's report every TelemetryInterval.
func (a *Agent) telemetryLoop(ctx context.Context) {
	interval := time.Duration(a.cfg.TelemetryInterval)
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		now := time.Now()
		if err := a.mesh.PublishTelemetry(a.localTelemetry(), now); err != nil {
			a.logger.Warn("publish telemetry", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// localTelemetry samples this node. Bandwidth is the enforcement
// subsystem's per-building estimate from the kernel's egress counters
// (none with enforcement off: the leader then keeps its defaults), the
// kill-switch its kernel mode ("disabled" with enforcement off), Flows the
// progress of the transfers it sends.
func (a *Agent) localTelemetry() mesh.Telemetry {
	// Free GPUs: all of them until the job supervisor reports its use;
	// none where jobs cannot start (the sandbox is on but cannot confine
	// them), so the leader places nothing here.
	free := a.gpus
	if !a.Sandbox().Available {
		free = 0
	}
	t := mesh.Telemetry{Load: a.sampleLoad(), FreeGPUs: uint16(min(free, 65535))}
	if a.coord != nil {
		t.Hazard = publishedHazard(a.coord, a.cfg.Name)
	}
	if a.enforce != nil {
		t.Bandwidth = a.enforce.Current().Bandwidth()
		t.KillSwitch, t.KillSwitchDrops = a.enforce.KillSwitch()
	}
	// The leader reads every node's transfers from gossip (a hand-off
	// nearly done must not be judged as not started).
	t.Flows = gossipFlows(a.flowProgress())
	t.DataDir, t.DataFree = dataDirState(a.cfg.DataDir)
	return t
}

// dataDirState says whether dir takes checkpoints: writable (the file
// system is not read-only and the agent may write there) and how many
// bytes are free for it. The leader's eligibility rule reads both.
func dataDirState(dir string) (mesh.DataDirState, uint64) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return mesh.DataDirReadOnly, 0
	}
	free := st.Bavail * uint64(st.Bsize)
	if st.Flags&unix.ST_RDONLY != 0 || unix.Access(dir, unix.W_OK) != nil {
		return mesh.DataDirReadOnly, free
	}
	return mesh.DataDirWritable, free
}

// hostLoad is the 1-minute load average per CPU (0 if unreadable).
func hostLoad() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 0
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil || v < 0 {
		return 0
	}
	return v / float64(runtime.NumCPU())
}

// gossipFlows orders this node's flow progress for its telemetry report,
// which holds only the first few: transfers racing a deadline or carrying
// a job's only copy (hand-offs, restores, evacuations) before periodic
// checkpoints, unfinished before finished.
func gossipFlows(flows []state.FlowProgress) []mesh.FlowProgress {
	out := make([]mesh.FlowProgress, 0, len(flows))
	for _, f := range flows {
		out = append(out, mesh.FlowProgress{ID: f.ID, Remaining: uint64(max(f.Remaining, 0)), Done: f.Done})
	}
	rank := func(f mesh.FlowProgress) int {
		r := 0
		if strings.HasPrefix(f.ID, policy.CheckpointPrefix) {
			r += 2
		}
		if f.Done {
			r++
		}
		return r
	}
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i]) < rank(out[j]) })
	return out
}
