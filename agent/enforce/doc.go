// Package enforce is the node's kernel-enforcement subsystem: it joins the
// BPF programs of package bpf to the agent (docs/design.md P1.7, P3.5, P3.7).
//
// Subsystem is enforcement as the node runs it (an agent.Subsystem): the
// --enforce mode (auto, on, off), an Enforcer that auto mode replaces by
// one with enforcement off when it cannot start, the kill-switch the
// reclaim flow flips, and GET /v1/enforce. BuildingResolver maps
// destination addresses to buildings from gossip metadata for the sampler.
//
// An Enforcer's Start attaches the bpf programs to the
// node's interface, pins their maps under the node's pin directory and
// protects the transfer port (UDP) and the jobs' service ports; it never
// protects the gossip or Raft ports, so a node under a kill-switch can still
// announce that it leaves. The kill-switch mode is left as it is: off on a
// fresh node, the owner's mode when the owner's command set one in the
// pinned maps before the agent (re)started.
//
// While running it samples the egress byte counters every 100 ms, turns
// the per-destination differences into non-migration egress per destination
// building (a destination counter that goes down was evicted and restarted:
// its new value is the difference), and feeds one policy.BandwidthEstimator
// per building. The estimates (available, lower bound) go to a callback,
// mesh-ready (mesh.BuildingBandwidth), and Bandwidth returns them on demand
// for the agent's telemetry report. Transfers that fall short of their
// assigned rate lower a building's estimate through ObserveTransfer.
//
// By default every building's estimator is fed the node's whole
// non-migration egress: all of it crosses the node's access link, whose
// capacity is Config.Capacity, so traffic to building A leaves less for a
// migration to building B. Config.PerBuildingOnly feeds each building only
// the traffic to it (for a Capacity that describes each path on its own).
//
// Stop with the kill-switch off detaches the programs and removes the pin
// directory (bpf.Enforcer.Close): the node is unenforced afterwards. With the
// switch on (soft or hard: a reclaim, or the owner's command) Stop leaves
// the programs attached and pinned, so the owner's decision outlives the
// agent; 'reclaimnet killswitch off' or a restarted agent, which reuses the
// pinned maps (mode, protected ports) and clears the stale flows, takes it
// from there. A crashed agent leaves everything attached and pinned too.
//
// ApplyFlows makes the BPF flow table equal to the flows that concern this
// node: each transfer's UDP socket gets its own ceiling, at least 1.1 × its
// assigned rate with a burst of at least 256 KiB (a tighter bucket collapses
// QUIC), and its class's DSCP mark.
//
// Enforcement off. Without root (CAP_BPF and CAP_NET_ADMIN) or without a
// kernel that can run the programs, Start fails with an error naming what
// is missing. An agent that must run anyway (--dev without root) sets
// Config.Off: Start then attaches nothing, samples nothing and publishes no
// bandwidth (the leader keeps its configured capacities), ApplyFlows and
// ObserveTransfer are accepted and do nothing, SetKillSwitch returns ErrOff,
// and Stats says "off" with the reason. Check tells beforehand whether
// this process may enforce.
package enforce
