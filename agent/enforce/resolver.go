package enforce

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/mesh"
)

// BuildingResolver maps destination addresses to buildings from gossip
// metadata for the enforcement sampler, which asks for every destination
// every 100 ms: it rebuilds its table from the member list at most once
// a second.
type BuildingResolver struct {
	members func() []mesh.Member
	now     func() time.Time

	mu        sync.Mutex
	at        time.Time
	byAddr    map[netip.Addr]string
	buildings []string
}

func NewBuildingResolver(members func() []mesh.Member, now func() time.Time) *BuildingResolver {
	return &BuildingResolver{members: members, now: now}
}

const resolverRefresh = time.Second

func (r *BuildingResolver) refresh() {
	now := r.now()
	if r.byAddr != nil && now.Sub(r.at) < resolverRefresh && !now.Before(r.at) {
		return
	}
	byAddr := map[netip.Addr]string{}
	seen := map[string]bool{}
	var buildings []string
	for _, m := range r.members() {
		if m.MetaErr != nil {
			continue // a member we cannot read tells us no building
		}
		if ip, ok := netip.AddrFromSlice(m.Addr); ok {
			byAddr[ip.Unmap()] = m.Meta.Building
		}
		if (m.State == mesh.StateAlive || m.State == mesh.StateSuspect) && !seen[m.Meta.Building] {
			seen[m.Meta.Building] = true
			buildings = append(buildings, m.Meta.Building)
		}
	}
	slices.Sort(buildings)
	r.at, r.byAddr, r.buildings = now, byAddr, buildings
}

// Resolve returns the building of the member with address ip; false for
// an address outside the cluster.
func (r *BuildingResolver) Resolve(ip netip.Addr) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refresh()
	b, ok := r.byAddr[ip.Unmap()]
	return b, ok
}

// Buildings lists the buildings of live members, sorted.
func (r *BuildingResolver) Buildings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refresh()
	return slices.Clone(r.buildings)
}
