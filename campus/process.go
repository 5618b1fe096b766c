package campus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
)

func (a *Agents) tlsDir(node string) string { return filepath.Join(a.cfg.Dir, node, "tls") }

func (a *Agents) nodeAddr(node string) (netip.Addr, bool) {
	if a.campus == nil {
		return netip.Addr{}, false
	}
	n, ok := a.campus.Node(node)
	return n.Addr, ok
}

// PinDir is the node's bpffs pin directory ("" in loopback mode). It lies
// under a directory of its own per campus, so campuses never share one and
// Close removes what a kill-switch left pinned.
func (a *Agents) PinDir(node string) string {
	if a.pinRoot == "" {
		return ""
	}
	return filepath.Join(a.pinRoot, node)
}

// args is the node's agent command line (without the binary).
func (a *Agents) args(node string, join []string) []string {
	cfg := a.cfg
	args := []string{"agent", "--name", node, "--data-dir", a.DataDir(node), "--tls-dir", a.tlsDir(node),
		"--gossip-key", a.key, "--building", a.building[node], "--local-timings", "--log-level", "debug",
		// Fast gossip, but the production Raft timeouts: 50 ms ones make
		// leaders come and go when 8 agents share a busy 2-core host.
		"--raft-heartbeat", "1s",
		// The scenarios judge a reclaim by the agent's exit at its
		// deadline, and restart the machine as its owner would.
		"--on-reclaim", "exit"}
	for _, g := range cfg.GPUs {
		args = append(args, "--gpu", g)
	}
	if addr, ok := a.nodeAddr(node); ok {
		args = append(args, "--bind", addr.String(),
			"--gossip-port", strconv.Itoa(nsGossipPort), "--raft-port", strconv.Itoa(nsRaftPort),
			"--transfer-port", strconv.Itoa(nsTransferPort),
			"--http", netip.AddrPortFrom(addr, nsHTTPPort).String(),
			"--enforce", cfg.Enforce, "--bpf-pin-dir", a.PinDir(node),
			"--link-capacity", strconv.FormatInt(int64(cfg.Topology.AccessRate.BytesPerSec()), 10),
			// The leader's graph cannot measure uplinks: declare the
			// shaped rate so P3 reserves research traffic's share there.
			"--uplink-capacity", strconv.FormatInt(int64(cfg.Topology.UplinkRate.BytesPerSec()), 10))
	} else {
		a.mu.Lock()
		p := a.ports[node] // zero on a first start: the kernel picks
		a.mu.Unlock()
		args = append(args, "--bind", "127.0.0.1", "--http", "127.0.0.1:0",
			"--gossip-port", strconv.Itoa(p.gossip), "--raft-port", strconv.Itoa(p.raft),
			"--transfer-port", strconv.Itoa(p.transfer), "--enforce", "off")
	}
	for _, j := range join {
		args = append(args, "--join", j)
	}
	args = append(args, a.fixedArg...)
	args = append(args, cfg.ExtraArgs...)
	a.mu.Lock()
	extra, ok := a.nodeArgs[node]
	a.mu.Unlock()
	if !ok {
		extra = cfg.NodeArgs[node]
	}
	return append(args, extra...)
}

// command is the exec.Cmd running the reclaimnet binary with args in the
// node's namespaces, for a CLI command: the node's network namespace and,
// while its agent runs, the agent's mount namespace (agentCommand), so a
// path the command names means what it means to the node's agent. nsenter
// switches only those (`ip netns exec` would give it a private /sys); the
// working directory stays the campus directory.
func (a *Agents) command(ctx context.Context, node string, args ...string) *exec.Cmd {
	if a.campus == nil {
		return exec.CommandContext(ctx, a.cfg.Binary, args...)
	}
	n, _ := a.campus.Node(node)
	ns := []string{"--net=" + n.NetNSPath()}
	if pid := a.agentPID(node); pid > 0 {
		ns = append(ns, fmt.Sprintf("--mount=/proc/%d/ns/mnt", pid), "--wd="+a.cfg.Dir)
	}
	return exec.CommandContext(ctx, "nsenter", append(append(ns, "--", a.cfg.Binary), args...)...)
}

