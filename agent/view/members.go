package view

import (
	"net"
	"strconv"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/web"
)

// Members is the node's own addresses, its Raft view and the gossip
// member table ('reclaimnet members').
func (v *View) Members() localapi.Status {
	st := localapi.Status{
		Node:         v.cfg.Node,
		Building:     v.cfg.Building,
		Version:      v.cfg.Version,
		Started:      v.cfg.Started,
		GossipAddr:   v.cfg.GossipAddr,
		RaftAddr:     v.cfg.RaftAddr,
		TransferAddr: v.cfg.TransferAddr,
		HTTPAddr:     v.cfg.HTTPAddr,
		Encrypted:    v.cfg.Encrypted,
		Gossip:       localapi.GossipStats(v.cfg.Mesh.Stats()),
		Raft:         raftStatus(v.cfg.Coord, v.cfg.Node),
	}
	roles := raftRoles(v.cfg.Coord)
	// Free GPUs, the hazard and eligibility are the status page's figures
	// (one truth per figure); the rest is this node's gossip table.
	c := v.cfg.Coord
	cs := c.State()
	servers, _ := c.Servers()
	page := map[string]web.Member{}
	for _, wm := range v.webMembers(time.Now(), cs, servers, c.Status().RaftState) {
		page[string(wm.ID)] = wm
	}
	for _, m := range v.cfg.Mesh.Members() {
		rec, known := cs.Nodes[policy.NodeID(m.Name)]
		if _, denied := cs.Denied(policy.NodeID(m.Name)); denied && known && rec.State == state.NodeLeft {
			continue // removed: it may still gossip, but it is no member
		}
		role := roles[m.Name]
		if role == "" {
			role = "-"
		}
		mv := localapi.MemberView{
			Name:       m.Name,
			Building:   m.Meta.Building,
			State:      string(m.State),
			Role:       role,
			Addr:       net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port))),
			GPUs:       int(m.Meta.GPUs),
			GPUModel:   m.Meta.GPUModel,
			KillSwitch: m.Telemetry.KillSwitch.String(), // unknown without a report
		}
		if known && !rec.Admitted && rec.Refused != "" {
			mv.State, mv.Refused = "refused", rec.Refused
		}
		mv.Lending = LendingOf(m.Meta)
		if m.HasTelemetry {
			mv.FreeGPUs = int(m.Telemetry.FreeGPUs)
			mv.Load = m.Telemetry.Load
			mv.Hazard = m.Telemetry.Hazard
			for _, bw := range m.Telemetry.Bandwidth {
				mv.Bandwidth = append(mv.Bandwidth, localapi.BuildingBandwidth(bw))
			}
			mv.ReportedAt = m.Telemetry.Sent
		}
		if wm, ok := page[m.Name]; ok {
			mv.FreeGPUs, mv.Hazard = wm.FreeGPUs, wm.Hazard
			mv.Eligible, mv.IneligibleReason = wm.Eligible, wm.IneligibleReason
			// The page's lending: a departed node's from the history, not
			// its last gossip.
			mv.Lending = (*localapi.Lending)(wm.Lending)
		}
		st.Members = append(st.Members, mv)
	}
	return st
}

// raftStatus is the coordinator as node sees it.
func raftStatus(c *raft.Coordinator, node string) localapi.RaftStatus {
	st := localapi.RaftStatus{Running: true, Role: "none"}
	id, _ := c.Leader()
	st.Leader = string(id)
	servers, err := c.Servers()
	if err != nil {
		return st
	}
	for _, s := range servers {
		if s.Role == state.RoleVoter {
			st.Voters = append(st.Voters, string(s.ID))
		}
		if string(s.ID) == node {
			st.Role = roleName(s)
		}
	}
	return st
}

// raftRoles maps each server of the configuration to leader, voter or
// non-voter.
func raftRoles(c *raft.Coordinator) map[string]string {
	out := map[string]string{}
	servers, err := c.Servers()
	if err != nil {
		return out
	}
	for _, s := range servers {
		out[string(s.ID)] = roleName(s)
	}
	if id, _ := c.Leader(); id != "" {
		out[string(id)] = "leader"
	}
	return out
}

func roleName(s raft.Server) string {
	if s.Leader {
		return "leader"
	}
	return s.Role.String()
}

// LendingOf is the lending a member's metadata publishes (nil: none).
func LendingOf(meta mesh.Meta) *localapi.Lending {
	o, ok := Outlook(meta)
	if meta.Lending == "" && !ok {
		return nil
	}
	l := &localapi.Lending{Windows: meta.Lending}
	if ok {
		l.State, l.Until, l.From = string(o.State), o.Until, o.From
	}
	return l
}
