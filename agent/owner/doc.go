// Package owner decides, for a lab machine's owner, when the machine is lent
// to the cluster and when it is taken back by itself.
//
// The owner states the policy: lending windows in local time ("Mon-Fri
// 19:00-08:00", "Sat,Sun"), what owner activity ends lending and how (a GPU
// process of the owner, console input, CPU load; each mapped to an
// emergency reclaim or to a notice), how long the owner must have been idle
// before the machine is lent again, and how many automatic reclaims an hour
// may take.
//
// The core is pure: Schedule evaluates windows, Policy.Decide turns the
// state, one round of Observations and the time into a Decision (lend,
// reclaim with a notice, reclaim now, or nothing), and Policy.Lend,
// Policy.OwnerReclaimed and Policy.Status are the owner's commands as
// operations on the same State. Time is always an argument; the core reads
// no clock and no file. Every decision carries its reason in words
// ("lending window ends 08:00", "owner process 4242 on GPU 0").
//
// The sources at the edge read the machine: GPUSource lists the owner's GPU
// processes (from a gpu.Discoverer, guests told apart by their cgroup),
// EventDevices and Logind tell the last console input, ProcCPU measures the
// CPU load of processes that are not guests'. Observer polls the sources a
// policy uses.
//
// Outlook is what other nodes need to know of this machine's future (lent
// until when, or lendable again from when), encoded in a few bytes for
// gossip metadata.
package owner
