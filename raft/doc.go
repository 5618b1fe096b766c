// Package raft is ReclaimNet's coordinator: the replicated state (package
// state) kept consistent with hashicorp/raft over mutual TLS, the
// voter-set management that keeps a small, stable, building-spread quorum
// while nodes come and go, and the leader's control loop that runs
// policy.Tick every control period.
//
// Every node runs a Coordinator. Any node may Submit a command: a
// non-leader forwards it to the leader over the same TLS listener that
// carries Raft (the first byte of a connection says which). Every node reads
// what concerns it from its local copy of the state (state.Store), which
// returns copies and signals changes on a channel.
//
// hashicorp/raft is imported as hraft so that this package can keep its
// folder's name.
package raft
