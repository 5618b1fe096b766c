// Package demo is `reclaimnet demo`: a small campus on this machine that
// shows what ReclaimNet is for. It starts real agents (campus.StartAgents:
// as root each node in its own network namespace with shaped links and
// kernel enforcement on; otherwise processes on loopback with enforcement
// off), runs a training job (the PyTorch example, embedded in the binary,
// or a built-in synthetic job that follows the same checkpoint contract),
// reclaims the job's node with notice (`reclaimnet reclaim --notice`) and
// then the next one without (`reclaimnet reclaim --now`), and prints a
// timeline of what happened and why: read from the agents' own state (the
// members, the decisions with their candidates and reasons, the checkpoint
// catalogue, the owner's reports) and from the job's output on each node
// (its step counter shows it resumed where its checkpoint left off).
//
// The status page of a live node is served on this machine's loopback
// (default 127.0.0.1:7949) through a small read-only proxy that dials into
// the node's namespace and follows the leader as nodes leave.
//
// Everything the demo starts (namespaces, agents, jobs, the work
// directory) is removed when it returns, also on error or Ctrl-C.
package demo
