package localapi

import "time"

// Status is this node's own addresses, Raft view and gossip member table,
// served over the control socket ('reclaimnet members' and the header of
// 'reclaimnet status'). The cluster document (GET /v1/status) is a
// web.Status, carried as Response.Document.
type Status struct {
	Node         string       `json:"node"`
	Building     string       `json:"building"`
	Version      string       `json:"version"`
	Started      time.Time    `json:"started"`
	GossipAddr   string       `json:"gossip_addr"`
	RaftAddr     string       `json:"raft_addr"`
	TransferAddr string       `json:"transfer_addr"`
	HTTPAddr     string       `json:"http_addr,omitempty"`
	Encrypted    bool         `json:"gossip_encrypted"`
	Raft         RaftStatus   `json:"raft"`
	Members      []MemberView `json:"members"`
	Gossip       GossipStats  `json:"gossip_stats"`
}

// RaftStatus is the coordinator as this node sees it.
type RaftStatus struct {
	// Running is false while no coordinator is wired in.
	Running bool   `json:"running"`
	Leader  string `json:"leader"`
	// Role of this node: leader, voter, non-voter or none.
	Role   string   `json:"role"`
	Voters []string `json:"voters"`
}

// MemberView is one row of 'reclaimnet members'.
type MemberView struct {
	Name     string `json:"name"`
	Building string `json:"building"`
	State    string `json:"state"`
	// Role is leader, voter, non-voter or "-" (not in the Raft config).
	Role     string  `json:"role"`
	Addr     string  `json:"addr"`
	GPUs     int     `json:"gpus"`
	FreeGPUs int     `json:"free_gpus"`
	GPUModel string  `json:"gpu_model,omitempty"`
	Load     float64 `json:"load"`
	// Hazard is the node's emergency hazard λ̂⁺ now, 1/s: the leader's
	// published estimate, the figure of /v1/members' hazard_per_s.
	Hazard     float64             `json:"hazard_per_s"`
	Bandwidth  []BuildingBandwidth `json:"bandwidth,omitempty"`
	ReportedAt time.Time           `json:"reported_at,omitzero"`
	// KillSwitch is off, soft, hard, disabled (no kernel enforcement on
	// the node) or unknown (not reported).
	KillSwitch string `json:"kill_switch"`
	// Eligible says whether the node may take jobs, standbys and copies;
	// IneligibleReason why not (the fields of /v1/members').
	Eligible         bool   `json:"eligible"`
	IneligibleReason string `json:"ineligible_reason,omitempty"`
	// Lending is what the node's owner policy publishes; nil when it
	// publishes nothing.
	Lending *Lending `json:"lending,omitempty"`
}

// Lending is a node's lending as its owner policy publishes it in gossip.
type Lending struct {
	// Windows are the owner's lending windows ("Mon-Fri 19:00-08:00;
	// Sat,Sun (Europe/Berlin)", or "always (...)").
	Windows string `json:"windows"`
	// State is lent, reclaiming, owner active, reclaimed, outside window,
	// rate limited or not lent.
	State string `json:"state,omitempty"`
	// Until is the next planned reclaim's deadline while lent (zero: none
	// known); From the earliest time lending may resume while not lent
	// (zero: only the owner's lend).
	Until time.Time `json:"until,omitzero"`
	From  time.Time `json:"from,omitzero"`
}

// GossipStats are the node's gossip counters (the mesh's).
type GossipStats struct {
	Members         int    // alive members, self included
	EventsDropped   uint64 // events lost because the agent lagged
	ReportsAccepted uint64 // telemetry reports from peers that replaced older ones
	ReportsStale    uint64 // reports ignored because a newer one was held
	ReportsBad      uint64 // malformed messages and state from peers
}

// BuildingBandwidth is a member's reported available bandwidth towards
// one building, bytes/s.
type BuildingBandwidth struct {
	Building     string
	Available    float64
	AvailableLow float64
}
