// Package sandbox confines guest jobs with the kernel's own mechanisms, so
// that an owner can lend a machine to code written by strangers:
//
//   - identity: each running job has its own uid and gid from a reserved
//     range (no /etc/passwd entry needed), no supplementary groups, no
//     capabilities in any set, no_new_privs, and Docker's default seccomp
//     profile;
//   - resources: each job process lives in its own cgroup under a parent
//     that carries the owner's caps on all guests together, with memory,
//     CPU and pids limits; stopping it kills the whole cgroup, and a kill
//     by the OOM killer is counted;
//   - filesystem: its own mount namespace whose root holds the host's
//     system directories read-only, its own directories read-write, a
//     private /tmp and /dev/shm, a minimal /dev, and nothing else (no
//     /home, /root, /run, agent data directory, keys or control socket);
//   - processes: its own PID, IPC and UTS namespaces, on the host network;
//   - GPUs: only the device nodes of its GPUs, in /dev and in the device
//     cgroup;
//   - lifetime: its init dies with the agent (parent-death signal and a
//     lifeline pipe) and takes the whole PID namespace with it, and
//     KillLeftovers removes the cgroups of jobs an earlier agent left.
//
// A job's init is this binary started again as "reclaimnet-sandbox-init"
// (/proc/self/exe, so test binaries work too): the package's init function
// recognises the name, builds the job's root, drops privileges on the
// thread that forks the job, then reaps every process of the namespace
// and forwards the stop and checkpoint signals. It reports on a status
// pipe: "started N", then "exit CODE" or "signal N" for the main process.
//
// Cgroups go through containerd/cgroups v3 and work on the three layouts
// in use: unified v2, hybrid (v1 controllers with a v2 hierarchy that has
// cgroup.kill) and legacy v1.
package sandbox
