package raft

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/state"

	hraft "github.com/hashicorp/raft"

	"github.com/reclaimnet/reclaimnet/policy"
)

// voterCandidate is what the voter choice looks at.
type voterCandidate struct {
	ID       policy.NodeID
	Building string
	Hazard   float64       // departure hazard now, 1/s
	Uptime   time.Duration // now − Since
	Voter    bool          // a voter now
	Leader   bool          // the leader choosing (kept: no needless transfer)
}

// wantVoters returns how many voters a cluster with eligible members should
// have: 1 below 3 (two voters double the ways to lose quorum and tolerate
// nothing more), normal (3) below large (20) members, largeVoters (5) from
// there on.
func wantVoters(eligible, normal, large, largeSize int) int {
	switch {
	case eligible < 3:
		return min(eligible, 1)
	case eligible >= largeSize:
		return min(large, eligible)
	}
	return min(normal, eligible)
}

// chooseVoters picks n voters among cands for stability, spread over
// buildings. Ranking: current voters first (no churn while they stay
// eligible, the leader before them), then low hazard, long uptime, ID. A first pass takes the best
// of each building (buildings ordered by their best member) so a building
// outage costs at most ⌈n/buildings⌉ votes; a second pass fills by rank.
func chooseVoters(cands []voterCandidate, n int) []policy.NodeID {
	ranked := slices.Clone(cands)
	slices.SortFunc(ranked, func(a, b voterCandidate) int {
		if a.Leader != b.Leader {
			if a.Leader {
				return -1
			}
			return 1
		}
		if a.Voter != b.Voter {
			if a.Voter {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.Hazard, b.Hazard), cmp.Compare(b.Uptime, a.Uptime), strings.Compare(string(a.ID), string(b.ID)))
	})
	chosen := map[policy.NodeID]bool{}
	seen := map[string]bool{}
	var out []policy.NodeID
	for _, c := range ranked {
		if len(out) == n {
			break
		}
		if !seen[c.Building] {
			seen[c.Building] = true
			chosen[c.ID] = true
			out = append(out, c.ID)
		}
	}
	for _, c := range ranked {
		if len(out) == n {
			break
		}
		if !chosen[c.ID] {
			chosen[c.ID] = true
			out = append(out, c.ID)
		}
	}
	slices.Sort(out)
	return out
}

// Reconcile brings the Raft configuration and the node registry in line
// with the gossip member list; only the leader acts (elsewhere it returns
// nil). In order: record departures of members that failed or left; add
// new members as non-voters; choose the voters (see chooseVoters) among
// alive members without a pending reclaim and promote the missing ones
// before demoting any (quorum never shrinks first); if this leader itself
// is to be demoted, transfer leadership instead and let the next leader
// finish; remove members that left, and failed ones after
// DeadServerTimeout.
func (c *Coordinator) Reconcile(members []Member, now time.Time) error {
	c.mu.Lock()
	c.members = slices.Clone(members)
	c.mu.Unlock()
	if !c.leading.Load() {
		return nil
	}
	return c.reconcile(members, now)
}

// peerHealth is what the leader saw of its heartbeats to one server.
type peerHealth struct {
	firstSeen    time.Time // first reconcile that found it in the configuration
	failingSince time.Time // zero while heartbeats succeed
	lastFailure  time.Time
	// addedAt is when the server was last (re-)added at a new address;
	// failures reported with a last contact before it come from the
	// replication to its old address.
	addedAt time.Time
}

// watchHeartbeats records Raft's heartbeat failures and recoveries.
func (c *Coordinator) watchHeartbeats(obs <-chan hraft.Observation) {
	for {
		select {
		case <-c.stop:
			return
		case o := <-obs:
			now := c.cfg.Clock()
			c.mu.Lock()
			switch d := o.Data.(type) {
			case hraft.FailedHeartbeatObservation:
				h := c.healthLocked(policy.NodeID(d.PeerID), now)
				if !h.addedAt.IsZero() && !d.LastContact.IsZero() && d.LastContact.Before(h.addedAt) {
					break // the old address's replication, winding down
				}
				if h.failingSince.IsZero() {
					h.failingSince = now
				}
				h.lastFailure = now
			case hraft.ResumedHeartbeatObservation:
				c.healthLocked(policy.NodeID(d.PeerID), now).failingSince = time.Time{}
			}
			c.mu.Unlock()
		}
	}
}

