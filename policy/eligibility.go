package policy

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// NodeHealth is what the eligibility rule reads about one node: the
// coordinator fills it from the replicated registry, the reclaims and the
// node's gossiped telemetry.
type NodeHealth struct {
	// Alive: an active member that gossip sees.
	Alive bool
	// KillSwitch is the node's kill-switch mode: "soft" or "hard" makes
	// it ineligible; anything else ("off", no kernel layer, not
	// reported) does not.
	KillSwitch string
	// Verified: the leader verified the node's certificate; Unverified
	// says why not when it is not (empty: "certificate not verified").
	Verified   bool
	Unverified string
	// DiskKnown is set when the node reports its data directory; then
	// DataWritable says whether it is writable and FreeDisk how many
	// bytes it has free. NeedDisk is the room a checkpoint needs (the
	// largest checkpoint of the cluster's jobs).
	DiskKnown    bool
	DataWritable bool
	FreeDisk     int64
	NeedDisk     int64
	// Reclaimed: a reclaim of the node is pending, or it was reclaimed and
	// has not lent again; Draining: the node's agent is stopping.
	Reclaimed bool
	Draining  bool
	// Load is the node's load, compared with MaxLoad (θ).
	Load    float64
	MaxLoad float64
}

// MinFreeDisk is the least free space a data directory needs even when
// no job's checkpoint size is known yet: a full disk takes no job (its
// logs, restores and checkpoints would fail).
const MinFreeDisk = 64 << 20

// Ineligible returns why a node may not take a job, a standby or a copy
// (empty when it may): one rule for placements, destinations, standbys and
// replica holders (docs/design.md P2.3). The first failed condition, in
// this order: alive, kill-switch off, certificate verified, data directory
// writable with room for a checkpoint, not reclaimed or draining, load at
// most θ.
func Ineligible(h NodeHealth) string {
	switch {
	case !h.Alive:
		return "not alive"
	case h.KillSwitch == "soft" || h.KillSwitch == "hard":
		return "kill-switch " + h.KillSwitch
	case !h.Verified:
		return cmp.Or(h.Unverified, "certificate not verified")
	case h.DiskKnown && !h.DataWritable:
		return "data directory not writable"
	case h.DiskKnown && h.FreeDisk < max(h.NeedDisk, MinFreeDisk):
		// The free figure changes every report: not in the reason, which
		// is part of the replicated decisions.
		return fmt.Sprintf("data directory full (a checkpoint needs %s)", byteSize(max(h.NeedDisk, MinFreeDisk)))
	case h.Reclaimed:
		return "reclaimed by its owner"
	case h.Draining:
		return "draining"
	case h.Load > h.MaxLoad:
		return fmt.Sprintf("load above θ = %.2f", h.MaxLoad)
	}
	return ""
}

// NodeVerdict is one node the eligibility rule keeps out, with why.
type NodeVerdict struct {
	Node   NodeID
	Reason string
}

// ineligibleNodes lists the snapshot's ineligible nodes by ID (Tick's
// output, so every view shows the leader's verdict).
func ineligibleNodes(w *world) []NodeVerdict {
	var out []NodeVerdict
	for _, nd := range w.nodes {
		if nd.Ineligible != "" {
			out = append(out, NodeVerdict{Node: nd.ID, Reason: nd.Ineligible})
		}
	}
	return out
}

// byteSize writes n bytes in binary units (MiB, GiB).
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n)/unit, 0
	for v >= unit && u < 5 {
		v /= unit
		u++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[u])
}

// unplacedReason says why no node can take j this period, for a placement
// without a node: a requirement no node of the cluster meets at all, or
// what keeps each node out, most common first.
func (w *world) unplacedReason(j *Job) string {
	var hosts, maxGPUs int
	var maxVRAM int64
	for i, nd := range w.nodes {
		if w.storage[i] {
			continue
		}
		hosts++
		maxGPUs = max(maxGPUs, nd.GPUs)
		maxVRAM = max(maxVRAM, nd.GPU.VRAM)
	}
	switch {
	case hosts == 0:
		return "no node in the cluster can host jobs"
	case j.GPUs > maxGPUs:
		return fmt.Sprintf("needs %d GPUs; the largest node has %d", j.GPUs, maxGPUs)
	case j.VRAM > maxVRAM:
		return fmt.Sprintf("needs %s of VRAM per GPU; the largest GPU has %s", byteSize(j.VRAM), byteSize(maxVRAM))
	}
	counts := map[string]int{}
	for i, nd := range w.nodes {
		if w.storage[i] {
			continue
		}
		r := string(w.staticReject(scanRequest{job: j, src: -1}, i))
		if r == string(RejectIneligible) {
			r = "not eligible: " + nd.Ineligible
		}
		if r == "" {
			r = "no room on its paths"
		}
		counts[r]++
	}
	reasons := slices.Collect(maps.Keys(counts))
	slices.SortFunc(reasons, func(a, b string) int { return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(reasons))
	for k, r := range reasons {
		parts[k] = fmt.Sprintf("%s (%d)", r, counts[r])
	}
	return "no node can take it now: " + strings.Join(parts, ", ")
}
