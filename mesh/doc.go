// Package mesh is a node's view of the cluster: who is there and what they
// report. It wraps hashicorp/memberlist (SWIM gossip, encrypted with the
// cluster's gossip key) and adds three things on top:
//
//   - node metadata (Meta): a small, versioned binary record every member
//     carries (building, ports, role, GPU summary), kept under memberlist's
//     512-byte limit;
//   - telemetry (Telemetry): each node's load, free GPUs, published hazard,
//     kill-switch state, the bandwidth it sees towards each destination
//     building and the progress of its outgoing transfers (the leader
//     judges every node's transfers in flight on it), in a versioned
//     encoding that only appends fields, spread by epidemic broadcast
//     where a newer report from a node replaces an older one, with bounded
//     push/pull state for nodes that join late;
//   - events (Event): joins, departures and updates handed to the agent over
//     a buffered channel without ever blocking memberlist's own goroutines.
//
// Every decoder of bytes that arrive from the network (DecodeMeta,
// DecodeTelemetry, the push/pull state) returns an error on malformed input
// and never panics; fuzz targets check that.
//
// The package tests use MemNetwork (memnet_test.go), a small in-memory
// transport: packets are dropped like UDP (full receive buffer, closed or
// unknown peer) and streams are in-memory pipes, so many nodes run in one
// process, also inside testing/synctest's fake time.
package mesh
