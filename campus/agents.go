package campus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/web"
)

// Agent ports inside a node's namespace: every node has its own network
// stack, so every agent uses the production defaults.
const (
	nsGossipPort   = localapi.DefaultGossipPort
	nsRaftPort     = localapi.DefaultRaftPort
	nsTransferPort = localapi.DefaultTransferPort
	nsHTTPPort     = 7949
)

// DefaultAgentGPUs is what every campus agent declares when AgentsConfig.GPUs
// is empty: the campus runs on machines without GPUs, so each node declares
// two simulated ones (jobs get them as a number; nothing touches a device).
var DefaultAgentGPUs = []string{"CampusGPU:24GiB:8.6:x2"}

// AgentsConfig says how to run the agents.
type AgentsConfig struct {
	// Binary is the path of the reclaimnet binary (demo: os.Executable();
	// tests: go build).
	Binary string
	// Dir is the work directory: <Dir>/<node>/{data,tls}, <Dir>/<node>.log,
	// the CA in <Dir>/ca.
	Dir string
	// Loopback: no namespaces, every agent on 127.0.0.1 with its own ports,
	// --enforce off. Otherwise (root) every agent runs in its campus node's
	// network namespace, bound to the node's address.
	Loopback bool
	// Topology gives the nodes and buildings (shaping only in namespace
	// mode).
	Topology Topology
	// ExtraArgs are appended to every agent's command line (e.g. protocol
	// switches); a flag given here overrides the one StartAgents sets.
	ExtraArgs []string
	// Log receives progress messages (nil: discard).
	Log *slog.Logger

	// Enforce is the agents' --enforce in namespace mode: "" means "on"
	// (the campus is root: enforcement that cannot start is an error, not
	// a silent fallback). Loopback mode always uses "off".
	Enforce string
	// GPUs are the --gpu declarations of every agent (nil:
	// DefaultAgentGPUs).
	GPUs []string
	// FixedLoad is the load (per CPU) every agent reports: all agents of
	// a campus share one host, whose load average says nothing about a
	// node (and on a busy machine exceeds P2's θ, so no job would ever be
	// placed). With a binary that has --fixed-load it is passed so; without
	// it, in namespace mode, each agent runs in a private mount namespace
	// with a file showing this load bind-mounted over /proc/loadavg (in
	// loopback mode the host's load stays). Negative: the host's load.
	// 0 means 0.1.
	FixedLoad float64
}

// Agents is a running campus of reclaimnet agents. Its methods are safe for
// concurrent use.
type Agents struct {
	cfg      AgentsConfig
	campus   *Campus // nil in loopback mode
	names    []string
	building map[string]string
	key      string
	pinRoot  string // bpffs directory holding every node's pin dir (namespace mode)
	fixedArg []string
	loadavg  string // file bind-mounted over the agents' /proc/loadavg ("" none)

	mu     sync.Mutex
	procs  map[string]*agentProc
	ports  map[string]agentPorts // loopback: the ports a node first bound, reused on restart
	closed bool
}

type agentPorts struct{ gossip, raft, transfer int }

// agentProc is one running agent process; done closes when it has been
// waited for.
type agentProc struct {
	cmd  *exec.Cmd
	info localapi.Info
	done chan struct{}
	err  error // Wait's result, valid after done
}

