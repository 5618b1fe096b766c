package agent

import (
	"net"
	"sort"
	"strconv"

	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
)

// Link capacities assumed until a node measures its own (SPEC §0: 1 Gbit/s
// access links, building uplinks up to 10 Gbit/s), bytes/s.
const (
	DefaultAccessCapacity = 125e6
	DefaultUplinkCapacity = 1.25e9
)

// meshTelemetry implements raft.Telemetry from gossip, so the leader
// builds its policy.Snapshot from what every node reports.
type meshTelemetry struct {
	mesh *mesh.Mesh
}

var _ raft.Telemetry = meshTelemetry{}

func (t meshTelemetry) Members() []raft.Member {
	members := t.mesh.Members()
	out := make([]raft.Member, 0, len(members))
	for _, m := range members {
		if m.MetaErr != nil {
			continue // a node we cannot read is not given a vote
		}
		host := m.Addr.String()
		rm := raft.Member{
			ID:           policy.NodeID(m.Name),
			RaftAddr:     net.JoinHostPort(host, strconv.Itoa(int(m.Meta.RaftPort))),
			GossipAddr:   net.JoinHostPort(host, strconv.Itoa(int(m.Port))),
			TransferAddr: net.JoinHostPort(host, strconv.Itoa(int(m.Meta.TransferPort))),
			Building:     m.Meta.Building,
			GPU: policy.GPU{
				Model:      m.Meta.GPUModel,
				VRAM:       int64(m.Meta.GPUVRAMMiB) << 20,
				Capability: float64(m.Meta.GPUCapability) / 10,
			},
			GPUs:  int(m.Meta.GPUs),
			Since: m.Meta.Started,
		}
		switch m.State {
		case mesh.StateAlive:
			rm.Status = raft.MemberAlive
		case mesh.StateSuspect:
			rm.Status = raft.MemberSuspect
		case mesh.StateLeft:
			rm.Status = raft.MemberLeft
		default:
			rm.Status = raft.MemberFailed
		}
		if m.HasTelemetry {
			rm.Hazard = m.Telemetry.Hazard
		}
		out = append(out, rm)
	}
	return out
}

func accessLinkID(node string) string { return "access/" + node }

func (t meshTelemetry) Nodes() []raft.NodeTelemetry {
	var out []raft.NodeTelemetry
	for _, m := range t.mesh.Members() {
		if m.State != mesh.StateAlive {
			continue
		}
		n := raft.NodeTelemetry{ID: policy.NodeID(m.Name), FreeGPUs: int(m.Meta.GPUs), AccessLink: accessLinkID(m.Name)}
		if m.HasTelemetry {
			n.FreeGPUs, n.Load = int(m.Telemetry.FreeGPUs), m.Telemetry.Load
		}
		out = append(out, n)
	}
	return out
}

// Links builds the campus graph of SPEC P2.1 from gossip: each node hangs
// off its building switch by an access link, each building switch off the
// core by an uplink. A node's report of the bandwidth to its own building
// sets its access link; the smallest report from a building towards any
// other building sets that building's uplink (conservative). Links nobody
// measured yet carry the default capacity, with half of it as the lower
// bound.
func (t meshTelemetry) Links() []policy.Link {
	var links []policy.Link
	uplinks := map[string]*policy.Link{}
	for _, m := range t.mesh.Members() {
		if m.State != mesh.StateAlive {
			continue
		}
		b := m.Meta.Building
		access := policy.Link{ID: accessLinkID(m.Name), A: m.Name, B: "building/" + b,
			Capacity: DefaultAccessCapacity, Available: DefaultAccessCapacity, AvailableLow: DefaultAccessCapacity / 2}
		up, ok := uplinks[b]
		if !ok {
			up = &policy.Link{ID: "uplink/" + b, A: "building/" + b, B: "core",
				Capacity: DefaultUplinkCapacity, Available: DefaultUplinkCapacity, AvailableLow: DefaultUplinkCapacity / 2}
			uplinks[b] = up
		}
		if m.HasTelemetry {
			for _, bw := range m.Telemetry.Bandwidth {
				if bw.Building == b {
					access.Available, access.AvailableLow = bw.Available, bw.AvailableLow
				} else if bw.Available < up.Available {
					up.Available, up.AvailableLow = bw.Available, bw.AvailableLow
				}
			}
		}
		links = append(links, access)
	}
	for _, up := range uplinks {
		links = append(links, *up)
	}
	sort.Slice(links, func(i, j int) bool { return links[i].ID < links[j].ID })
	return links
}

// Flows reports transfer progress; none until transfer/ is plugged in.
func (t meshTelemetry) Flows() []raft.FlowProgress { return nil }
