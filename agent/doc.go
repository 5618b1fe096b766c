// Package agent wires one ReclaimNet node together and owns every
// goroutine it starts: gossip (mesh), the coordinator (raft, over the
// replicated state of package state), the local control socket the CLI
// talks to (the protocol is package localapi), and the HTTP server with
// the status page, the /v1 JSON API and /metrics (package web, fed by the
// node's status view, agent/view). The parts it wires: the job system
// (checkpoint store, transfers, agent/jobs' manager, agent/supervisor),
// kernel enforcement (agent/enforce) and the owner's reclaim flow
// (agent/reclaim). Optional subsystems plug in through Agent.Subsystems
// without changing its start-up and shutdown order.
//
// Kernel enforcement is the first subsystem: New builds it from
// Config.Enforce ("auto", "on", "off"), Config.Iface and
// Config.LinkCapacity, with the transfer port protected and the gossip and
// Raft ports passed as never-protected control ports, and a resolver from
// destination address to building read from gossip metadata. Every
// telemetry report carries its per-building bandwidth estimate and the
// kernel's kill-switch mode ("disabled" with enforcement off), which the
// status page shows per member; GET /v1/enforce shows the subsystem itself.
//
// Start-up: New locks the data dir, loads the TLS material, binds the
// control socket, HTTP, Raft and transfer ports, and starts gossip; Run
// opens the coordinator, builds the job manager, the reclaim flow and the
// status view on it, serves HTTP and the control socket, joins peers and
// starts the background loops and subsystems.
//
// Shutdown (SIGINT/SIGTERM cancel Run's context, or a reclaim makes the
// node leave), in this order:
//  1. leadership transfer (if this node leads),
//  2. memberlist Leave (peers see a departure, not a failure),
//  3. raft Shutdown,
//  4. memberlist Shutdown,
//  5. optional subsystems (transfers, BPF links),
//  6. control socket, then HTTP Shutdown,
//  7. data-dir lock released.
//
// The owner's policy (agent/owner, docs/owner.md) runs in every node: each
// Config.OwnerCheck the owner's activity and the lending windows are
// turned into a decision, carried out through the reclaim flow (a notice,
// or at once) with its reason; the decision's outlook (lent until when, or
// lendable again from when) goes into the node's gossip metadata for the
// leader, members and the page. Serve runs a node across reclaims: a
// reclaimed node stays out of the cluster, holding its data dir and
// answering the lending operations on its control socket, until the owner
// or the policy lends it again, and each lent stretch is a new Agent.
package agent
