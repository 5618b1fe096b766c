package enforce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/bpf"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
)

// Defaults of Config.
const (
	DefaultSampleEvery  = 100 * time.Millisecond // docs/design.md P1.7
	DefaultPublishEvery = time.Second
)

// ErrOff is returned by the calls that need the kernel programs when
// enforcement is off (Config.Off) or the subsystem is not running.
var ErrOff = errors.New("kernel enforcement is off")

// Config configures an Enforcer.
type Config struct {
	// Node is the node's gossip name; the pin directory derives from it.
	Node string
	// Iface is the network interface the programs attach to.
	Iface string
	// PinDir overrides bpf.DefaultPinDir(Node).
	PinDir string
	// Attach selects TCX, cls_bpf or TCX with fallback (the default).
	Attach bpf.AttachMode
	// Capacity is the node's link capacity, bytes/s.
	Capacity float64
	// Bandwidth overrides policy.DefaultBandwidthConfig(Capacity).
	Bandwidth *policy.BandwidthConfig
	// PerBuildingOnly feeds each building's estimator only the traffic
	// to that building instead of the node's whole non-migration egress.
	PerBuildingOnly bool

	// TransferPort is the QUIC transfer listener (UDP); 0 leaves it out.
	TransferPort uint16
	// JobPorts are the jobs' service ports known at start.
	JobPorts []bpf.Port
	// ControlPorts are the gossip and Raft ports: never protected (TCP or
	// UDP); a protected port among them is refused.
	ControlPorts []uint16

	// Resolve maps a destination address to its building (from gossip
	// metadata); false for an address outside the cluster, whose traffic
	// still counts against the access link.
	Resolve func(netip.Addr) (building string, ok bool)
	// Buildings lists the buildings to publish an estimate for even with
	// no traffic to them yet; nil publishes only buildings seen.
	Buildings func() []string
	// Publish receives the estimates every PublishEvery, sorted by
	// building, at most mesh.MaxBandwidthEntries. Called from the
	// sampler's goroutine; nil publishes nothing.
	Publish func([]mesh.BuildingBandwidth)

	// SampleEvery and PublishEvery default to 100 ms and 1 s.
	SampleEvery, PublishEvery time.Duration

	// Off runs the subsystem without kernel enforcement; OffReason says
	// why (shown by Stats).
	Off       bool
	OffReason string

	// Logger receives start, stop and sampling errors; nil discards them.
	Logger *slog.Logger
}

func (c *Config) protected() []bpf.Port {
	var ports []bpf.Port
	if c.TransferPort != 0 {
		ports = append(ports, bpf.Port{Proto: bpf.ProtoUDP, Number: c.TransferPort})
	}
	return append(ports, c.JobPorts...)
}

func (c *Config) checkPorts(ports []bpf.Port) error {
	for _, p := range ports {
		if p.Number == 0 || (p.Proto != bpf.ProtoTCP && p.Proto != bpf.ProtoUDP) {
			return fmt.Errorf("protected port %s: need TCP or UDP and a non-zero port", p)
		}
		for _, cp := range c.ControlPorts {
			if p.Number == cp {
				return fmt.Errorf("protected port %s is a control-plane (gossip/Raft) port: the kill-switch must leave it alone", p)
			}
		}
	}
	return nil
}

func (c *Config) validate() error {
	if c.Off {
		return nil
	}
	if c.Iface == "" {
		return errors.New("enforce config: interface name missing")
	}
	if c.PinDir == "" && c.Node == "" {
		return errors.New("enforce config: node name (or pin directory) missing")
	}
	bw := policy.DefaultBandwidthConfig(c.Capacity)
	if c.Bandwidth != nil {
		bw = *c.Bandwidth
	}
	if err := bw.Validate(); err != nil {
		return fmt.Errorf("enforce config: %w", err)
	}
	if c.Resolve == nil {
		return errors.New("enforce config: destination resolver missing")
	}
	if c.SampleEvery < 0 || c.PublishEvery < 0 {
		return errors.New("enforce config: negative sampling or publishing period")
	}
	return c.checkPorts(c.protected())
}

// Enforcer is the kernel-enforcement subsystem of one node. Its methods are
// safe for concurrent use.
type Enforcer struct {
	cfg    Config
	logger *slog.Logger

	mu      sync.Mutex // guards the fields below and serialises flow updates
	bpf     *bpf.Enforcer
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopped bool

	smp *sampler // its own lock
}

