package sim

import (
	"fmt"

	"github.com/reclaimnet/reclaimnet/trace"
)

// StorageBuilding is the building of the storage nodes AddStorage adds:
// a machine room on the core.
const StorageBuilding = "machine-room"

// AddStorage returns a copy of tr with n storage nodes (trace role
// "storage": a machine-room server or NAS that keeps checkpoints, hosts no
// jobs and never leaves), nas1…nasN, each on its own 10 Gbit/s link to the
// core, with no bandwidth samples (nothing else uses them, so their
// capacity is available). tr is not changed; n ≤ 0 returns tr.
func AddStorage(tr *trace.Trace, n int) *trace.Trace {
	if n <= 0 {
		return tr
	}
	c := *tr
	c.Nodes = append([]trace.NodeRec(nil), tr.Nodes...)
	c.Links = append([]trace.LinkRec(nil), tr.Links...)
	for i := range n {
		id := fmt.Sprintf("nas%d", i+1)
		c.Nodes = append(c.Nodes, trace.NodeRec{ID: id, Building: StorageBuilding, Role: trace.RoleStorage, AccessLink: "acc-" + id})
		c.Links = append(c.Links, trace.LinkRec{ID: "acc-" + id, A: id, B: "core", CapacityMbs: 10000})
	}
	c.Header.Version = max(c.Header.Version, trace.Needed(&c))
	c.Header.Name += fmt.Sprintf(", %d storage node(s)", n)
	return &c
}
