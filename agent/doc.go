// Package agent wires one ReclaimNet node together and owns every
// goroutine it starts: gossip (mesh), the coordinator (raft), the local
// control socket the CLI talks to, and the HTTP server with the status page,
// the /v1 JSON API and /metrics (package web, fed by webSource from the
// replicated state, gossip and the coordinator). Optional subsystems (job
// supervisor, transfers, BPF enforcement) plug in through fields of Agent without
// changing its start-up and shutdown order.
//
// Kernel enforcement (agent/enforce) is the first subsystem: New builds it
// from Config.Enforce ("auto", "on", "off"), Config.Iface and
// Config.LinkCapacity, with the transfer port protected and the gossip and
// Raft ports passed as never-protected control ports, and a resolver from
// destination address to building read from gossip metadata. Every
// telemetry report carries its per-building bandwidth estimate and the
// kernel's kill-switch mode ("disabled" with enforcement off), which the
// status page shows per member; GET /v1/enforce shows the subsystem itself.
//
// Start-up: lock the data dir → load TLS material → gossip → coordinator →
// control socket → HTTP → join peers → background loops.
//
// Shutdown (SIGINT/SIGTERM cancel Run's context), in this order:
//  1. leadership transfer (if this node leads),
//  2. memberlist Leave (peers see a departure, not a failure),
//  3. raft Shutdown,
//  4. memberlist Shutdown,
//  5. optional subsystems (transfers, BPF links),
//  6. control socket, then HTTP Shutdown,
//  7. data-dir lock released.
package agent
