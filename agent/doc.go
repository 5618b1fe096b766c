// Package agent wires one ReclaimNet node together and owns every
// goroutine it starts: gossip (mesh), the coordinator (raft), the local
// control socket the CLI talks to, and the HTTP server with the status page,
// the /v1 JSON API and /metrics (package web, fed by webSource from the
// replicated state, gossip and the coordinator). Optional subsystems (job
// supervisor, transfers, BPF enforcement) plug in through fields of Agent without
// changing its start-up and shutdown order.
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