// unverifiedPeers are the servers whose heartbeats from this leader fail:
// over mutual TLS, a peer whose certificate the leader cannot verify (or
// that it cannot reach) is no place for work, whatever gossip says.
func (c *Coordinator) unverifiedPeers() map[policy.NodeID]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out map[policy.NodeID]string
	for id, h := range c.health {
		if id == c.cfg.NodeID || h.failingSince.IsZero() {
			continue
		}
		if out == nil {
			out = map[policy.NodeID]string{}
		}
		out[id] = "the leader cannot verify it over mutual TLS (heartbeats failing since " + h.failingSince.UTC().Format(time.TimeOnly) + ")"
	}
	return out
}

func (c *Coordinator) healthLocked(id policy.NodeID, now time.Time) *peerHealth {
	h := c.health[id]
	if h == nil {
		h = &peerHealth{firstSeen: now}
		c.health[id] = h
	}
	return h
}

// votable reports whether a server may hold (voter) or get (non-voter) a
// vote: a voter keeps it unless heartbeats to it have failed for the
// stabilization time; a non-voter gets it only after being in the
// configuration that long with no heartbeat failure in that time.
func (c *Coordinator) votable(id policy.NodeID, voter bool, now time.Time) bool {
	if id == c.cfg.NodeID {
		return true
	}
	stab := c.cfg.ServerStabilization
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.healthLocked(id, now)
	if voter {
		return h.failingSince.IsZero() || now.Sub(h.failingSince) < stab
	}
	return h.failingSince.IsZero() && now.Sub(h.firstSeen) >= stab && (h.lastFailure.IsZero() || now.Sub(h.lastFailure) >= stab)
}

