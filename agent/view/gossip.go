package view

import (
	"math"
	"net"
	"sort"
	"strconv"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/owner"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
)

// Link capacities assumed until a node measures its own (docs/design.md §0: 1 Gbit/s
// access links, building uplinks up to 10 Gbit/s), bytes/s.
const (
	DefaultAccessCapacity = 125e6
	DefaultUplinkCapacity = 1.25e9
)

// Gossip implements raft.Telemetry from gossip, so the leader builds its
// policy.Snapshot from what every node reports; the status page and the
// trace export read the same campus graph from it.
type Gossip struct {
	Mesh *mesh.Mesh
	// Outgoing is this node's outgoing flow progress (nil: none).
	Outgoing func() []state.FlowProgress
	// Uplink is the declared capacity of a building's uplink, bytes/s
	// (nil: none declared).
	Uplink func(building string) (float64, bool)
}

var _ raft.Telemetry = Gossip{}

func (t Gossip) Members() []raft.Member {
	members := t.Mesh.Members()
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
			GPUs:    int(m.Meta.GPUs),
			Since:   m.Meta.Started,
			Storage: m.Meta.Storage,
			Lab:     m.Meta.Lab,
			Pool:    m.Meta.Pool,
			Paths:   m.Meta.Paths,
			Lending: m.Meta.Lending,
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

// notLent is the lending end of a node whose owner policy does not lend it
// now: long past.
var notLent = time.Unix(1, 0)

// Outlook is the owner outlook a member's metadata carries; false when it
// carries none or one that does not decode (a peer's bytes: never
// trusted further).
func Outlook(meta mesh.Meta) (owner.Outlook, bool) {
	if len(meta.Outlook) == 0 {
		return owner.Outlook{}, false
	}
	o, err := owner.DecodeOutlook(meta.Outlook)
	return o, err == nil
}

func (t Gossip) Nodes() []raft.NodeTelemetry {
	var out []raft.NodeTelemetry
	for _, m := range t.Mesh.Members() {
		if m.State != mesh.StateAlive {
			continue
		}
		n := raft.NodeTelemetry{ID: policy.NodeID(m.Name), FreeGPUs: int(m.Meta.GPUs), AccessLink: accessLinkID(m.Name)}
		if m.HasTelemetry {
			n.FreeGPUs, n.Load = int(m.Telemetry.FreeGPUs), m.Telemetry.Load
			n.KillSwitch, n.Draining = m.Telemetry.KillSwitch.String(), m.Telemetry.Leaving
			if d := m.Telemetry.DataDir; d != mesh.DataDirUnknown {
				n.DiskKnown, n.DataWritable = true, d == mesh.DataDirWritable
				n.FreeDisk = int64(min(m.Telemetry.DataFree, math.MaxInt64))
			}
		}
		if o, ok := Outlook(m.Meta); ok {
			n.LentUntil = o.Until
			if !o.Lent() {
				n.LentUntil = notLent
			}
		}
		out = append(out, n)
	}
	return out
}

// Links builds the campus graph of docs/design.md P2.1 from gossip: each node hangs
// off its building switch by an access link, each building switch off the
// core by an uplink.
//
// What a node reports per destination building describes its access link:
// the enforcement subsystem feeds every building's estimator the node's
// whole non-migration egress against the node's link capacity (all of it
// crosses that link), and the estimates differ only where transfers to a
// building fell short of their assigned rate. So the access link takes the
// smallest of the node's reports (conservative: a shortfall somewhere
// beyond the access link is charged to it, since the graph has no link per
// building pair), its capacity is raised to that figure when the node's
// link is faster than the default, and no report sets an uplink: nobody
// measures uplinks: an uplink has the capacity the operator declared
// (--uplink-capacity, this leader's setting), else the default. Links
// nobody measured are taken as free up to their capacity, with half of it
// as the lower bound; P3 then reserves max(β3·capacity, Bmin) of each, so
// a declared uplink is what lets P3 protect research traffic where the
// campus's bottleneck is.
func (t Gossip) Links() []policy.Link { return linksOf(t.Mesh.Members(), t.Uplink) }

// linksOf builds the graph Links describes from the member list.
func linksOf(members []mesh.Member, declared func(string) (float64, bool)) []policy.Link {
	var links []policy.Link
	uplinks := map[string]*policy.Link{}
	for _, m := range members {
		if m.State != mesh.StateAlive {
			continue
		}
		b := m.Meta.Building
		access := policy.Link{ID: accessLinkID(m.Name), A: m.Name, B: "building/" + b,
			Capacity: DefaultAccessCapacity, Available: DefaultAccessCapacity, AvailableLow: DefaultAccessCapacity / 2}
		if _, ok := uplinks[b]; !ok {
			c, ok := 0.0, false
			if declared != nil {
				c, ok = declared(b)
			}
			if !ok {
				c = DefaultUplinkCapacity
			}
			uplinks[b] = &policy.Link{ID: "uplink/" + b, A: "building/" + b, B: "core",
				Capacity: c, Available: c, AvailableLow: c / 2}
		}
		if m.HasTelemetry && len(m.Telemetry.Bandwidth) > 0 {
			avail, low := math.Inf(1), math.Inf(1)
			for _, bw := range m.Telemetry.Bandwidth {
				avail, low = min(avail, bw.Available), min(low, bw.AvailableLow)
			}
			access.Available, access.AvailableLow = avail, min(low, avail)
			access.Capacity = max(access.Capacity, avail)
		}
		links = append(links, access)
	}
	for _, up := range uplinks {
		links = append(links, *up)
	}
	sort.Slice(links, func(i, j int) bool { return links[i].ID < links[j].ID })
	return links
}

// Flows reports the progress of the admitted flows every live node sends:
// this node's from its job manager (current), the others' from their
// latest gossip report (at most a telemetry interval old, and only what
// fitted in it: a flow missing there counts as not started).
func (t Gossip) Flows() []state.FlowProgress {
	var out []state.FlowProgress
	if t.Outgoing != nil {
		out = t.Outgoing()
	}
	self := t.Mesh.Name()
	for _, m := range t.Mesh.Members() {
		if m.Name == self || !m.HasTelemetry || (m.State != mesh.StateAlive && m.State != mesh.StateSuspect) {
			continue // a node that left or failed sends nothing any more
		}
		for _, f := range m.Telemetry.Flows {
			out = append(out, state.FlowProgress{ID: f.ID, Remaining: int64(min(f.Remaining, math.MaxInt64)), Done: f.Done})
		}
	}
	return out
}
