// Package policy holds ReclaimNet's decisions as pure functions: the
// checkpoint interval and bandwidth allocation (docs/design.md P1), destination
// selection (docs/design.md P2), migration admission and rate allocation (docs/design.md P3),
// the hazard and bandwidth estimators (docs/design.md P1.7) and the leader's control
// step Tick. The coordinator, the node agent and the simulator all call
// these functions; none of them re-implements a policy.
//
// Conventions: sizes are bytes (int64), rates are bytes per second
// (float64), hazards are events per second (float64), and time comes in as
// time.Time / time.Duration arguments. Nothing here reads a clock, a global
// random source, the network or the disk; a test enforces that the package
// imports the standard library only.
//
// Where things are:
//
//	types.go        the shared vocabulary (Snapshot, Decisions, Node, Job, Link, Params)
//	interval.go     P1.1, P1.2, P1.5, P1.6: cost rate, Δ*, constrained interval, final checkpoint
//	allocate.go     P1.3, P1.4: cube-root allocation with caps (water-filling)
//	fill.go         weighted progressive filling shared by P1 and P3
//	gap.go          P1.8: adaptivity gap
//	profile.go      HazardProfile: At, Integral, Survival
//	hazard.go       P1.7: emergency and departure hazard estimator
//	codeparture.go  P2.7: which nodes leave together, from the departure log
//	bandwidth.go    P1.7: bandwidth available to migration, with a lower bound
//	topology.go     P2.1: campus graph, routing tree, paths, bottleneck
//	destination.go  P2.3–P2.6: filters, locality, score, ranked candidates
//	admission.go    P3.2–P3.4: reservation, r_min, EDF admission, staggering, max-min
//	world.go        one control period's precomputed view (Tick's working state)
//	checkpoint.go   P1 inside Tick: standbys and per-link cube-root shares
//	holders.go      P2.7 inside Tick: holders' joint risk, holder-to-holder copies
//	tick.go         Tick, in the order of docs/design.md P3.4a
package policy
