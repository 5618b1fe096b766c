package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/enforce"
	"github.com/reclaimnet/reclaimnet/bpf"
	"github.com/reclaimnet/reclaimnet/mesh"
)

// Kernel enforcement modes (Config.Enforce, --enforce).
const (
	// EnforceAuto enforces when the process may (root, or CAP_BPF and
	// CAP_NET_ADMIN), the node is not bound to loopback and the programs
	// attach; otherwise it runs without enforcement and says why.
	EnforceAuto = "auto"
	// EnforceOn makes any failure to enforce a fatal start-up error.
	EnforceOn = "on"
	// EnforceOff never loads the BPF programs.
	EnforceOff = "off"
)

// DefaultLinkCapacity is the node's access link assumed without
// --link-capacity: 1 Gbit/s (SPEC §0), bytes/s.
const DefaultLinkCapacity = DefaultAccessCapacity

// Rate is a data rate in bytes/s. It reads "1Gbit", "100Mbit", "125MB",
// "64MiB" or a plain number of bytes/s, from a flag or JSON.
type Rate float64

var rateUnits = []struct {
	suffix string
	bytes  float64 // bytes/s per unit
}{
	// Longest suffixes first, so "mbit" is not read as "bit".
	{"tbit", 1e12 / 8}, {"gbit", 1e9 / 8}, {"mbit", 1e6 / 8}, {"kbit", 1e3 / 8}, {"bit", 1.0 / 8},
	{"tib", 1 << 40}, {"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10},
	{"tb", 1e12}, {"gb", 1e9}, {"mb", 1e6}, {"kb", 1e3}, {"b", 1},
}

// ParseRate reads a positive rate such as "1Gbit" or "1Gbps" (bits/s,
// decimal), "125MB", "125MBps" or "64MiB" (bytes/s) or "125000000"
// (bytes/s). A trailing "/s" is allowed.
func ParseRate(s string) (Rate, error) {
	in := strings.TrimSuffix(strings.TrimSpace(s), "/s")
	switch {
	case strings.HasSuffix(in, "bps"): // Mbps: megabits
		in = strings.TrimSuffix(in, "bps") + "bit"
	case strings.HasSuffix(in, "Bps"): // MBps: megabytes
		in = strings.TrimSuffix(in, "Bps") + "B"
	}
	in = strings.ToLower(in)
	scale := 1.0
	for _, u := range rateUnits {
		if strings.HasSuffix(in, u.suffix) {
			in, scale = strings.TrimSpace(strings.TrimSuffix(in, u.suffix)), u.bytes
			break
		}
	}
	v, err := strconv.ParseFloat(in, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return 0, fmt.Errorf("rate %q: want a positive number with a unit such as 1Gbit, 100Mbit, 125MB or 64MiB", s)
	}
	return Rate(v * scale), nil
}

// String writes the rate in bits/s with the largest whole-ish unit.
func (r Rate) String() string {
	bits := float64(r) * 8
	for _, u := range []struct {
		name string
		bits float64
	}{{"Tbit", 1e12}, {"Gbit", 1e9}, {"Mbit", 1e6}, {"kbit", 1e3}} {
		if bits >= u.bits {
			return strconv.FormatFloat(bits/u.bits, 'f', -1, 64) + u.name
		}
	}
	return strconv.FormatFloat(bits, 'f', -1, 64) + "bit"
}

// Set implements flag.Value.
func (r *Rate) Set(s string) error {
	v, err := ParseRate(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// MarshalJSON writes the rate as a string ("1Gbit").
func (r Rate) MarshalJSON() ([]byte, error) { return json.Marshal(r.String()) }

// UnmarshalJSON reads a string with a unit or a number of bytes/s.
func (r *Rate) UnmarshalJSON(b []byte) error {
	var n float64
	if err := json.Unmarshal(b, &n); err == nil {
		if n <= 0 || math.IsInf(n, 0) {
			return fmt.Errorf("rate %v: want a positive number of bytes/s", n)
		}
		*r = Rate(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("rate: want a string like \"1Gbit\" or a number of bytes/s: %w", err)
	}
	return r.Set(s)
}

// enforcement is the kernel-enforcement subsystem as the agent runs it:
// an enforce.Enforcer that, in auto mode, is replaced by one with
// enforcement off when it cannot start, so the node runs anyway and says
// why.
type enforcement struct {
	mode   string
	cfg    enforce.Config // of the enforcing attempt
	logger *slog.Logger

	mu  sync.Mutex
	enf *enforce.Enforcer
}

func (e *enforcement) Name() string { return "enforce" }

// current is the Enforcer in use (the off one after an auto fallback).
func (e *enforcement) current() *enforce.Enforcer {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.enf
}

func (e *enforcement) Start(ctx context.Context) error {
	enf := e.current()
	err := enf.Start(ctx)
	if err == nil {
		if enf.Enabled() {
			e.logger.Info("kernel enforcement on", "iface", e.cfg.Iface, "link_capacity", Rate(e.cfg.Capacity).String(),
				"transfer_port", e.cfg.TransferPort, "pin_dir", e.pinDir())
		} else {
			st, _ := enf.Stats()
			e.logger.Warn("kernel enforcement off: no rate ceilings, no kill-switch, no measured bandwidth", "reason", st.OffReason)
		}
		return nil
	}
	if e.mode != EnforceAuto {
		return fmt.Errorf("--enforce %s: %w", e.mode, err)
	}
	off, offErr := offEnforcer(e.cfg, "auto: kernel programs did not start: "+err.Error())
	if offErr != nil {
		return offErr
	}
	if err := off.Start(ctx); err != nil {
		return err
	}
	e.mu.Lock()
	e.enf = off
	e.mu.Unlock()
	e.logger.Warn("kernel enforcement off: no rate ceilings, no kill-switch, no measured bandwidth", "reason", "auto: kernel programs did not start", "err", err)
	return nil
}

func (e *enforcement) Stop(ctx context.Context) error { return e.current().Stop(ctx) }

func (e *enforcement) pinDir() string {
	if e.cfg.PinDir != "" {
		return e.cfg.PinDir
	}
	dir, _ := bpf.DefaultPinDir(e.cfg.Node)
	return dir
}

// killSwitch is what the node reports of its kill-switch: disabled
// without enforcement, the kernel's mode otherwise (unknown if unreadable).
func (e *enforcement) killSwitch() (mesh.KillSwitchState, uint64) {
	enf := e.current()
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

// enforceStatus is GET /v1/enforce: the mode asked for and the
// subsystem's view (enabled, or why not; kill-switch, flows, rates).
type enforceStatus struct {
	Mode string `json:"mode"`
	enforce.Stats
}

func (e *enforcement) serveStatus(w http.ResponseWriter, r *http.Request) {
	st, err := e.current().Stats()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if !st.Enabled {
		st.KillSwitch = mesh.KillSwitchDisabled.String() // no kernel switch: not a fake "off"
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(enforceStatus{Mode: e.mode, Stats: st})
}

func offEnforcer(cfg enforce.Config, reason string) (*enforce.Enforcer, error) {
	cfg.Off, cfg.OffReason = true, reason
	enf, err := enforce.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("enforcement: %w", err)
	}
	return enf, nil
}

// enforceAddr is the address cluster traffic leaves from: the advertised
// one, else the bound one, else the one gossip picked for a wildcard bind.
func (a *Agent) enforceAddr() (netip.Addr, error) {
	for _, s := range []string{a.cfg.AdvertiseAddr, a.cfg.BindAddr} {
		if s == "" {
			continue
		}
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("address %q: %w", s, err)
		}
		if !ip.IsUnspecified() {
			return ip.Unmap(), nil
		}
	}
	ip, _ := a.mesh.LocalAddr()
	addr, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}, fmt.Errorf("gossip address %v is not an IP address", ip)
	}
	return addr.Unmap(), nil
}

// newEnforcement builds the enforcement subsystem from the config (after
// the mesh is up: the resolver reads gossip). Auto mode settles here on
// off when it can tell beforehand; "on" fails instead.
func (a *Agent) newEnforcement() (*enforcement, error) {
	mode := a.cfg.Enforce
	if mode == "" {
		mode = EnforceAuto
	}
	capacity := float64(a.cfg.LinkCapacity)
	if capacity <= 0 {
		capacity = DefaultLinkCapacity
	}
	_, gossipPort := a.mesh.LocalAddr()
	res := newBuildingResolver(a.mesh.Members, time.Now)
	cfg := enforce.Config{
		Node:         a.cfg.Name,
		PinDir:       a.cfg.BPFPinDir,
		Iface:        a.cfg.Iface,
		Capacity:     capacity,
		TransferPort: uint16(a.cfg.TransferPort),
		ControlPorts: []uint16{gossipPort, uint16(a.cfg.RaftPort)},
		Resolve:      res.Resolve,
		Buildings:    res.Buildings,
		Logger:       a.logger,
	}
	e := &enforcement{mode: mode, logger: a.logger.With("subsystem", "enforce")}
	offReason := ""
	switch mode {
	case EnforceOff:
		offReason = "--enforce off"
	case EnforceOn, EnforceAuto:
		if err := enforce.Check(); err != nil {
			if mode == EnforceOn {
				return nil, fmt.Errorf("--enforce on: %w (run as root, or use --enforce auto or off)", err)
			}
			offReason = "auto: " + err.Error()
			if a.cfg.Dev {
				offReason = "auto: --dev without root: " + err.Error()
			}
			break
		}
		if cfg.Iface == "" {
			addr, err := a.enforceAddr()
			if err == nil {
				if addr.IsLoopback() && mode == EnforceAuto {
					offReason = "auto: bound to loopback " + addr.String() + ", so cluster traffic never leaves this machine (--enforce on forces it onto lo)"
					break
				}
				cfg.Iface, err = enforce.InterfaceFor(addr)
			}
			if err != nil {
				if mode == EnforceOn {
					return nil, fmt.Errorf("--enforce on: %w (set --iface)", err)
				}
				offReason = "auto: " + err.Error() + " (set --iface)"
			}
		}
	default:
		return nil, fmt.Errorf("--enforce %q: want auto, on or off", mode)
	}
	e.cfg = cfg
	var err error
	if offReason != "" {
		e.enf, err = offEnforcer(cfg, offReason)
	} else {
		e.enf, err = enforce.New(cfg)
		if err != nil {
			err = fmt.Errorf("enforcement: %w", err)
		}
	}
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Enforcer is the node's kernel-enforcement subsystem (for the reclaim
// path, transfers and tests). After an auto fallback it is the one with
// enforcement off; Enabled tells.
func (a *Agent) Enforcer() *enforce.Enforcer {
	if a.enforce == nil {
		return nil
	}
	return a.enforce.current()
}

// buildingResolver maps destination addresses to buildings from gossip
// metadata for the enforcement sampler, which asks for every destination
// every 100 ms: it rebuilds its table from the member list at most once
// a second.
type buildingResolver struct {
	members func() []mesh.Member
	now     func() time.Time

	mu        sync.Mutex
	at        time.Time
	byAddr    map[netip.Addr]string
	buildings []string
}

func newBuildingResolver(members func() []mesh.Member, now func() time.Time) *buildingResolver {
	return &buildingResolver{members: members, now: now}
}

const resolverRefresh = time.Second

func (r *buildingResolver) refresh() {
	now := r.now()
	if r.byAddr != nil && now.Sub(r.at) < resolverRefresh && !now.Before(r.at) {
		return
	}
	byAddr := map[netip.Addr]string{}
	seen := map[string]bool{}
	var buildings []string
	for _, m := range r.members() {
		if m.MetaErr != nil {
			continue // a member we cannot read tells us no building
		}
		if ip, ok := netip.AddrFromSlice(m.Addr); ok {
			byAddr[ip.Unmap()] = m.Meta.Building
		}
		if (m.State == mesh.StateAlive || m.State == mesh.StateSuspect) && !seen[m.Meta.Building] {
			seen[m.Meta.Building] = true
			buildings = append(buildings, m.Meta.Building)
		}
	}
	slices.Sort(buildings)
	r.at, r.byAddr, r.buildings = now, byAddr, buildings
}

// Resolve returns the building of the member with address ip; false for
// an address outside the cluster.
func (r *buildingResolver) Resolve(ip netip.Addr) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refresh()
	b, ok := r.byAddr[ip.Unmap()]
	return b, ok
}

// Buildings lists the buildings of live members, sorted.
func (r *buildingResolver) Buildings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refresh()
	return slices.Clone(r.buildings)
}

// registerEnforcement creates the subsystem, puts it first in Subsystems
// (it starts before the jobs whose ports it protects and stops after
// them) and serves GET /v1/enforce.
func (a *Agent) registerEnforcement() error {
	e, err := a.newEnforcement()
	if err != nil {
		return err
	}
	a.enforce = e
	a.Subsystems = append([]Subsystem{e}, a.Subsystems...)
	a.HTTPMux.HandleFunc("GET /v1/enforce", e.serveStatus)
	return nil
}
