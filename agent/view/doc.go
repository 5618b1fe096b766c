// Package view is a node's status view: the replicated state and gossip
// turned into what the node shows. Web is the status page's document
// (web.Status: members with their Raft roles, hazards, the bandwidth
// matrix, jobs, reclaims and their history, decisions, counters, this
// node's transfers), Members the table 'reclaimnet members' prints, Trace
// the cluster's history in the simulator's trace format (GET /v1/trace,
// 'reclaimnet trace export') with the bandwidth history it samples.
//
// Gossip is the leader's view of gossip (raft.Telemetry): the member list,
// live node figures, the campus graph and the flows' progress. The status
// page and the trace export read the same graph from it, so what the page
// shows is what the leader plans with.
package view
