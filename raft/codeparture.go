package raft

import (
	"cmp"
	"slices"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// CoDepartureLog is a co-departure estimator (docs/design.md P2.7) fed from the
// replicated departure log and the nodes' membership stretches (their
// returns), so a new leader starts where the old one stood and every
// node's status page shows the leader's figures. Not safe for concurrent
// use.
type CoDepartureLog struct {
	est *policy.CoDepartureEstimator
	// seen is the log the estimator was built from (departures, stretches
	// and nodes counted): it is rebuilt when that changes.
	seen [3]int
}

// Estimate returns the co-departure table at now, rebuilding the
// estimator from st when the departure log, a node's memberships or the
// registry changed.
func (l *CoDepartureLog) Estimate(st *state.State, now time.Time) *policy.CoDeparture {
	stretches := 0
	for _, n := range st.Nodes {
		stretches += len(n.Stretches)
	}
	seen := [3]int{len(st.Departures), stretches, len(st.Nodes)}
	if l.est == nil || seen != l.seen {
		est, err := policy.NewCoDepartureEstimator(policy.DefaultCoDepartureConfig())
		if err != nil {
			panic(err) // the default configuration is valid
		}
		replayDepartures(est, st)
		l.est, l.seen = est, seen
	}
	return l.est.Estimate(now)
}

// replayDepartures declares every registered node with its domains and
// feeds the estimator the departure log and the returns (the start of
// every membership after a node's first), in time order; a return and a
// departure at the same time count the return first.
func replayDepartures(est *policy.CoDepartureEstimator, st *state.State) {
	type event struct {
		at     time.Time
		node   policy.NodeID
		depart bool
	}
	var evs []event
	for _, id := range sortedIDs(st.Nodes) {
		n := st.Nodes[id]
		est.Node(id, n.Building, n.Lab, n.Pool)
		for k, s := range n.Stretches {
			if k > 0 {
				evs = append(evs, event{at: s.From, node: id})
			}
		}
	}
	for _, d := range st.Departures {
		evs = append(evs, event{at: d.At, node: d.Node, depart: true})
	}
	slices.SortStableFunc(evs, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		if a.depart != b.depart {
			if a.depart {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.node, b.node)
	})
	for _, e := range evs {
		if e.depart {
			est.Observe(policy.Departure{Node: e.node, At: e.at})
		} else {
			est.Return(e.node, e.at)
		}
	}
}