func (c *Coordinator) reconcile(members []Member, now time.Time) error {
	c.reconcileMu.Lock()
	defer c.reconcileMu.Unlock()
	timeout := c.cfg.ApplyTimeout
	self := c.cfg.NodeID
	cf := c.raft.GetConfiguration()
	if err := c.await(cf); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	servers := map[policy.NodeID]hraft.Server{}
	for _, s := range cf.Configuration().Servers {
		servers[policy.NodeID(s.ID)] = s
	}
	st := c.store.State()
	byID := map[policy.NodeID]Member{}
	for _, m := range members {
		if m.ID != "" {
			byID[m.ID] = m
		}
	}
	var errs []error
	submit := func(cmd state.Command) {
		if _, err := c.applyCommand(cmd); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", cmd.Kind(), err))
		}
	}

	// 1. Departures: a registered active node whose member failed or left.
	for _, m := range members {
		rec, ok := st.Nodes[m.ID]
		if !ok || rec.State != state.NodeActive || (m.Status != MemberFailed && m.Status != MemberLeft) || m.ID == self {
			continue
		}
		kind := state.DepartureEmergency
		if r, ok := st.Reclaims[m.ID]; ok && !r.Emergency() {
			kind = state.DepartureScheduled
		}
		at := now
		if r, ok := st.Reclaims[m.ID]; ok && kind == state.DepartureScheduled && r.Deadline.Before(now) {
			at = r.Deadline
		}
		if at.Before(rec.Joined) {
			at = rec.Joined
		}
		submit(state.RecordDeparture{Departure: state.Departure{Node: m.ID, At: at, Kind: kind, Graceful: m.Status == MemberLeft}})
	}

	// 2. Failure bookkeeping for the dead-server timeout.
	c.mu.Lock()
	for id := range c.failedSince {
		if m, ok := byID[id]; ok && (m.Status == MemberAlive || m.Status == MemberSuspect) {
			delete(c.failedSince, id)
		}
	}
	for id := range servers {
		m, ok := byID[id]
		if id != self && (!ok || m.Status == MemberFailed) {
			if _, seen := c.failedSince[id]; !seen {
				c.failedSince[id] = now
			}
		}
	}
	failedSince := maps.Clone(c.failedSince)
	c.mu.Unlock()

	// 3. Admission: only members whose certificate the leader verified
	// over mutual TLS enter the Raft configuration (and, through the
	// registry, the policy); a refused non-voter leaves it.
	if !slices.Equal(c.denySeen, st.Enrollment.Deny) {
		if d := c.cfg.TLS.Deny; d != nil {
			d.Replace(st.Enrollment.Deny)
		}
		c.denySeen = slices.Clone(st.Enrollment.Deny)
		c.forgetAdmissions() // a removal takes back an admission at once
	}
	inConfig := map[policy.NodeID]bool{}
	for _, m := range members {
		if s, ok := servers[m.ID]; ok && string(s.Address) == m.RaftAddr {
			inConfig[m.ID] = true
		}
	}
	admitted, refused := c.admitMembers(members, st, inConfig, now)
	for id := range refused {
		if s, ok := servers[id]; ok && s.Suffrage != hraft.Voter {
			if err := c.await(c.raft.RemoveServer(s.ID, 0, timeout)); err != nil {
				errs = append(errs, fmt.Errorf("remove refused %s: %w", id, err))
				continue
			}
			delete(servers, id)
		}
	}

	// New members join as non-voters; a changed address is re-added.
	for _, m := range members {
		if _, ok := admitted[m.ID]; m.ID == self || m.RaftAddr == "" || !ok {
			continue
		}
		s, ok := servers[m.ID]
		if ok && string(s.Address) == m.RaftAddr {
			continue
		}
		if ok {
			if err := c.await(c.raft.RemoveServer(s.ID, 0, timeout)); err != nil {
				errs = append(errs, fmt.Errorf("remove %s at its old address: %w", m.ID, err))
				continue
			}
		}
		if err := c.await(c.raft.AddNonvoter(hraft.ServerID(m.ID), hraft.ServerAddress(m.RaftAddr), 0, timeout)); err != nil {
			errs = append(errs, fmt.Errorf("add non-voter %s: %w", m.ID, err))
			continue
		}
		servers[m.ID] = hraft.Server{ID: hraft.ServerID(m.ID), Address: hraft.ServerAddress(m.RaftAddr), Suffrage: hraft.Nonvoter}
		// Heartbeat failures to its old address say nothing about this
		// one (Raft reports no recovery to a server it replicates to
		// afresh), so its stabilization starts now.
		c.mu.Lock()
		c.health[m.ID] = &peerHealth{firstSeen: now, addedAt: now}
		c.mu.Unlock()
	}

	// 4. Voters.
	var cands []voterCandidate
	for id, s := range servers {
		m, ok := byID[id]
		if id == self && !ok {
			m, ok = Member{ID: self, Status: MemberAlive}, true
		}
		if !ok || (m.Status != MemberAlive && m.Status != MemberSuspect) {
			continue
		}
		if _, reclaiming := st.Reclaims[id]; reclaiming {
			continue
		}
		if _, ok := admitted[id]; !ok && id != self {
			continue
		}
		if !c.votable(id, s.Suffrage == hraft.Voter, now) {
			continue
		}
		hazard := m.Hazard
		if h, ok := st.Hazards[id]; ok && len(h.Departure.Rates) > 0 {
			hazard = h.Departure.At(now)
		}
		building := m.Building
		if building == "" {
			building = st.Nodes[id].Building
		}
		cands = append(cands, voterCandidate{ID: id, Building: building, Hazard: hazard, Uptime: upTime(m.Since, now), Voter: s.Suffrage == hraft.Voter, Leader: id == self})
	}
	n := wantVoters(len(cands), c.cfg.Voters, c.cfg.LargeVoters, c.cfg.LargeClusterSize)
	want := map[policy.NodeID]bool{}
	for _, id := range chooseVoters(cands, n) {
		want[id] = true
	}
	promoted := true
	for _, id := range sortedIDs(want) {
		s := servers[id]
		if s.Suffrage == hraft.Voter {
			continue
		}
		if err := c.await(c.raft.AddVoter(s.ID, s.Address, 0, timeout)); err != nil {
			errs = append(errs, fmt.Errorf("promote %s: %w", id, err))
			promoted = false
			continue
		}
		s.Suffrage = hraft.Voter
		servers[id] = s
		c.logger.Info("promoted to voter", "server", id)
	}
	if promoted && len(want) > 0 {
		// A voter that is failing or about to leave goes first, and a
		// healthy one only while the voters left could still elect a
		// leader without the unhealthy ones: demoting a healthy voter next
		// to a dead one leaves a configuration only the dead one can
		// complete (quorum lost for good).
		healthy := func(id policy.NodeID) bool {
			if id == self {
				return true
			}
			m, ok := byID[id]
			_, reclaiming := st.Reclaims[id]
			return ok && m.Status == MemberAlive && !reclaiming && c.heartbeatsOK(id)
		}
		for _, id := range demotionOrder(servers, want, self, healthy) {
			s := servers[id]
			if id != self && !quorumAfterDemotion(servers, id, healthy) {
				c.logger.Warn("not demoting voter yet: the voters left would need an unhealthy one for quorum", "server", id)
				continue
			}
			if id == self {
				// Hand over first; the next leader demotes this node.
				target := sortedIDs(want)[0]
				if err := c.await(c.raft.LeadershipTransferToServer(hraft.ServerID(target), servers[target].Address)); err != nil {
					errs = append(errs, fmt.Errorf("transfer leadership to %s: %w", target, err))
				}
				return errors.Join(errs...)
			}
			if err := c.await(c.raft.DemoteVoter(s.ID, 0, timeout)); err != nil {
				errs = append(errs, fmt.Errorf("demote %s: %w", id, err))
				continue
			}
			s.Suffrage = hraft.Nonvoter
			servers[id] = s
			c.logger.Info("demoted to non-voter", "server", id)
		}
	}

	// 5. Removal: left members at once, failed ones after the timeout; a
	// voter is never removed here (one whose demotion the quorum check
	// held back stays until a later pass demotes it).
	for _, id := range sortedIDs(servers) {
		s := servers[id]
		if id == self || s.Suffrage == hraft.Voter && want[id] {
			continue
		}
		m, ok := byID[id]
		gone := ok && m.Status == MemberLeft
		if since, failed := failedSince[id]; failed && now.Sub(since) >= c.cfg.DeadServerTimeout {
			gone = true
		}
		if !gone || s.Suffrage == hraft.Voter {
			continue
		}
		if err := c.await(c.raft.RemoveServer(s.ID, 0, timeout)); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", id, err))
			continue
		}
		delete(servers, id)
		c.mu.Lock()
		delete(c.failedSince, id)
		delete(c.health, id)
		c.mu.Unlock()
		c.logger.Info("removed from raft configuration", "server", id)
	}

	// 6. Registry: what gossip says, with the role Raft has now.
	st = c.store.State()
	for _, m := range members {
		if m.Status != MemberAlive && m.Status != MemberSuspect {
			continue
		}
		role := state.RoleNone
		if s, ok := servers[m.ID]; ok {
			role = state.RoleNonvoter
			if s.Suffrage == hraft.Voter {
				role = state.RoleVoter
			}
		}
		old, known := st.Nodes[m.ID]
		rec := state.NodeRecord{
			ID: m.ID, Building: m.Building, RaftAddr: m.RaftAddr, GossipAddr: m.GossipAddr, TransferAddr: m.TransferAddr,
			GPU: m.GPU, GPUs: m.GPUs, Storage: m.Storage, Lab: m.Lab, Pool: m.Pool, Role: role, State: state.NodeActive, Joined: m.Since.UTC().Round(0),
			Paths: slices.Clone(m.Paths), Lending: m.Lending,
		}
		_, rec.Admitted = admitted[m.ID]
		rec.Refused = refused[m.ID]
		if _, denied := st.Denied(m.ID); denied && !rec.Admitted && known && old.State == state.NodeLeft {
			continue // a removed node stays gone, however long it gossips
		}
		switch {
		case known && old.State == state.NodeLeft && !rec.Joined.After(old.Left):
			// Back after a logged departure, but gossip's join time is
			// older than the departure: the membership starts now.
			rec.Joined = now.UTC().Round(0)
		case known && old.State == state.NodeActive && rec.Joined.Before(old.Joined):
			rec.Joined = old.Joined // a membership's start only moves forward
		}
		if known && sameNode(old, rec) {
			continue
		}
		submit(state.UpsertNode{Node: rec})
	}
	// Registry roles of departed servers.
	for id, rec := range st.Nodes {
		if _, inCfg := servers[id]; !inCfg && rec.Role != state.RoleNone {
			if _, alive := byID[id]; alive && (byID[id].Status == MemberAlive || byID[id].Status == MemberSuspect) {
				continue
			}
			rec.Role = state.RoleNone
			rec.Stretches = nil
			submit(state.UpsertNode{Node: rec})
		}
	}
	return errors.Join(errs...)
}

