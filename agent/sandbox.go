package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/reclaimnet/reclaimnet/agent/sandbox"
	"github.com/reclaimnet/reclaimnet/localapi"
)

// sandboxConfig is how this node confines its guest jobs (docs/sandbox.md):
// the operator's mode, uid range, caps and read-only paths, the agent's
// own secrets hidden, and a cgroup parent of its own.
func (c Config) sandboxConfig() (sandbox.Config, error) {
	sc := sandbox.DefaultConfig()
	if c.Sandbox != "" {
		m, err := sandbox.ParseMode(c.Sandbox)
		if err != nil {
			return sc, fmt.Errorf("--sandbox: %w", err)
		}
		sc.Mode = m
	}
	if c.GuestUIDs != "" {
		first, count, err := ParseUIDRange(c.GuestUIDs)
		if err != nil {
			return sc, fmt.Errorf("--guest-uids: %w", err)
		}
		sc.FirstUID, sc.UIDCount = first, count
	}
	sc.GuestMemory = int64(c.GuestMemory)
	sc.GuestCPUs = c.GuestCPUs
	sc.ReadOnlyPaths = append([]string(nil), c.GuestROPaths...)
	if c.GPUDevDir != "" {
		sc.DevDir = c.GPUDevDir
	}
	// Everything that would let a guest act as the agent: its state (the
	// control socket, Raft, the store, other jobs' directories), its TLS
	// key and the gossip key.
	hidden := []string{c.TLSDir, c.GossipKeyFile}
	if c.DataDir != "" {
		hidden = append(hidden, c.DataDir, filepath.Join(c.DataDir, localapi.SocketFile))
	}
	for _, p := range hidden {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return sc, fmt.Errorf("hidden path %s: %w", p, err)
		}
		sc.HiddenPaths = append(sc.HiddenPaths, abs)
	}
	parent, err := cgroupParent(c.Name, c.DataDir)
	if err != nil {
		return sc, err
	}
	sc.CgroupParent = parent
	if err := sc.Validate(); err != nil {
		return sc, fmt.Errorf("sandbox: %w", err)
	}
	return sc, nil
}

// cgroupParent names the cgroup that holds this agent's jobs:
// reclaimnet/NAME-HASH, HASH from the data dir. Only one agent holds a data
// dir (its lock), so the start-up sweep, which kills every job cgroup under
// the parent, never touches another live agent's jobs, even with several
// agents on one machine (tests, the campus box, the demo).
func cgroupParent(name, dataDir string) (string, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return "", fmt.Errorf("cgroup parent: %w", err)
	}
	sum := sha256.Sum256([]byte(abs))
	var b strings.Builder
	for _, r := range name {
		if b.Len() >= 32 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return sandbox.DefaultCgroupParent + "/" + b.String() + "-" + hex.EncodeToString(sum[:4]), nil
}

// ParseUIDRange reads a guest uid range, "FIRST-LAST" (inclusive).
func ParseUIDRange(s string) (first, count uint32, err error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		return 0, 0, fmt.Errorf("uid range %q: want FIRST-LAST, e.g. %d-%d", s, sandbox.DefaultFirstUID, sandbox.DefaultFirstUID+sandbox.DefaultUIDCount-1)
	}
	lo, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	hi, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	if err1 != nil || err2 != nil || hi < lo || hi-lo+1 > math.MaxUint32 {
		return 0, 0, fmt.Errorf("uid range %q: want FIRST-LAST with FIRST ≤ LAST, e.g. %d-%d", s, sandbox.DefaultFirstUID, sandbox.DefaultFirstUID+sandbox.DefaultUIDCount-1)
	}
	if lo == 0 {
		return 0, 0, fmt.Errorf("uid range %q must not include 0 (root)", s)
	}
	return uint32(lo), uint32(hi - lo + 1), nil
}

// gpuDevices returns the indices of the GPUs whose device nodes exist
// (dev/nvidiaN): the ones a confined job can be given. A declared GPU
// without one (a simulated node) runs jobs without a device.
func gpuDevices(dev string, indices []int) []int {
	var out []int
	for _, i := range indices {
		if _, err := os.Stat(filepath.Join(dev, "nvidia"+strconv.Itoa(i))); err == nil {
			out = append(out, i)
		}
	}
	return out
}

// Sandbox says how this node runs guest jobs: confined, unconfined (the
// operator's --sandbox off) or not at all (confinement cannot be set up).
func (a *Agent) Sandbox() sandbox.Status {
	if a.jobs == nil || a.jobs.sup == nil {
		return sandbox.Status{Mode: sandbox.On, Reason: "no job supervisor"}
	}
	return a.jobs.sup.Sandbox()
}