// StartAgents builds the campus (unless Loopback), makes a CA, node
// certificates and a gossip key, starts every agent (each agent gets
// --building from the topology), joins them to the first node, and returns
// once a Raft leader exists and every member is alive in the cluster view
// (with three voters, or one below three nodes: WaitFormed). On failure
// everything started is stopped again.
func StartAgents(ctx context.Context, cfg AgentsConfig) (*Agents, error) {
	if cfg.Binary == "" || cfg.Dir == "" {
		return nil, errors.New("start agents: Binary and Dir are required")
	}
	if err := cfg.Topology.Validate(); err != nil {
		return nil, fmt.Errorf("start agents: %w", err)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if len(cfg.GPUs) == 0 {
		cfg.GPUs = DefaultAgentGPUs
	}
	if cfg.Enforce == "" {
		cfg.Enforce = "on"
	}
	a := &Agents{
		cfg:      cfg,
		building: map[string]string{},
		procs:    map[string]*agentProc{},
		ports:    map[string]agentPorts{},
	}
	for _, b := range cfg.Topology.Buildings {
		for j := 1; j <= b.Nodes; j++ {
			n := nodeName(b.Name, j)
			a.names = append(a.names, n)
			a.building[n] = b.Name
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("start agents: %w", err)
	}
	if err := a.start(ctx); err != nil {
		if cerr := a.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
		return nil, fmt.Errorf("start agents: %w", err)
	}
	return a, nil
}

func (a *Agents) start(ctx context.Context) error {
	cfg := a.cfg
	if !cfg.Loopback {
		if stale, err := CleanupStale(); err != nil {
			cfg.Log.Warn("removing stale campuses", "prefixes", stale, "err", err)
		}
		removeStalePins(cfg.Log)
		t0 := time.Now()
		c, err := Build(ctx, cfg.Topology)
		if err != nil {
			return err
		}
		a.mu.Lock()
		a.campus = c
		a.mu.Unlock()
		a.pinRoot = filepath.Join(campusPinRoot, c.Prefix())
		cfg.Log.Info("campus built", "prefix", c.Prefix(), "nodes", len(a.names), "took", time.Since(t0).Round(time.Millisecond))
	}
	fixed, err := a.fixedLoadArgs(ctx)
	if err != nil {
		return err
	}
	a.fixedArg = fixed
	if fixed == nil && cfg.FixedLoad >= 0 && !cfg.Loopback {
		// No --fixed-load in this binary: give every agent a private view
		// of /proc/loadavg showing the fixed load (root only).
		load := cfg.FixedLoad
		if load == 0 {
			load = 0.1
		}
		a.loadavg = filepath.Join(cfg.Dir, "loadavg")
		v := load * float64(runtime.NumCPU())
		line := fmt.Sprintf("%.2f %.2f %.2f 1/100 1\n", v, v, v)
		if err := os.WriteFile(a.loadavg, []byte(line), 0o644); err != nil {
			return fmt.Errorf("fixed load file: %w", err)
		}
		cfg.Log.Info("agents see a fixed /proc/loadavg (bind mount in a private mount namespace)", "load_per_cpu", load)
	}
	// Credentials: one gossip key, one CA, one certificate per node.
	key, err := a.tool(ctx, "keygen")
	if err != nil {
		return err
	}
	a.key = strings.TrimSpace(key)
	caDir := filepath.Join(cfg.Dir, "ca")
	if _, err := os.Stat(filepath.Join(caDir, "ca.pem")); err != nil {
		if _, err := a.tool(ctx, "tls", "ca", "create", "--dir", caDir); err != nil {
			return err
		}
	}
	for _, n := range a.names {
		args := []string{"tls", "cert", "create", "--node", n, "--ca-dir", caDir, "--out", a.tlsDir(n)}
		if addr, ok := a.nodeAddr(n); ok {
			args = append(args, "--host", addr.String())
		}
		if _, err := a.tool(ctx, args...); err != nil {
			return err
		}
		if err := os.MkdirAll(a.DataDir(n), 0o700); err != nil {
			return fmt.Errorf("data dir of %s: %w", n, err)
		}
	}
	// The first node bootstraps; the others join it, started together.
	if err := a.launch(ctx, a.names[0], nil); err != nil {
		return err
	}
	first := a.gossipAddr(a.names[0])
	errs := make([]error, len(a.names))
	var wg sync.WaitGroup
	for i, n := range a.names[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i+1] = a.launch(ctx, n, []string{first})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	cfg.Log.Info("agents started; waiting for the cluster to form", "agents", len(a.names))
	return a.WaitFormed(ctx, a.names...)
}

// fixedLoadArgs returns the --fixed-load flag when the binary has it.
func (a *Agents) fixedLoadArgs(ctx context.Context) ([]string, error) {
	if a.cfg.FixedLoad < 0 {
		return nil, nil
	}
	cmd := exec.CommandContext(ctx, a.cfg.Binary, "agent", "-h")
	out, _ := cmd.CombinedOutput() // -h exits 0 or 2 depending on the flag package; the text is what counts
	if len(out) == 0 {
		return nil, fmt.Errorf("%s agent -h printed nothing: is %s a reclaimnet binary?", a.cfg.Binary, a.cfg.Binary)
	}
	if !strings.Contains(string(out), "-fixed-load") {
		a.cfg.Log.Warn("this reclaimnet has no --fixed-load: every agent reports the host's load, and on a busy host P2 places nothing")
		return nil, nil
	}
	load := a.cfg.FixedLoad
	if load == 0 {
		load = 0.1
	}
	return []string{"--fixed-load", strconv.FormatFloat(load, 'g', -1, 64)}, nil
}

// campusPinRoot holds one directory of pinned BPF objects per campus.
const campusPinRoot = "/sys/fs/bpf/reclaimnet"

// removeStalePins removes the pin directories of campuses whose process
// has died (a killed test runs no Close; a kill-switch left on stays
// pinned otherwise).
func removeStalePins(log *slog.Logger) {
	entries, err := os.ReadDir(campusPinRoot)
	if err != nil {
		return
	}
	for _, e := range entries {
		m := prefixPattern.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			if err := os.RemoveAll(filepath.Join(campusPinRoot, e.Name())); err != nil {
				log.Warn("removing stale pins", "dir", e.Name(), "err", err)
			}
		}
	}
}

// tool runs a short reclaimnet command in the root namespace.
func (a *Agents) tool(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, a.cfg.Binary, args...)
	cmd.Dir = a.cfg.Dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("reclaimnet %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

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
		"--raft-heartbeat", "1s"}
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
	return append(args, cfg.ExtraArgs...)
}

