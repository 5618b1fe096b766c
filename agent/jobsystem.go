package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/enforce"
	"github.com/reclaimnet/reclaimnet/agent/jobs"
	"github.com/reclaimnet/reclaimnet/agent/supervisor"
	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/transfer"
)

// DefaultCacheSize caps the checkpoint store (--cache-size).
const DefaultCacheSize = Size(50 << 30)

// Paths inside the data dir.
const (
	ckptDirName = "ckpt"
	jobsDirName = "jobs"
)

// jobSystem is the node's job part: the checkpoint store, the transfer
// server and client, the supervisor and the job manager. It is a
// Subsystem (appended after enforcement, so enforcement outlives it).
//
// New opens the store and binds the transfer port (gossip announces it);
// Run hands it the coordinator (open), which builds the manager and
// starts serving transfers; Start runs the manager.
type jobSystem struct {
	a      *Agent
	store  *ckpt.Store
	udp    *net.UDPConn // the bound transfer port, until open serves it
	tcfg   transfer.Config
	client *transfer.Client
	sup    *supervisor.Supervisor
	devDir string           // where the GPUs' device nodes are
	srv    *transfer.Server // set by open
	// mgr is set by open; the leader loop (telemetry) may read it from
	// the moment the coordinator opens, before.
	mgr atomic.Pointer[jobs.Manager]

	mu        sync.Mutex
	cancel    context.CancelFunc
	done      chan error
	closeOnce sync.Once
}

// newJobSystem opens the store, binds the transfer port and builds the
// supervisor. Called by New before gossip starts, so the bound transfer
// port (0 in tests) is the one in the node's metadata.
func (a *Agent) newJobSystem() (_ *jobSystem, err error) {
	js := &jobSystem{a: a}
	defer func() {
		if err != nil {
			js.close()
		}
	}()
	size := a.cfg.CacheSize
	if size == 0 {
		size = DefaultCacheSize
	}
	log := a.logger.With("subsystem", "jobs")
	js.store, err = ckpt.Open(ckpt.Config{Root: filepath.Join(a.cfg.DataDir, ckptDirName), MaxBytes: int64(size), Logger: log})
	if err != nil {
		return nil, fmt.Errorf("checkpoint store: %w", err)
	}
	js.tcfg = transfer.DefaultConfig()
	if a.cfg.LocalTimings {
		js.tcfg = transfer.DefaultLocalConfig()
	}
	js.tcfg.TLS, js.tcfg.Store, js.tcfg.Logger = a.identity, js.store, log.With("part", "transfer")
	if js.client, err = transfer.NewClient(js.tcfg); err != nil {
		return nil, fmt.Errorf("transfer client: %w", err)
	}
	scfg := supervisor.DefaultConfig()
	if a.cfg.LocalTimings {
		scfg = supervisor.DefaultLocalConfig()
	}
	scfg.Logger = log.With("part", "supervisor")
	if scfg.Sandbox, err = a.cfg.sandboxConfig(); err != nil {
		return nil, err
	}
	js.devDir = scfg.Sandbox.DevDir
	for _, p := range scfg.Sandbox.ReadOnlyPaths {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("--guest-ro-path: %w", err)
		}
	}
	if js.sup, err = supervisor.New(scfg); err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	// Before this node takes any work: a job an earlier run of this agent
	// left behind (its processes outlived it) must not run beside the
	// instance the cluster starts now, here or elsewhere.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	killed, err := js.sup.KillLeftoverJobs(ctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("kill leftover jobs: %w", err)
	}
	if len(killed) > 0 {
		log.Warn("killed jobs left by an earlier run of this agent", "cgroups", killed)
	}
	addr := net.JoinHostPort(a.cfg.BindAddr, strconv.Itoa(a.cfg.TransferPort))
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err == nil {
		js.udp, err = net.ListenUDP("udp", ua)
	}
	if err != nil {
		return nil, fmt.Errorf("transfer listener on %s: %w", addr, err)
	}
	a.cfg.TransferPort = js.udp.LocalAddr().(*net.UDPAddr).Port
	return js, nil
}

