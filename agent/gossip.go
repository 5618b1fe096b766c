package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/gpu"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

func (a *Agent) startMesh() error {
	mc := mesh.DefaultConfig()
	if a.cfg.LocalTimings {
		mc = mesh.DefaultLocalConfig()
	}
	mc.Name = a.cfg.Name
	mc.BindAddr = a.cfg.BindAddr
	mc.BindPort = a.cfg.GossipPort
	mc.AdvertiseAddr = a.cfg.AdvertiseAddr
	mc.GossipKeys = a.gossipKeys
	mc.Logger = a.logger.With("subsystem", "mesh")
	// Every node may vote for now: raft.Member has no eligibility field
	// yet, so a non-voter role would not be honoured.
	role := mesh.RoleVoterEligible
	model, count := a.discoverGPUs()
	mc.Meta = mesh.Meta{
		GPUs:          uint16(min(count, 65535)),
		GPUModel:      mesh.Clip(model.Model, mesh.MaxGPUModelLen),
		GPUVRAMMiB:    uint32(min(model.VRAM>>20, 1<<32-1)),
		GPUCapability: uint8(min(model.Capability*10+0.5, 255)),
		Building:      a.cfg.Building,
		RaftPort:      uint16(a.cfg.RaftPort),
		TransferPort:  uint16(a.cfg.TransferPort),
		HTTPPort:      uint16(a.httpPort()),
		Role:          role,
		Started:       a.started,
		Storage:       a.cfg.Storage(),
		Lab:           a.cfg.Lab,
		Pool:          a.cfg.Pool,
		Paths:         a.announcedPaths(),
	}
	if p, err := a.cfg.Owner.Policy(); err == nil { // checked by Validate
		mc.Meta.Lending = mesh.Clip(p.Schedule.String(), mesh.MaxLendingLen)
	}
	a.meta = mc.Meta
	m, err := mesh.Create(mc)
	if err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	a.mesh = m
	return nil
}

// discoverGPUs returns the node's GPU kind and count: the declared ones,
// else what NVML or nvidia-smi report, else none.
func (a *Agent) discoverGPUs() (policy.GPU, int) {
	var specs gpu.SpecList
	for _, g := range a.cfg.GPUs {
		specs.Set(g) // checked by Validate
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inv, err := gpu.Auto(gpu.Options{Declared: specs.Devices}).Discover(ctx)
	if err != nil {
		a.logger.Warn("gpu discovery", "err", err)
		return policy.GPU{}, 0
	}
	model, count := inv.Summary()
	a.gpus = count
	for _, d := range inv.Devices {
		a.gpuIndices = append(a.gpuIndices, d.Index)
	}
	return model, count
}

// Mesh is the node's gossip layer (for subsystems and tests).
func (a *Agent) Mesh() *mesh.Mesh { return a.mesh }

// Join asks gossip to join peers (bare hosts use the default gossip port).
func (a *Agent) Join(peers []string) (int, error) {
	addrs := make([]string, len(peers))
	for i, p := range peers {
		addrs[i] = joinAddr(p)
	}
	n, err := a.mesh.Join(addrs)
	if err != nil {
		return 0, fmt.Errorf("join %s: %w", strings.Join(peers, ", "), err)
	}
	a.mu.Lock()
	a.joined = true
	a.mu.Unlock()
	return n, nil
}

// retryJoin joins the configured peers, retrying every 2 s until one
// answers (a node restarted before its peers, or peers not up yet). After
// a failed round it also tries the members its replicated state knows, so
// a restarted node finds the cluster when the peer it first joined
// through is gone.
func (a *Agent) retryJoin(ctx context.Context) {
	delay := 2 * time.Second
	peers := a.cfg.Join
	for {
		n, err := a.Join(peers)
		if err == nil {
			a.logger.Info("joined cluster", "contacted", n)
			return
		}
		a.logger.Warn("join failed; retrying", "err", err, "in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		peers = slices.Clone(a.cfg.Join)
		for _, p := range a.knownPeers() {
			if !slices.Contains(peers, p) {
				peers = append(peers, p)
			}
		}
	}
}

// knownPeers are the gossip addresses of the other active, admitted nodes
// in the replicated state.
func (a *Agent) knownPeers() []string {
	var out []string
	for id, n := range a.coord.State().Nodes {
		if string(id) != a.cfg.Name && n.State == state.NodeActive && n.Admitted && n.GossipAddr != "" {
			out = append(out, n.GossipAddr)
		}
	}
	slices.Sort(out)
	return out
}

// eventLoop takes gossip events off memberlist's goroutines; the leader
// reconciles the Raft configuration on each, and every few seconds anyway
// (events may be dropped when the agent lags).
func (a *Agent) eventLoop(ctx context.Context) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	events := a.mesh.Events()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			a.logger.Info("member "+ev.Kind.String(), "member", ev.Member.Name, "building", ev.Member.Meta.Building)
			if ev.Kind == mesh.EventJoin && ev.Member.Name != a.cfg.Name {
				a.mu.Lock()
				a.joined = true
				a.mu.Unlock()
			}
		case <-t.C:
		}
		a.reconcile()
	}
}

func (a *Agent) reconcile() {
	if a.coord == nil || !a.coord.IsLeader() {
		return
	}
	if err := a.coord.Reconcile(a.telemetry.Members(), time.Now()); err != nil {
		a.logger.Warn("reconcile raft membership", "err", err)
	}
}
