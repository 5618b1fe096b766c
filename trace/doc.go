// Package trace is ReclaimNet's trace format: one JSON Lines file of nodes,
// links, departures, returns, bandwidth samples and jobs (README.md in this
// folder). The simulator reads it (generated, imported or replayed traces)
// and the agent writes it (`reclaimnet trace export`, GET /v1/trace), so a
// campus can replay its own history. Read checks every record and names the
// file and line of the first bad one: trace files are untrusted input.
package trace
