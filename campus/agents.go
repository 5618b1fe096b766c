package campus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
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
	// Dir is the work directory: <Dir>/<node>/{data,tls,home},
	// <Dir>/<node>.log, the CA in <Dir>/ca, and <Dir>/home, where each node
	// sees its own home (Agents.HomePath).
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
	// NodeArgs are appended to one node's command line, after ExtraArgs
	// (an owner's own policy: lending windows; the storage role).
	NodeArgs map[string][]string
	// Log receives progress messages (nil: discard).
	Log *slog.Logger
	// Progress, when set, is told each start-up step as it begins, in
	// words for a person watching (the demo prints them): building the
	// namespaces, making credentials, starting the agents, and while the
	// cluster forms what it still waits for (when that changes, at most
	// once a second, and every 5 s when it does not).
	Progress func(step string)

	// Enforce is the agents' --enforce in namespace mode: "" means "on"
	// (the campus is root: enforcement that cannot start is an error, not
	// a silent fallback). Loopback mode always uses "off".
	Enforce string
	// GPUs are the --gpu declarations of every agent (nil:
	// DefaultAgentGPUs).
	GPUs []string
	// FixedLoad is the load (per CPU) every agent reports (--fixed-load):
	// all agents of a campus share one host, whose load average says
	// nothing about a node (and on a busy machine exceeds P2's θ, so no
	// job would ever be placed). Negative: the host's load. 0 means 0.1.
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

	mu     sync.Mutex
	procs  map[string]*agentProc
	ports  map[string]agentPorts // loopback: the ports a node first bound, reused on restart
	closed bool
	// nodeArgs replace a node's AgentsConfig.NodeArgs from its next start
	// on (SetNodeArgs).
	nodeArgs map[string][]string
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
// certificates and a gossip key, starts every agent in turn (each agent
// gets --building from the topology and joins every agent started before
// it), and returns once a Raft leader exists and every member is alive in
// the cluster view (with three voters, or one below three nodes:
// WaitFormed). On failure everything started is stopped again.
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
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			cfg.Progress(fmt.Sprintf(format, args...))
		}
	}
	if !cfg.Loopback {
		progress("building the campus: a network namespace per node, building switch and the core, links shaped to %s (access) and %s (uplinks)",
			cfg.Topology.AccessRate, cfg.Topology.UplinkRate)
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
	a.fixedArg = fixedLoadArgs(cfg.FixedLoad)
	// Credentials: one gossip key, one CA, one certificate per node.
	progress("making the cluster's gossip key, a CA and a TLS certificate for each of the %d nodes", len(a.names))
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
	if err := os.MkdirAll(a.HomePath(), 0o755); err != nil {
		return fmt.Errorf("home mount point: %w", err)
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
		if err := os.MkdirAll(a.HomeDir(n), 0o700); err != nil {
			return fmt.Errorf("home dir of %s: %w", n, err)
		}
	}
	// The first node bootstraps; the others join it one after another,
	// each joining every agent started before it: its join is a state
	// exchange with each of them, so every pair of agents learns of the
	// other directly. Started together, agents joining the same node in
	// the same instant learn of one another only from gossip, and one
	// that misses an announcement lists that member dead until a periodic
	// state exchange, 15–30 s later.
	progress("starting %s, which bootstraps the Raft cluster alone", a.names[0])
	if err := a.launch(ctx, a.names[0], nil); err != nil {
		return err
	}
	progress("starting the other %d agents, each joining the agents started before it by gossip", len(a.names)-1)
	for i, n := range a.names[1:] {
		var join []string
		for _, m := range a.names[:i+1] {
			join = append(join, a.gossipAddr(m))
		}
		if err := a.launch(ctx, n, join); err != nil {
			return err
		}
	}
	cfg.Log.Info("agents started; waiting for the cluster to form", "agents", len(a.names))
	progress("waiting for the cluster to form: every agent alive in everyone's view, a Raft leader, %d voters", wantVoters(len(a.names)))
	return a.waitFormed(ctx, a.names, func(why string) { progress("still waiting: %s", why) })
}

// fixedLoadArgs is the --fixed-load flag for AgentsConfig.FixedLoad.
func fixedLoadArgs(load float64) []string {
	if load < 0 {
		return nil
	}
	if load == 0 {
		load = 0.1
	}
	return []string{"--fixed-load", strconv.FormatFloat(load, 'g', -1, 64)}
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