// demotionOrder lists the voters not in want: unhealthy ones first, then
// this leader (which hands over rather than demoting itself), then healthy
// ones, each group by ID.
func demotionOrder(servers map[policy.NodeID]hraft.Server, want map[policy.NodeID]bool, self policy.NodeID, healthy func(policy.NodeID) bool) []policy.NodeID {
	var sick, well []policy.NodeID
	leaderToo := false
	for _, id := range sortedIDs(servers) {
		switch {
		case servers[id].Suffrage != hraft.Voter || want[id]:
		case id == self:
			leaderToo = true
		case healthy(id):
			well = append(well, id)
		default:
			sick = append(sick, id)
		}
	}
	if leaderToo {
		sick = append(sick, self)
	}
	return append(sick, well...)
}

// quorumAfterDemotion reports whether the voters left after demoting id
// hold a majority of healthy ones.
func quorumAfterDemotion(servers map[policy.NodeID]hraft.Server, id policy.NodeID, healthy func(policy.NodeID) bool) bool {
	voters, well := 0, 0
	for other, s := range servers {
		if s.Suffrage != hraft.Voter || other == id {
			continue
		}
		voters++
		if healthy(other) {
			well++
		}
	}
	return voters > 0 && well >= voters/2+1
}

// heartbeatsOK reports whether this leader's heartbeats to id are
// succeeding.
func (c *Coordinator) heartbeatsOK(id policy.NodeID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.health[id]
	return h == nil || h.failingSince.IsZero()
}