// New checks cfg and returns an Enforcer that attaches nothing until Start.
func New(cfg Config) (*Enforcer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.SampleEvery == 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	if cfg.PublishEvery == 0 {
		cfg.PublishEvery = DefaultPublishEvery
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := &Enforcer{cfg: cfg, logger: logger.With("subsystem", "enforce")}
	if !cfg.Off {
		bw := policy.DefaultBandwidthConfig(cfg.Capacity)
		if cfg.Bandwidth != nil {
			bw = *cfg.Bandwidth
		}
		e.smp = newSampler(bw, cfg.Resolve, cfg.PerBuildingOnly)
	}
	return e, nil
}

// Name implements agent.Subsystem.
func (e *Enforcer) Name() string { return "enforce" }

// Enabled reports whether the kernel programs are enforcing.
func (e *Enforcer) Enabled() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bpf != nil
}

// Check reports whether this process can load and attach BPF programs:
// nil for root or a process holding CAP_BPF (or CAP_SYS_ADMIN) and
// CAP_NET_ADMIN, otherwise an error naming what is missing. It does not
// probe the kernel; Start does.
func Check() error {
	if os.Geteuid() == 0 {
		return nil
	}
	caps, err := effectiveCaps()
	if err != nil {
		return fmt.Errorf("kernel enforcement needs root: %w", err)
	}
	const capNetAdmin, capSysAdmin, capBPF = 12, 21, 39
	var missing []string
	if caps&(1<<capBPF) == 0 && caps&(1<<capSysAdmin) == 0 {
		missing = append(missing, "CAP_BPF")
	}
	if caps&(1<<capNetAdmin) == 0 {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if len(missing) > 0 {
		return fmt.Errorf("kernel enforcement needs root or %s (not held by this process)", strings.Join(missing, "+"))
	}
	return nil
}

func effectiveCaps() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read capabilities: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("parse CapEff %q: %w", v, err)
			}
			return caps, nil
		}
	}
	return 0, errors.New("no CapEff line in /proc/self/status")
}

// Start attaches the programs, protects the ports and starts the sampler.
// With Config.Off it does nothing. Its error names what is missing (root,
// kernel support, bpffs, the interface).
func (e *Enforcer) Start(ctx context.Context) error {
	if e.cfg.Off {
		return nil // the Subsystem logs why
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.bpf != nil || e.stopped {
		return errors.New("enforce: already started")
	}
	if err := Check(); err != nil {
		return err
	}
	dir := e.cfg.PinDir
	if dir == "" {
		d, err := bpf.DefaultPinDir(e.cfg.Node)
		if err != nil {
			return fmt.Errorf("pin directory for node %q: %w", e.cfg.Node, err)
		}
		dir = d
	}
	enf, err := bpf.Open(bpf.Config{Iface: e.cfg.Iface, PinDir: dir, Attach: e.cfg.Attach, Logger: e.logger})
	if err != nil {
		switch {
		case errors.Is(err, bpf.ErrPermission):
			return fmt.Errorf("kernel enforcement on %s: needs root (CAP_BPF and CAP_NET_ADMIN): %w", e.cfg.Iface, err)
		case errors.Is(err, bpf.ErrUnsupported):
			return fmt.Errorf("kernel enforcement on %s: this kernel cannot run it (TCX or clsact/cls_bpf, BPF spin locks): %w", e.cfg.Iface, err)
		case errors.Is(err, bpf.ErrNoBPFFS):
			return fmt.Errorf("kernel enforcement on %s: no bpffs for %s: %w", e.cfg.Iface, dir, err)
		}
		return fmt.Errorf("kernel enforcement on %s: %w", e.cfg.Iface, err)
	}
	if ports := e.cfg.protected(); len(ports) > 0 {
		if err := enf.ProtectPorts(ports...); err != nil {
			enf.Close()
			return fmt.Errorf("protect ports: %w", err)
		}
	}
	mode, err := enf.KillSwitch()
	if err != nil {
		enf.Close()
		return fmt.Errorf("read kill-switch: %w", err)
	}
	e.bpf = enf
	// The sampler belongs to the Enforcer, not to ctx: Stop ends it.
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel = cancel
	e.wg.Go(func() { e.sampleLoop(loopCtx, enf) })
	e.logger.Info("kernel enforcement on", "iface", e.cfg.Iface, "pin_dir", dir,
		"attached", enf.Attached(), "kill_switch", mode, "protected", e.cfg.protected())
	return nil
}

// Stop ends the sampler. With the kill-switch off it detaches the programs
// and removes the pins: the node is left unenforced. With the switch on it
// leaves the programs attached and pinned, so the switch holds after the
// agent exits until the owner turns it off ('reclaimnet killswitch off') or
// a restarted agent takes the pins over. A later Start is refused.
func (e *Enforcer) Stop(ctx context.Context) error {
	e.mu.Lock()
	e.stopped = true
	cancel, enf := e.cancel, e.bpf
	e.cancel, e.bpf = nil, nil
	e.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("stop enforcement: sampler still running: %w", ctx.Err())
	}
	if enf == nil {
		return nil
	}
	// A kill-switch that is on is the owner's (or a reclaim's) decision: it
	// outlives the agent. The pinned links keep the programs attached after
	// this process exits; only the map handles are released here.
	if mode, err := enf.KillSwitch(); err == nil && mode != bpf.ModeOff {
		e.logger.Info("kill-switch left on after stop", "mode", mode, "pin_dir", enf.PinDir())
		if err := enf.Maps.Close(); err != nil {
			return fmt.Errorf("release enforcement maps: %w", err)
		}
		return nil
	}
	if err := enf.Close(); err != nil {
		return fmt.Errorf("detach enforcement: %w", err)
	}
	return nil
}

