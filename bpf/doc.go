// Package bpf is ReclaimNet's kernel enforcement (docs/design.md P3.5, P3.7): two TC
// programs written in C and compiled with bpf2go, their loader, and the Go
// API the agent and the owner's command use.
//
// The egress program looks every outgoing packet up in a flow table keyed
// by (source port, destination address, destination port, protocol). A
// flow in the table gets its class's DSCP mark (EF 46, AF41 34, CS1 8; the
// ECN bits are kept) and passes a spin-locked token bucket that is the
// flow's ceiling: packets over it are dropped and counted as policy
// violations. Every packet is also counted per destination, split into
// flows in the table (ReclaimNet transfers) and everything else, so the
// agent can estimate the bandwidth still available to migration (P1.7).
//
// The ingress program is the kill-switch. In soft mode it drops new
// connection attempts (TCP SYN without ACK, QUIC v1/v2 long-header
// Initials) addressed to the protected ports; in hard mode it drops
// everything addressed to them. Traffic to any other port is never
// touched, and a packet whose destination port cannot be read is passed.
//
// Maps (and TCX links) are pinned in bpffs under a per-node directory, by
// default /sys/fs/bpf/reclaimnet/<node>, so OpenPinned can flip the switch
// from another process even when the agent is hung or gone.
//
// Everything here needs Linux, root (CAP_BPF and CAP_NET_ADMIN) and a
// kernel with TCX (6.6+) or clsact/cls_bpf.
package bpf
