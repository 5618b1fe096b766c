package campus

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// Rate is a link rate in bits per second, the unit network links are sold in.
type Rate int64

// Common rates.
const (
	Kbit Rate = 1000
	Mbit Rate = 1000 * Kbit
	Gbit Rate = 1000 * Mbit
)

// BytesPerSec returns the rate in bytes/s, the unit of policy.Link.Capacity.
func (r Rate) BytesPerSec() float64 { return float64(r) / 8 }

// String formats the rate like "200Mbit/s".
func (r Rate) String() string {
	switch {
	case r >= Gbit && r%Gbit == 0:
		return strconv.FormatInt(int64(r/Gbit), 10) + "Gbit/s"
	case r >= Mbit && r%Mbit == 0:
		return strconv.FormatInt(int64(r/Mbit), 10) + "Mbit/s"
	case r >= Kbit && r%Kbit == 0:
		return strconv.FormatInt(int64(r/Kbit), 10) + "Kbit/s"
	}
	return strconv.FormatInt(int64(r), 10) + "bit/s"
}

// tcRate is the rate as tc(8) reads it.
func (r Rate) tcRate() string { return strconv.FormatInt(int64(r), 10) + "bit" }

// minRate is the slowest link we shape; below it HTB's timing is too coarse
// for the tests' bounds to mean anything.
const minRate = 64 * Kbit

// maxBuildings and maxNodesPerBuilding follow from the addressing: building
// i owns 10.77.i.0/24, nodes take .1 to .250 and the core takes .254.
const (
	maxBuildings        = 250
	maxNodesPerBuilding = 250
)

// Building is one building: an access switch with Nodes nodes behind it.
type Building struct {
	// Name is lowercase letters and digits, 1 to 8 characters, starting and
	// ending with a letter (node names append a number to it: "a" → "a1").
	Name string
	// Nodes is how many nodes hang off the building switch, 1 to 250.
	Nodes int
}

// Topology describes a campus to Build.
type Topology struct {
	// Buildings in order; building i (1-based) gets subnet 10.77.i.0/24.
	Buildings []Building
	// AccessRate shapes each node↔switch link, each direction.
	AccessRate Rate
	// UplinkRate shapes each building switch↔core link, each direction: the
	// scaled-down core every cross-building flow crosses twice.
	UplinkRate Rate
	// Delay is added to every link direction (netem); 0 adds none. The
	// kernel must have sch_netem, or Build fails with ErrNetemUnavailable.
	Delay time.Duration
}

// DefaultTopology is the scaled-down campus of the demo and the campus
// tests: three buildings with eight nodes in all, 200 Mbit/s access links and
// 60 Mbit/s building uplinks, no added delay.
func DefaultTopology() Topology {
	return Topology{
		Buildings:  []Building{{Name: "a", Nodes: 3}, {Name: "b", Nodes: 3}, {Name: "c", Nodes: 2}},
		AccessRate: 200 * Mbit,
		UplinkRate: 60 * Mbit,
	}
}

// SmallTopology is DefaultTopology with two nodes per building (six nodes):
// quicker to build for tests that need every kind of path but not eight
// agents.
func SmallTopology() Topology {
	t := DefaultTopology()
	t.Buildings = []Building{{Name: "a", Nodes: 2}, {Name: "b", Nodes: 2}, {Name: "c", Nodes: 2}}
	return t
}

var buildingName = regexp.MustCompile(`^[a-z]([a-z0-9]{0,6}[a-z])?$`)

// ErrInvalidTopology is wrapped by every Validate error.
var ErrInvalidTopology = errors.New("invalid campus topology")

// Validate reports the first problem with t, wrapping ErrInvalidTopology.
func (t Topology) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidTopology, fmt.Sprintf(format, args...))
	}
	if len(t.Buildings) == 0 {
		return bad("no buildings")
	}
	if len(t.Buildings) > maxBuildings {
		return bad("%d buildings, at most %d", len(t.Buildings), maxBuildings)
	}
	seen := map[string]bool{}
	for i, b := range t.Buildings {
		if !buildingName.MatchString(b.Name) {
			return bad("building %d name %q: want 1-8 lowercase letters/digits, starting and ending with a letter", i+1, b.Name)
		}
		if b.Name == "core" {
			return bad("building name %q is reserved", b.Name)
		}
		if seen[b.Name] {
			return bad("building name %q used twice", b.Name)
		}
		seen[b.Name] = true
		if b.Nodes < 1 || b.Nodes > maxNodesPerBuilding {
			return bad("building %q has %d nodes, want 1 to %d", b.Name, b.Nodes, maxNodesPerBuilding)
		}
	}
	if t.AccessRate < minRate {
		return bad("access rate %v below %v", t.AccessRate, minRate)
	}
	if t.UplinkRate < minRate {
		return bad("uplink rate %v below %v", t.UplinkRate, minRate)
	}
	if t.Delay < 0 || t.Delay > 10*time.Second {
		return bad("delay %v outside 0 to 10s", t.Delay)
	}
	return nil
}

// nodeName is the name of building b's j-th node (1-based): "a" → "a1".
// Building names end in a letter, so node names never collide.
func nodeName(building string, j int) string { return building + strconv.Itoa(j) }
