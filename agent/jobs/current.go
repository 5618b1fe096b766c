package jobs

import (
	"context"
	"time"

	"github.com/reclaimnet/reclaimnet/state"
)

// waitCurrent blocks until the local replicated state records this node's
// current membership (Config.Since), or ctx ends (false).
//
// Why: a restarted agent's coordinator replays the Raft state it kept on
// disk and then catches up with the leader entry by entry. Until then the
// state may still place on this node jobs that moved away (or recovered
// elsewhere) while it was down, and starting them would run a second
// instance, possibly from an old version or from scratch. The leader
// records a node's new membership (UpsertNode with Joined = the gossiped
// start) only after it saw this incarnation alive, and the log applies in
// order: once the local state holds that record, it holds everything the
// leader had committed before, including the departure and the recovery
// placements of this node's old jobs.
func (m *Manager) waitCurrent(ctx context.Context) bool {
	if m.cfg.Since.IsZero() {
		return true
	}
	since := m.cfg.Since.Truncate(time.Second) // gossip carries whole seconds
	logged := false
	for {
		ch := m.cfg.Coord.Changed()
		if membershipCurrent(m.cfg.Coord.State(), m, since) {
			if logged {
				m.log.Info("replicated state is current: acting on it")
			}
			return true
		}
		if !logged {
			m.log.Info("waiting for the replicated state to record this node's membership before starting jobs", "since", since)
			logged = true
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// membershipCurrent reports whether st records the membership of this
// node that began at since.
func membershipCurrent(st *state.State, m *Manager, since time.Time) bool {
	n, ok := st.Nodes[m.cfg.Node]
	return ok && n.State == state.NodeActive && !n.Joined.Before(since)
}
