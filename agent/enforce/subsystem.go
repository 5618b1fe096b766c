package enforce

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"

	"github.com/reclaimnet/reclaimnet/bpf"
	"github.com/reclaimnet/reclaimnet/mesh"
)

// Modes the node runs enforcement in (--enforce).
const (
	// ModeAuto enforces when the process may (root, or CAP_BPF and
	// CAP_NET_ADMIN), the node is not bound to loopback and the programs
	// attach; otherwise it runs without enforcement and says why.
	ModeAuto = "auto"
	// ModeOn makes any failure to enforce a fatal start-up error.
	ModeOn = "on"
	// ModeOff never loads the BPF programs.
	ModeOff = "off"
)

// Options say how the node runs enforcement.
type Options struct {
	// Mode is ModeAuto (also ""), ModeOn or ModeOff.
	Mode string
	// Dev names --dev in the reason auto mode gives for running off.
	Dev bool
	// Addr is the address cluster traffic leaves from; with Config.Iface
	// empty, the interface that holds it is enforced.
	Addr func() (netip.Addr, error)
	// Logger gets the subsystem's start-up line.
	Logger *slog.Logger
}

// Subsystem is kernel enforcement as the node runs it: an Enforcer that,
// in auto mode, is replaced by one with enforcement off when it cannot
// start, so the node runs anyway and says why. It is an agent.Subsystem,
// serves GET /v1/enforce (ServeHTTP) and is the reclaim flow's
// kill-switch.
type Subsystem struct {
	mode   string
	cfg    Config // of the enforcing attempt
	logger *slog.Logger

	mu  sync.Mutex
	enf *Enforcer
}

// NewSubsystem builds the subsystem from cfg. Auto mode settles here on
// off when it can tell beforehand (no privilege, loopback, no interface);
// ModeOn fails instead.
func NewSubsystem(cfg Config, opt Options) (*Subsystem, error) {
	mode := opt.Mode
	if mode == "" {
		mode = ModeAuto
	}
	logger := opt.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Subsystem{mode: mode, logger: logger.With("subsystem", "enforce")}
	offReason := ""
	switch mode {
	case ModeOff:
		offReason = "--enforce off"
	case ModeOn, ModeAuto:
		if err := Check(); err != nil {
			if mode == ModeOn {
				return nil, fmt.Errorf("--enforce on: %w (run as root, or use --enforce auto or off)", err)
			}
			offReason = "auto: " + err.Error()
			if opt.Dev {
				offReason = "auto: --dev without root: " + err.Error()
			}
			break
		}
		if cfg.Iface == "" {
			var addr netip.Addr
			err := fmt.Errorf("no address to find the interface by")
			if opt.Addr != nil {
				addr, err = opt.Addr()
			}
			if err == nil {
				if addr.IsLoopback() && mode == ModeAuto {
					offReason = "auto: bound to loopback " + addr.String() + ", so cluster traffic never leaves this machine (--enforce on forces it onto lo)"
					break
				}
				cfg.Iface, err = InterfaceFor(addr)
			}
			if err != nil {
				if mode == ModeOn {
					return nil, fmt.Errorf("--enforce on: %w (set --iface)", err)
				}
				offReason = "auto: " + err.Error() + " (set --iface)"
			}
		}
	default:
		return nil, fmt.Errorf("--enforce %q: want auto, on or off", mode)
	}
	s.cfg = cfg
	var err error
	if offReason != "" {
		s.enf, err = offEnforcer(cfg, offReason)
	} else if s.enf, err = New(cfg); err != nil {
		err = fmt.Errorf("enforcement: %w", err)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

func offEnforcer(cfg Config, reason string) (*Enforcer, error) {
	cfg.Off, cfg.OffReason = true, reason
	enf, err := New(cfg)
	if err != nil {
		return nil, fmt.Errorf("enforcement: %w", err)
	}
	return enf, nil
}

// Name is the subsystem's name.
func (s *Subsystem) Name() string { return "enforce" }

// Current is the Enforcer in use (the off one after an auto fallback;
// Enabled tells).
func (s *Subsystem) Current() *Enforcer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.enf
}

// Start starts the Enforcer; in auto mode one that fails is replaced by
// one with enforcement off.
func (s *Subsystem) Start(ctx context.Context) error {
	enf := s.Current()
	err := enf.Start(ctx)
	if err == nil {
		if enf.Enabled() {
			s.logger.Info("kernel enforcement on", "iface", s.cfg.Iface, "link_capacity_bytes_per_s", s.cfg.Capacity,
				"transfer_port", s.cfg.TransferPort, "pin_dir", s.pinDir())
		} else {
			st, _ := enf.Stats()
			s.logger.Warn("kernel enforcement off: no rate ceilings, no kill-switch, no measured bandwidth", "reason", st.OffReason)
		}
		return nil
	}
	if s.mode != ModeAuto {
		return fmt.Errorf("--enforce %s: %w", s.mode, err)
	}
	off, offErr := offEnforcer(s.cfg, "auto: kernel programs did not start: "+err.Error())
	if offErr != nil {
		return offErr
	}
	if err := off.Start(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.enf = off
	s.mu.Unlock()
	s.logger.Warn("kernel enforcement off: no rate ceilings, no kill-switch, no measured bandwidth", "reason", "auto: kernel programs did not start", "err", err)
	return nil
}

// Stop stops the Enforcer in use.
func (s *Subsystem) Stop(ctx context.Context) error { return s.Current().Stop(ctx) }

func (s *Subsystem) pinDir() string {
	if s.cfg.PinDir != "" {
		return s.cfg.PinDir
	}
	dir, _ := bpf.DefaultPinDir(s.cfg.Node)
	return dir
}

// Enabled reports whether the kernel enforces (the kill-switch works).
func (s *Subsystem) Enabled() bool { return s.Current().Enabled() }

// SetKillSwitch sets the kill-switch mode (ErrOff without enforcement).
func (s *Subsystem) SetKillSwitch(mode bpf.Mode) error { return s.Current().SetKillSwitch(mode) }

// KillSwitch is what the node reports of its kill-switch, with the
// packets it dropped: disabled without enforcement, the kernel's mode
// otherwise (unknown if unreadable).
func (s *Subsystem) KillSwitch() (mesh.KillSwitchState, uint64) {
	enf := s.Current()
	if !enf.Enabled() {
		return mesh.KillSwitchDisabled, 0
	}
	st, err := enf.Stats()
	if err != nil || !st.Enabled {
		return mesh.KillSwitchUnknown, 0
	}
	switch st.KillSwitch {
	case "off":
		return mesh.KillSwitchOff, st.KillSwitchDrops
	case "soft":
		return mesh.KillSwitchSoft, st.KillSwitchDrops
	case "hard":
		return mesh.KillSwitchHard, st.KillSwitchDrops
	}
	return mesh.KillSwitchUnknown, st.KillSwitchDrops
}

// Status is GET /v1/enforce: the mode asked for and the subsystem's view
// (enabled, or why not; kill-switch, flows, rates).
type Status struct {
	Mode string `json:"mode"`
	Stats
}

// ServeHTTP serves GET /v1/enforce.
func (s *Subsystem) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st, err := s.Current().Stats()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if !st.Enabled {
		st.KillSwitch = mesh.KillSwitchDisabled.String() // no kernel switch: not a fake "off"
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(Status{Mode: s.mode, Stats: st})
}
