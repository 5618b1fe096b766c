package jobs

import (
	"cmp"
	"slices"
)

// gpuSet hands this node's GPUs to the jobs it runs. The leader places a
// job on a node with enough free GPUs but does not say which; this picks
// them, the unused ones first, so each job's sandbox reaches only its own.
// Guarded by Manager.mu.
type gpuSet struct {
	devices []int       // Config.GPUs
	users   map[int]int // jobs holding each device
}

// take gives a job that needs n GPUs up to n devices: unused ones first,
// then the least used (a job still stopping may hold one the leader
// already counts as free). It reports whether the job shares one.
func (g *gpuSet) take(n int) (gpus []int, shared bool) {
	if g.users == nil {
		g.users = map[int]int{}
	}
	order := slices.Clone(g.devices)
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(g.users[a], g.users[b]) })
	gpus = order[:min(n, len(order))]
	for _, d := range gpus {
		shared = shared || g.users[d] > 0
		g.users[d]++
	}
	slices.Sort(gpus)
	return gpus, shared
}

// give returns devices take handed out.
func (g *gpuSet) give(gpus []int) {
	for _, d := range gpus {
		if g.users[d]--; g.users[d] <= 0 {
			delete(g.users, d)
		}
	}
}
