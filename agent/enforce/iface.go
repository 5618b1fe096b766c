package enforce

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/reclaimnet/reclaimnet/mesh"
)

// InterfaceFor returns the name of the interface that holds addr (the
// agent's bind or advertise address), the one its cluster traffic leaves
// through.
func InterfaceFor(addr netip.Addr) (string, error) {
	addr = addr.Unmap()
	if !addr.IsValid() || addr.IsUnspecified() {
		return "", fmt.Errorf("interface for %v: need a concrete address (set --advertise or the interface)", addr)
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("list interfaces: %w", err)
	}
	for _, ifc := range ifaces {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if pfx, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(pfx.IP); ok && ip.Unmap() == addr {
					return ifc.Name, nil
				}
			}
		}
	}
	return "", fmt.Errorf("no interface holds %s", addr)
}

// Bandwidth returns the current estimates per destination building, as
// mesh.Telemetry.Bandwidth carries them; nil with enforcement off (no
// counters to estimate from) or before the first sample.
func (e *Enforcer) Bandwidth() []mesh.BuildingBandwidth {
	if e.smp == nil {
		return nil
	}
	e.smp.mu.Lock()
	primed := e.smp.primed
	e.smp.mu.Unlock()
	if !primed {
		return nil
	}
	return e.smp.estimates(time.Now())
}