// open builds the job manager on the coordinator and serves transfers
// into the store. Run calls it once the coordinator is open, before any
// handler or loop reads the manager.
func (js *jobSystem) open(c *raft.Coordinator) error {
	a := js.a
	jc := jobs.Config{Node: policy.NodeID(a.cfg.Name), Coord: c, Store: js.store,
		Client: js.client, Supervisor: js.sup, GPUs: gpuDevices(js.devDir, a.gpuIndices), WorkDir: filepath.Join(a.cfg.DataDir, jobsDirName), Logger: a.logger.With("subsystem", "jobs"),
		Since:     a.started, // no job starts before the state records this membership
		Observe:   a.hist.jobObservers(),
		SecretEnv: a.secretEnv}
	if a.jobsConfig != nil {
		a.jobsConfig(&jc)
	}
	mgr, err := jobs.New(jc)
	if err != nil {
		return fmt.Errorf("job manager: %w", err)
	}
	udp := js.udp
	js.udp = nil // the server owns it from here
	srv, err := transfer.Serve(udp, js.tcfg, mgr.TransferHooks())
	if err != nil {
		return fmt.Errorf("transfer listener: %w", err)
	}
	js.srv = srv
	js.mgr.Store(mgr)
	return nil
}

func (js *jobSystem) Name() string { return "jobs" }

// Start runs the manager until Stop; open ran before.
func (js *jobSystem) Start(ctx context.Context) error {
	mgr := js.mgr.Load()
	if mgr == nil {
		return errors.New("job system not open")
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	js.mu.Lock()
	js.cancel, js.done = cancel, done
	js.mu.Unlock()
	go func() { done <- mgr.Run(ctx) }()
	js.a.wg.Go(func() { js.flowLoop(ctx) })
	return nil
}

// Stop stops every job this node runs, then the transfer server, client
// and store.
func (js *jobSystem) Stop(ctx context.Context) error {
	js.mu.Lock()
	cancel, done := js.cancel, js.done
	js.mu.Unlock()
	var err error
	if cancel != nil {
		cancel()
		select {
		case err = <-done:
		case <-ctx.Done():
			err = fmt.Errorf("job manager did not stop: %w", ctx.Err())
		}
	}
	js.close()
	return err
}

// close releases the server, client, store and the sandbox's cgroups
// once (New's error path, Stop and closeAll may all call it).
func (js *jobSystem) close() {
	js.closeOnce.Do(func() {
		if js.sup != nil {
			if err := js.sup.Close(); err != nil {
				js.a.logger.Warn("close the job sandbox", "err", err)
			}
		}
		if js.srv != nil {
			js.srv.Close()
		}
		if js.udp != nil {
			js.udp.Close()
		}
		if js.client != nil {
			js.client.Close()
		}
		if js.store != nil {
			js.store.Close()
		}
	})
}

// flowLoop programs the kernel ceiling of each outgoing transfer that has
// an admitted flow (enforcement on only): key = the transfer's UDP source
// port and the receiver's transfer address, rate and ceiling the leader's.
func (js *jobSystem) flowLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e := js.a.Enforcer()
		if e == nil {
			continue
		}
		if err := e.ApplyFlows(js.flowBindings()); err != nil {
			js.a.logger.Warn("apply transfer flows", "err", err)
		}
	}
}

// flowBindings binds the outgoing transfers in flight to the admitted
// flows of the current decisions they carry (by flow ID).
func (js *jobSystem) flowBindings() []enforce.FlowBinding {
	return flowBindings(js.a.coord.State(), policy.NodeID(js.a.cfg.Name), js.mgr.Load().Transfers())
}

// flowBindings is the kernel flow table node me must hold for its
// transfers: one ceiling per transfer with an admitted flow, none at all
// with P3 off (ApplyFlows then removes any left).
func flowBindings(st *state.State, me policy.NodeID, transfers []jobs.TransferView) []enforce.FlowBinding {
	if !st.Protocols().Switches.P3 {
		return nil
	}
	var out []enforce.FlowBinding
	for _, tv := range transfers {
		if tv.Done || tv.LocalPort <= 0 || tv.LocalPort > 65535 {
			continue
		}
		rec, ok := st.Nodes[tv.To]
		if !ok {
			continue
		}
		dst, err := netip.ParseAddrPort(rec.TransferAddr)
		if err != nil {
			continue
		}
		if f, ok := st.Flow(tv.Flow); ok && f.From == me && f.To == tv.To && f.Rate > 0 {
			out = append(out, enforce.FlowBinding{LocalPort: uint16(tv.LocalPort), Dst: dst, Decision: f})
		}
	}
	return out
}

// Jobs is the node's job manager (nil on a node without one).
func (a *Agent) Jobs() *jobs.Manager {
	if a.jobs == nil {
		return nil
	}
	return a.jobs.mgr.Load()
}

// flowProgress is the progress of the flows this node sends: the
// leader's own telemetry, and every node's gossip report.
func (a *Agent) flowProgress() []state.FlowProgress {
	if m := a.Jobs(); m != nil {
		return m.FlowProgress()
	}
	return nil
}