// command is the exec.Cmd running the reclaimnet binary with args in the
// node's namespace (nsenter switches only the network namespace, so the
// agent shares the mount namespace and bpffs with its CLI commands; `ip
// netns exec` would give it a private /sys).
func (a *Agents) command(ctx context.Context, node string, args ...string) *exec.Cmd {
	if a.campus == nil {
		return exec.CommandContext(ctx, a.cfg.Binary, args...)
	}
	n, _ := a.campus.Node(node)
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.NetNSPath(), "--", a.cfg.Binary}, args...)...)
}

// agentCommand is command for the agent itself: with a fixed load file it
// runs in a private mount namespace (slave propagation, so bpffs and every
// other mount stay shared) where that file is bind-mounted over
// /proc/loadavg; sh execs the agent in place, so the pid stays the agent's.
func (a *Agents) agentCommand(node string, args ...string) *exec.Cmd {
	if a.loadavg == "" || a.campus == nil {
		return a.command(context.Background(), node, args...)
	}
	n, _ := a.campus.Node(node)
	wrap := []string{"--net=" + n.NetNSPath(), "--", "unshare", "--mount", "--propagation", "slave", "--",
		"/bin/sh", "-c", `mount --bind "$0" /proc/loadavg && exec "$@"`, a.loadavg, a.cfg.Binary}
	return exec.Command("nsenter", append(wrap, args...)...)
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

// Campus returns the campus the agents run in (nil in loopback mode).
func (a *Agents) Campus() *Campus { return a.campus }

// Names returns the node names in topology order.
func (a *Agents) Names() []string { return slices.Clone(a.names) }

// Building returns the node's building.
func (a *Agents) Building(node string) string { return a.building[node] }

// DataDir is the node's --data-dir (the CLI reaches the agent through its
// socket there).
func (a *Agents) DataDir(node string) string { return filepath.Join(a.cfg.Dir, node, "data") }

// LogPath is the file the node's agent writes its output to (appended to
// across restarts).
func (a *Agents) LogPath(node string) string { return filepath.Join(a.cfg.Dir, node+".log") }

// HTTPAddr is the host:port of the node's status page, as reachable from
// inside its namespace (in loopback mode, from anywhere on this machine);
// "" when the agent is not running.
func (a *Agents) HTTPAddr(node string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.procs[node]; p != nil && !p.exited() {
		return p.info.HTTPAddr
	}
	return ""
}

// Info is what the node's running agent wrote to its info file (bound
// addresses, pid); false when it is not running.
func (a *Agents) Info(node string) (localapi.Info, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.procs[node]; p != nil && !p.exited() {
		return p.info, true
	}
	return localapi.Info{}, false
}

// Running reports whether the node's agent process is alive.
func (a *Agents) Running(node string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.procs[node]
	return p != nil && !p.exited()
}

// Exited returns a channel closed when the node's current agent process has
// exited (already closed when none runs) and its wait error.
func (a *Agents) Exited(node string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.procs[node]; p != nil {
		return p.done
	}
	c := make(chan struct{})
	close(c)
	return c
}

// CLI runs `Binary args...` against the node's agent: RECLAIMNET_DATA_DIR
// is the node's data dir and, in namespace mode, the command runs in the
// node's network namespace (so `reclaim --now` finds the node's pinned maps
// and interface). The error includes stderr.
func (a *Agents) CLI(ctx context.Context, node string, args ...string) (string, error) {
	if !slices.Contains(a.names, node) {
		return "", fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	cmd := a.command(ctx, node, args...)
	cmd.Dir = a.cfg.Dir
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "RECLAIMNET_DATA_DIR=") }),
		"RECLAIMNET_DATA_DIR="+a.DataDir(node))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s: reclaimnet %s: %w: %s", node, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Call sends one control request to the node's agent over its socket.