// forgetHeartbeats drops what an earlier term's heartbeats said: a voter
// that failed then (a partition since healed) must not lose its vote to a
// stale record when this node leads again.
func (c *Coordinator) forgetHeartbeats() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.health)
}

func sameNode(a, b state.NodeRecord) bool {
	return a.ID == b.ID && a.Building == b.Building && a.RaftAddr == b.RaftAddr && a.GossipAddr == b.GossipAddr &&
		a.TransferAddr == b.TransferAddr && a.GPU == b.GPU && a.GPUs == b.GPUs && a.Storage == b.Storage && a.Lab == b.Lab && a.Pool == b.Pool && a.Role == b.Role &&
		a.State == b.State && a.Joined.Equal(b.Joined) && slices.Equal(a.Paths, b.Paths) && a.Lending == b.Lending &&
		a.Admitted == b.Admitted && a.Refused == b.Refused
}

func upTime(since, now time.Time) time.Duration {
	if since.IsZero() || since.After(now) {
		return 0
	}
	return now.Sub(since)
}

func sortedIDs[V any](m map[policy.NodeID]V) []policy.NodeID {
	out := make([]policy.NodeID, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// await waits for a Raft future unless the coordinator shuts down first.
// hashicorp/raft can leave a future (a leadership transfer in flight, say)
// unanswered once it has shut down, and Shutdown waits for the goroutine
// that reconciles, so an unbounded wait here would hang Shutdown.
func (c *Coordinator) await(f hraft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-c.stop:
		return ErrClosed
	}
}
