package state

import (
	"fmt"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// Protocols are the protocol switches (policy.Switches) and the fixed
// checkpoint interval a leader decided with. The leader's own settings
// apply to the whole cluster; it records them with every decision, so every
// node, the CLI and the status page show the switches in force.
type Protocols struct {
	Switches policy.Switches
	// FixedInterval is the checkpoint interval of every job while P1 is
	// off.
	FixedInterval time.Duration
}

// ProtocolsOf returns the protocol settings of params.
func ProtocolsOf(p policy.Params) Protocols {
	return Protocols{Switches: p.Switches, FixedInterval: p.FixedInterval}
}

// DefaultProtocols are policy.DefaultParams' settings: all protocols on.
func DefaultProtocols() Protocols { return ProtocolsOf(policy.DefaultParams()) }

// ProtocolNames are the names ParseProtocols accepts, in order.
var ProtocolNames = []string{"p1", "p2", "p3"}

// ParseProtocols reads a comma-separated list of the protocols to switch
// on ("p1,p2,p3", any case, spaces allowed); "" or "none" switches all
// off. An unknown or repeated name is an error that lists the valid ones.
func ParseProtocols(list string) (policy.Switches, error) {
	var sw policy.Switches
	list = strings.TrimSpace(list)
	if list == "" || strings.EqualFold(list, "none") {
		return sw, nil
	}
	seen := map[string]bool{}
	for _, f := range strings.Split(list, ",") {
		name := strings.ToLower(strings.TrimSpace(f))
		if seen[name] {
			return policy.Switches{}, fmt.Errorf("protocols %q: %q given twice", list, name)
		}
		seen[name] = true
		switch name {
		case "p1":
			sw.P1 = true
		case "p2":
			sw.P2 = true
		case "p3":
			sw.P3 = true
		default:
			return policy.Switches{}, fmt.Errorf("protocols %q: unknown protocol %q (want a comma list of p1, p2, p3, or none)", list, f)
		}
	}
	return sw, nil
}

// FormatSwitches writes sw as ParseProtocols reads it ("p1,p3", "none").
func FormatSwitches(sw policy.Switches) string {
	var on []string
	for i, b := range []bool{sw.P1, sw.P2, sw.P3} {
		if b {
			on = append(on, ProtocolNames[i])
		}
	}
	if len(on) == 0 {
		return "none"
	}
	return strings.Join(on, ",")
}

// String describes p for people: the protocols on, what replaces each one
// that is off.
func (p Protocols) String() string {
	s := FormatSwitches(p.Switches)
	var off []string
	if !p.Switches.P1 {
		off = append(off, "P1 off: fixed interval "+p.FixedInterval.String())
	}
	if !p.Switches.P2 {
		off = append(off, "P2 off: random destination")
	}
	if !p.Switches.P3 {
		off = append(off, "P3 off: no admission, unpaced transfers, no kernel ceilings")
	}
	if len(off) > 0 {
		s += " (" + strings.Join(off, "; ") + ")"
	}
	return s
}

// Protocols returns the protocol settings in force: those of the leader
// that made the current decisions, or the defaults (all on) before any
// leader recorded its own.
func (s *State) Protocols() Protocols {
	if p := s.Decisions.Protocols; p != nil {
		return *p
	}
	return DefaultProtocols()
}
