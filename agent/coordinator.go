package agent

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
)

// listenRaft binds the Raft port before gossip starts, so the port in the
// node's metadata is the one actually bound (port 0 in tests).
func (a *Agent) listenRaft() (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(a.cfg.BindAddr, strconv.Itoa(a.cfg.RaftPort)))
	if err != nil {
		return nil, fmt.Errorf("raft listener: %w", err)
	}
	return ln, nil
}

// startCoordinator opens the Raft coordinator on ln. A node started
// without --join bootstraps a one-voter cluster if it has no Raft state
// yet; a node with --join never bootstraps (the leader adds it).
func (a *Agent) startCoordinator(ln net.Listener) error {
	rc := raft.DefaultConfig()
	if a.cfg.LocalTimings {
		rc = raft.DefaultLocalConfig()
	}
	if hb := time.Duration(a.cfg.RaftHeartbeat); hb > 0 {
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = hb, hb, hb/2
	}
	rc.NodeID = policy.NodeID(a.cfg.Name)
	rc.DataDir = a.cfg.DataDir
	rc.Listener = ln
	adv := a.cfg.AdvertiseAddr
	if adv == "" {
		ip, _ := a.mesh.LocalAddr()
		adv = ip.String()
	}
	rc.AdvertiseAddr = net.JoinHostPort(adv, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	rc.TLS = a.tls
	rc.Bootstrap = len(a.cfg.Join) == 0
	rc.Telemetry = a.telemetry
	rc.Logger = a.logger.With("subsystem", "raft")
	sw, err := a.cfg.Switches()
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	rc.Params.Switches = sw
	if a.cfg.FixedInterval > 0 {
		rc.Params.FixedInterval = time.Duration(a.cfg.FixedInterval)
	}
	if a.cfg.LentAhead > 0 {
		rc.Params.LentAhead = time.Duration(a.cfg.LentAhead) // when this node leads
	}
	if a.cfg.Bmin > 0 {
		rc.Params.Bmin = float64(a.cfg.Bmin) // P3's reservation floor when this node leads
	}
	if a.raftConfig != nil {
		a.raftConfig(&rc)
	}
	a.protocols = state.ProtocolsOf(rc.Params)
	a.logger.Info("protocols this node decides with when it leads", "protocols", a.protocols.String())
	c, err := raft.Open(rc)
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	a.coord = c
	return nil
}

// leaveLeadership transfers leadership away if this node leads and
// another voter can take it.
func leaveLeadership(c *raft.Coordinator) error {
	if !c.IsLeader() {
		return nil
	}
	servers, err := c.Servers()
	if err != nil {
		return err
	}
	voters := 0
	for _, s := range servers {
		if s.Role == state.RoleVoter {
			voters++
		}
	}
	if voters < 2 {
		return nil // nobody to hand over to
	}
	return c.TransferLeadership()
}

// publishedHazard is the published hazard estimate of node (1/s), 0 if
// none.
func publishedHazard(c *raft.Coordinator, node string) float64 {
	hz, _ := c.Store().Hazards()
	h, ok := hz[policy.NodeID(node)]
	if !ok {
		return 0
	}
	// The point estimate λ̂e is what people read; decisions use the upper
	// bound from the replicated state, not this gossiped figure.
	return h.Emergency.At(time.Now())
}

// Coordinator is the node's Raft coordinator (nil before Run starts it).
func (a *Agent) Coordinator() *raft.Coordinator { return a.coord }
