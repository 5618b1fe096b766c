package agent

import (
	"context"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// watchProtocols warns when the leader decides with protocol settings
// other than this node's (the leader's apply to the whole cluster).
func (a *Agent) watchProtocols(ctx context.Context) {
	var warned state.DecisionRecord
	for {
		changed := a.coord.Changed()
		if p, leader, ok := a.coord.Store().RecordedProtocols(); ok {
			a.checkProtocols(p, leader, &warned)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// checkProtocols logs a warning, once per leader and setting, when the
// settings in force differ from this node's.
func (a *Agent) checkProtocols(p state.Protocols, leader policy.NodeID, warned *state.DecisionRecord) {
	if p == a.protocols {
		return
	}
	if warned.Protocols != nil && *warned.Protocols == p && warned.Leader == leader {
		return
	}
	a.logger.Warn("the leader decides with other protocol settings than this node: the leader's apply to the whole cluster; this node's apply only while it leads",
		"leader", leader, "in_force", p.String(), "this_node", a.protocols.String())
	*warned = state.DecisionRecord{Leader: leader, Protocols: &p}
}
