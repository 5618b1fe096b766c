// Package sim is ReclaimNet's evidence: a seeded generator calibrated to
// the paper's campus (docs/design.md §0), with a correlated-departure mode of groups
// leaving together; importers for public departure and workload traces;
// and a discrete-event simulator that replays a trace (the format of
// package trace) through the real policy core (policy.Tick and the policy
// estimators) and through the paper's baselines, then reports work loss,
// downtime, redundant compute, checkpoint traffic, research-traffic
// degradation and the total GPU time lost (docs/design.md §5, P1.9).
//
// The simulator never re-implements a policy: ReclaimNet and the ablation
// subsets are policy.Tick with policy.Params.Switches; the baselines that
// are not ReclaimNet (Slurm requeue, no migration, Bamboo-like redundancy,
// the hindsight oracle) are written here with their models in their doc
// comments. Time is virtual: a two-month trace runs in seconds.
package sim