// agentCommand is the exec.Cmd running the node's agent: in namespace mode
// in the node's network namespace and in a mount namespace of its own
// (private propagation) where the node's home directory (HomeDir) is
// mounted at HomePath and the other nodes' directories (<Dir>/<node>:
// their data, TLS and home directories) are empty, so what one node
// keeps no other node has, as on separate machines. Every other mount is
// the host's (bpffs and the cgroup hierarchies included), and nsenter,
// unshare and sh each exec the next, so the process started is the agent.
func (a *Agents) agentCommand(node string, args ...string) *exec.Cmd {
	if a.campus == nil {
		return exec.Command(a.cfg.Binary, args...)
	}
	n, _ := a.campus.Node(node)
	var others []string
	for _, o := range a.names {
		if o != node {
			others = append(others, filepath.Join(a.cfg.Dir, o))
		}
	}
	argv := append([]string{"--net=" + n.NetNSPath(), "--"}, ownMounts(a.HomeDir(node), a.HomePath(), others, append([]string{a.cfg.Binary}, args...))...)
	return exec.Command("nsenter", argv...)
}

// ownMounts is the command line that runs argv in a new mount namespace
// (private propagation: nothing mounted there reaches the host, nothing
// mounted on the host later reaches it) with home bind-mounted at at and
// an empty read-only tmpfs over each directory of hide.
func ownMounts(home, at string, hide, argv []string) []string {
	const script = `home=$1 at=$2; shift 2
while [ "$1" != -- ]; do mount -t tmpfs -o ro,size=4k,mode=0555 campus-hidden "$1" || exit; shift; done
shift
mount --bind "$home" "$at" && exec "$@"`
	out := append([]string{"unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", home, at}, hide...)
	return append(append(out, "--"), argv...)
}

// agentPID is the pid of the node's running agent, 0 when none runs.
func (a *Agents) agentPID(node string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.procs[node]; p != nil && !p.exited() {
		return p.cmd.Process.Pid
	}
	return 0
}

// HomePath is the directory where every node, in namespace mode, finds its
// own home directory (HomeDir): the same path on every node, as a user's
// home is on lab machines that share nothing. It is empty on the host, and
// in loopback mode (no mount namespaces) every agent sees it empty.
func (a *Agents) HomePath() string { return filepath.Join(a.cfg.Dir, "home") }

// HomeDir is the host directory the node's agent sees at HomePath (namespace
// mode): what a test writes here exists for that node only.
func (a *Agents) HomeDir(node string) string { return filepath.Join(a.cfg.Dir, node, "home") }

// Sees reports whether path exists for the node's running agent, in its
// own mount namespace (through /proc/PID/root).
func (a *Agents) Sees(node, path string) (bool, error) {
	pid := a.agentPID(node)
	if pid == 0 {
		return false, fmt.Errorf("%s: agent not running", node)
	}
	_, err := os.Lstat(filepath.Join(fmt.Sprintf("/proc/%d/root", pid), path))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("%s: %w", node, err)
}

// launch starts the node's agent and waits for its info file.
func (a *Agents) launch(ctx context.Context, node string, join []string) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return ErrClosed
	}
	if p := a.procs[node]; p != nil && !p.exited() {
		a.mu.Unlock()
		return fmt.Errorf("agent %s is already running (pid %d)", node, p.cmd.Process.Pid)
	}
	a.mu.Unlock()

	dir := a.DataDir(node)
	if err := os.Remove(filepath.Join(dir, localapi.InfoFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove old info file of %s: %w", node, err)
	}
	logf, err := os.OpenFile(a.LogPath(node), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("log of %s: %w", node, err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== campus: starting agent %s at %s\n", node, time.Now().UTC().Format(time.RFC3339Nano))
	// Not bound to ctx: the agent outlives the call that starts it; Kill,
	// Stop and Close end it.
	cmd := a.agentCommand(node, a.args(node, join)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = a.cfg.Dir
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "RECLAIMNET_DATA_DIR=") })
	cmd.Env = env
	// If this process dies without Close (a test killed by its timeout),
	// its agents die too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start agent %s: %w", node, err)
	}
	p := &agentProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	a.mu.Lock()
	a.procs[node] = p
	a.mu.Unlock()

	infoPath := filepath.Join(dir, localapi.InfoFile)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(90 * time.Second)
	defer deadline.Stop()
	for {
		b, err := os.ReadFile(infoPath)
		var info localapi.Info
		if err == nil && json.Unmarshal(b, &info) == nil && info.PID == cmd.Process.Pid {
			a.mu.Lock()
			p.info = info
			if a.campus == nil {
				a.ports[node] = agentPorts{gossip: port(info.GossipAddr), raft: port(info.RaftAddr), transfer: port(info.TransferAddr)}
			}
			a.mu.Unlock()
			a.cfg.Log.Debug("agent up", "node", node, "pid", info.PID, "gossip", info.GossipAddr, "http", info.HTTPAddr)
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("agent %s exited before it was up (%v); last lines of %s:\n%s", node, p.err, a.LogPath(node), tail(a.LogPath(node), 20))
		case <-ctx.Done():
			return fmt.Errorf("agent %s: waiting for %s: %w", node, infoPath, ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("agent %s did not write %s within 90s; last lines of %s:\n%s", node, infoPath, a.LogPath(node), tail(a.LogPath(node), 20))
		case <-tick.C:
		}
	}
}