// maps returns the running enforcer or ErrOff.
func (e *Enforcer) maps() (*bpf.Enforcer, error) {
	if e.bpf == nil {
		if e.cfg.Off {
			return nil, fmt.Errorf("%w (%s)", ErrOff, e.cfg.OffReason)
		}
		return nil, fmt.Errorf("%w: not started", ErrOff)
	}
	return e.bpf, nil
}

// SetKillSwitch sets the kill-switch mode (the reclaim path).
func (e *Enforcer) SetKillSwitch(mode bpf.Mode) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	enf, err := e.maps()
	if err != nil {
		return err
	}
	if mode > bpf.ModeHard {
		return fmt.Errorf("unknown kill-switch mode %d", mode)
	}
	if err := enf.SetKillSwitch(mode); err != nil {
		return fmt.Errorf("set kill-switch %s: %w", mode, err)
	}
	e.logger.Info("kill-switch set", "mode", mode)
	return nil
}

// ProtectJobPorts adds job service ports to the kill-switch's set.
func (e *Enforcer) ProtectJobPorts(ports ...bpf.Port) error {
	if err := e.cfg.checkPorts(ports); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	enf, err := e.maps()
	if err != nil {
		return err
	}
	return enf.ProtectPorts(ports...)
}

// UnprotectJobPorts removes job service ports from the kill-switch's set;
// the transfer port stays protected.
func (e *Enforcer) UnprotectJobPorts(ports ...bpf.Port) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	enf, err := e.maps()
	if err != nil {
		return err
	}
	var drop []bpf.Port
	for _, p := range ports {
		if p.Proto == bpf.ProtoUDP && p.Number == e.cfg.TransferPort {
			continue
		}
		drop = append(drop, p)
	}
	return enf.UnprotectPorts(drop...)
}

// ObserveTransfer reports a transfer towards building that was assigned
// assigned bytes/s and achieved achieved bytes/s; a shortfall lowers the
// building's estimate (docs/design.md P1.7). With enforcement off it does nothing.
func (e *Enforcer) ObserveTransfer(building string, assigned, achieved float64) {
	if e.smp == nil || building == "" {
		return
	}
	e.smp.observeTransfer(time.Now(), building, assigned, achieved)
}

// sampleLoop samples the counters until ctx ends.
func (e *Enforcer) sampleLoop(ctx context.Context, enf *bpf.Enforcer) {
	tick := time.NewTicker(e.cfg.SampleEvery)
	defer tick.Stop()
	var lastPublish time.Time
	failing := false
	for {
		now := time.Now()
		counters, err := enf.Counters()
		if err != nil {
			if !failing {
				e.logger.Warn("read egress counters", "err", err)
			}
			failing = true
		} else {
			failing = false
			var known []string
			if e.cfg.Buildings != nil {
				known = e.cfg.Buildings()
			}
			e.smp.observe(now, counters, known)
			if e.cfg.Publish != nil && now.Sub(lastPublish) >= e.cfg.PublishEvery {
				lastPublish = now
				if bw := e.smp.estimates(now); len(bw) > 0 {
					e.cfg.Publish(bw)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
