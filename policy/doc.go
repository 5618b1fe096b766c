// Package policy holds ReclaimNet's decisions as pure functions: the
// checkpoint interval and bandwidth allocation (SPEC P1), destination
// selection (SPEC P2), migration admission and rate allocation (SPEC P3),
// the hazard and bandwidth estimators (SPEC P1.7) and the leader's control
// step Tick. The coordinator, the node agent and the simulator all call
// these functions; none of them re-implements a policy.
//
// Conventions: sizes are bytes (int64), rates are bytes per second
// (float64), hazards are events per second (float64), and time comes in as
// time.Time / time.Duration arguments. Nothing here reads a clock, a global
// random source, the network or the disk; a test enforces that the package
// imports the standard library only.
package policy