func (p *agentProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func port(hostport string) int {
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// tail returns the last n lines of a file (for error messages).
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// gossipAddr is the node's gossip address for --join.
func (a *Agents) gossipAddr(node string) string {
	if addr, ok := a.nodeAddr(node); ok {
		return netip.AddrPortFrom(addr, nsGossipPort).String()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.procs[node]; p != nil {
		return p.info.GossipAddr
	}
	return ""
}

// Kill SIGKILLs the node's agent, like a machine losing power: the agent
// gets no chance to hand off or leave. Its jobs (which run in process groups
// of their own and would otherwise live on as orphans) are SIGKILLed too: in
// namespace mode every process in the node's namespace, in loopback mode
// every descendant of the agent found before the kill.
func (a *Agents) Kill(node string) error {
	a.mu.Lock()
	p := a.procs[node]
	a.mu.Unlock()
	if p == nil || p.exited() {
		return fmt.Errorf("kill %s: agent not running", node)
	}
	pid := p.cmd.Process.Pid
	desc := descendants(pid)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", node, err)
	}
	<-p.done
	for _, d := range desc {
		syscall.Kill(-d, syscall.SIGKILL) // its process group, if it leads one
		syscall.Kill(d, syscall.SIGKILL)
	}
	if a.campus != nil {
		n, _ := a.campus.Node(node)
		if err := killProcessesIn(n.NetNS); err != nil {
			return fmt.Errorf("kill %s: processes in its namespace: %w", node, err)
		}
	}
	a.cfg.Log.Info("agent killed (SIGKILL)", "node", node, "pid", pid, "jobs_killed", len(desc))
	return nil
}

// descendants lists every process below pid (children, their children...).
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		q := queue[0]
		queue = queue[1:]
		for _, c := range children[q] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// Stop sends SIGTERM to the node's agent and waits for it to exit (it
// leaves gracefully and stops its jobs first); after 60 s it is SIGKILLed.
func (a *Agents) Stop(node string) error {
	a.mu.Lock()
	p := a.procs[node]
	a.mu.Unlock()
	if p == nil || p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s: %w", node, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(60 * time.Second):
		a.cfg.Log.Warn("agent ignored SIGTERM for 60s; killing it", "node", node)
		return a.Kill(node)
	}
}

// SetNodeArgs replaces the flags appended to node's command line
// (AgentsConfig.NodeArgs) from its next Start on: a machine its owner
// brings back in another role.
func (a *Agents) SetNodeArgs(node string, args []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.nodeArgs == nil {
		a.nodeArgs = map[string][]string{}
	}
	a.nodeArgs[node] = slices.Clone(args)
}

// Start (re)starts a stopped or killed node with the same data dir, ports
// and flags; it joins the running agents and Start returns once the cluster
// sees it alive again (every running agent lists it, and it sees them).
func (a *Agents) Start(ctx context.Context, node string) error {
	if !slices.Contains(a.names, node) {
		return fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	var join []string
	for _, n := range a.names {
		if n != node && a.Running(n) {
			join = append(join, a.gossipAddr(n))
		}
	}
	if err := a.launch(ctx, node, join); err != nil {
		return err
	}
	var running []string
	for _, n := range a.names {
		if a.Running(n) {
			running = append(running, n)
		}
	}
	return a.WaitFormed(ctx, running...)
}
