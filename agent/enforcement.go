package agent

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/enforce"
)

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

// registerEnforcement builds the enforcement subsystem from the config
// (after the mesh is up: the resolver reads gossip), puts it first in
// Subsystems (it starts before the jobs whose ports it protects and stops
// after them) and serves GET /v1/enforce.
func (a *Agent) registerEnforcement() error {
	capacity := float64(a.cfg.LinkCapacity)
	if capacity <= 0 {
		capacity = DefaultLinkCapacity
	}
	_, gossipPort := a.mesh.LocalAddr()
	res := enforce.NewBuildingResolver(a.mesh.Members, time.Now)
	e, err := enforce.NewSubsystem(enforce.Config{
		Node:         a.cfg.Name,
		PinDir:       a.cfg.BPFPinDir,
		Iface:        a.cfg.Iface,
		Capacity:     capacity,
		TransferPort: uint16(a.cfg.TransferPort),
		ControlPorts: []uint16{gossipPort, uint16(a.cfg.RaftPort)},
		Resolve:      res.Resolve,
		Buildings:    res.Buildings,
		Logger:       a.logger,
	}, enforce.Options{Mode: a.cfg.Enforce, Dev: a.cfg.Dev, Addr: a.enforceAddr, Logger: a.logger})
	if err != nil {
		return err
	}
	a.enforce = e
	a.Subsystems = append([]Subsystem{e}, a.Subsystems...)
	a.HTTPMux.Handle("GET /v1/enforce", e)
	return nil
}

// Enforcer is the node's kernel enforcement in use (for the reclaim path,
// transfers and tests). After an auto fallback it is the one with
// enforcement off; Enabled tells.
func (a *Agent) Enforcer() *enforce.Enforcer {
	if a.enforce == nil {
		return nil
	}
	return a.enforce.Current()
}
