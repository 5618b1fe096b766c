// Package campus builds a "campus in a box": a small campus network made of
// Linux network namespaces on one machine, for `reclaimnet demo` and the
// campus tests. It needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2.
//
// # Design
//
// Every node gets its own network namespace. Each building is one namespace
// holding a Linux bridge (the building's access switch); the core is one
// namespace acting as an IPv4 router. The links are veth pairs:
//
//	node a1 (eth0) ── access ── (acc1) [bridge br0 in sw-a] (uplink) ── uplink ── (to-a) core router
//
// Building i (1-based, in Topology order) owns the subnet 10.77.i.0/24; its
// j-th node has address 10.77.i.j and the core's interface toward it has
// 10.77.i.254, the nodes' gateway. Nodes route only 10.77.0.0/16 (no default
// route), the core routes only its connected building subnets, and nothing
// is ever configured in the root namespace: the addresses exist only inside
// the campus and packets cannot leave it. Same-building traffic is bridged in
// the building switch and crosses only the two access links; cross-building
// traffic crosses the source building's uplink, the core and the destination
// building's uplink.
//
// Shaping: both ends of every veth carry an HTB root qdisc with one class at
// the link's rate (so each direction is shaped on its own egress) and a
// bounded byte FIFO (or netem when Topology.Delay is set) as the leaf. There
// is no separate aggregate core limit: the uplinks are the core's capacity,
// as on a campus whose distribution links are the bottleneck.
//
// Names: every namespace of one campus starts with a prefix "cb<pid>x<hex4>"
// (the creating process id and a random tag), e.g. "cb4242x9f3a-a1",
// "cb4242x9f3a-sw-a", "cb4242x9f3a-core". Parallel campuses never collide,
// and CleanupStale removes campuses whose creating process has died (a
// killed test or demo runs no cleanup; callers run CleanupStale first).
//
// Processes: Campus.Exec runs a command inside a node with `ip netns exec`
// (which execs the command in place, so the returned process is the command
// itself, suitable for long-running agents); Campus.RunIn runs Go code on a
// locked OS thread switched into the node's namespace (sockets created there
// stay in that namespace after it returns). Close kills every process still
// inside the campus namespaces, deletes every interface it created and then
// the namespaces.
//
// Faults: Disconnect/Reconnect set the switch end of a node's access link
// down/up (a pulled cable: the node keeps its address and routes, its
// carrier drops, and connections to it time out); SetLinkUp does the same
// for any link (an uplink down partitions a whole building: the core then
// answers "network unreachable", as a core that lost a route would); SetRate changes a link's rate at runtime in
// both directions (bandwidth fluctuation). Counters reads the byte and
// packet counters of both ends of a link through netlink.
package campus