func (a *Agents) Call(ctx context.Context, node string, req localapi.Request) (localapi.Response, error) {
	resp, err := localapi.Call(ctx, a.DataDir(node), req)
	if err != nil {
		return resp, fmt.Errorf("%s: %w", node, err)
	}
	if resp.Error != "" {
		return resp, fmt.Errorf("%s: %s: %s", node, req.Op, resp.Error)
	}
	return resp, nil
}

// Status is the node's /v1/status document (what `reclaimnet status --json`
// prints), read over its control socket.
func (a *Agents) Status(ctx context.Context, node string) (web.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := a.Call(ctx, node, localapi.Request{Op: localapi.OpStatus})
	if err != nil {
		return web.Status{}, err
	}
	var st web.Status
	if err := json.Unmarshal(resp.Document, &st); err != nil {
		return st, fmt.Errorf("%s: status document: %w", node, err)
	}
	return st, nil
}

// Leader returns the current Raft leader's node name, as the first running
// agent that knows one says.
func (a *Agents) Leader(ctx context.Context) (string, error) {
	var errs []error
	for _, n := range a.names {
		if !a.Running(n) {
			continue
		}
		st, err := a.Status(ctx, n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Cluster.Leader != "" {
			return string(st.Cluster.Leader), nil
		}
		errs = append(errs, fmt.Errorf("%s knows no leader", n))
	}
	if len(errs) == 0 {
		return "", errors.New("no agent running")
	}
	return "", fmt.Errorf("no leader: %w", errors.Join(errs...))
}

// WaitFormed waits until every given node's agent sees a leader, every
// given node alive with a Raft role, and at least three voters among them
// (one below three nodes), so the cluster survives one failure.
func (a *Agents) WaitFormed(ctx context.Context, nodes ...string) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(3 * time.Minute)
	defer deadline.Stop()
	for {
		why := a.formed(ctx, nodes)
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not formed (%s): %w", why, ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("cluster not formed within 3m: %s", why)
		case <-tick.C:
		}
	}
}

// formed returns "" when the cluster is formed as WaitFormed wants, else
// why not.
func (a *Agents) formed(ctx context.Context, nodes []string) string {
	for _, n := range nodes {
		a.mu.Lock()
		p := a.procs[n]
		a.mu.Unlock()
		if p == nil || p.exited() {
			return n + " is not running"
		}
		st, err := a.Status(ctx, n)
		if err != nil {
			return err.Error()
		}
		if st.Cluster.Leader == "" {
			return n + " knows no leader"
		}
		voters := 0
		for _, want := range nodes {
			i := slices.IndexFunc(st.Cluster.Members, func(m web.Member) bool { return string(m.ID) == want })
			if i < 0 {
				return fmt.Sprintf("%s does not list %s", n, want)
			}
			m := st.Cluster.Members[i]
			if m.State != web.MemberAlive {
				return fmt.Sprintf("%s sees %s %s", n, want, m.State)
			}
			switch m.RaftRole {
			case web.RaftNone, "":
				return fmt.Sprintf("%s sees %s outside Raft", n, want)
			case web.RaftLeader, web.RaftFollower, web.RaftCandidate:
				voters++
			}
		}
		if want := wantVoters(len(nodes)); voters < want {
			return fmt.Sprintf("%s sees %d voters among %d nodes, want %d", n, voters, len(nodes), want)
		}
	}
	return ""
}

// wantVoters is how many voters the coordinator keeps among n live nodes
// (raft.Config: 3 in a normal cluster, 1 below 3 nodes). Waiting for them
// means the cluster survives the loss of one voter, which a fresh cluster
// does only after its joiners are promoted (ServerStabilization, 10 s).
func wantVoters(n int) int {
	if n < 3 {
		return 1
	}
	return 3
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

// Dial connects from inside the node's namespace (from the root namespace
// in loopback mode).
func (a *Agents) Dial(ctx context.Context, node, network, addr string) (net.Conn, error) {
	var d net.Dialer
	if a.campus == nil {
		return d.DialContext(ctx, network, addr)
	}
	var conn net.Conn
	err := a.campus.RunIn(node, func() error {
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// Close stops every agent (SIGTERM, in parallel, SIGKILL after 60 s), then
// closes the campus and removes the pinned BPF objects the agents left (a
// kill-switch that was on stays pinned after its agent exits). Idempotent.
func (a *Agents) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(a.names))
	for i, n := range a.names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = a.Stop(n)
		}()
	}
	wg.Wait()
	if a.campus != nil {
		errs = append(errs, a.campus.Close())
	}
	if a.pinRoot != "" {
		if err := os.RemoveAll(a.pinRoot); err != nil {
			errs = append(errs, fmt.Errorf("remove pins %s: %w", a.pinRoot, err))
		}
	}
	return errors.Join(errs...)
}
