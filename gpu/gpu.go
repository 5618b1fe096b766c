package gpu

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/reclaimnet/reclaimnet/policy"
)

// Source names where an inventory came from.
type Source string

const (
	SourceDeclared  Source = "declared"
	SourceNVML      Source = "nvml"
	SourceNVIDIASMI Source = "nvidia-smi"
	SourceNone      Source = "none"
)

// ErrUnavailable means a source cannot run on this machine or build: the
// NVML library is missing, the binary was built without cgo, nvidia-smi is
// not on PATH. Auto falls through to the next source on it and on nothing
// else.
var ErrUnavailable = errors.New("gpu source unavailable")

// ErrNoProcessList means the source cannot list GPU processes (a declared
// inventory, or no source at all), so a teardown check cannot be made.
var ErrNoProcessList = errors.New("gpu source cannot list processes")

// Unknown marks a figure the source does not report (utilisation of a
// declared GPU, free VRAM where the driver says "[N/A]").
const Unknown = -1

// Capability is a CUDA compute capability, e.g. 8.0 or 9.0.
type Capability struct {
	Major, Minor int
}

// Float returns the capability as policy uses it (8.6 → 8.6).
func (c Capability) Float() float64 {
	f, _ := strconv.ParseFloat(c.String(), 64)
	return f
}

func (c Capability) String() string { return fmt.Sprintf("%d.%d", c.Major, c.Minor) }

// MarshalJSON writes the capability as a string, "8.0".
func (c Capability) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(c.String())), nil }

// UnmarshalJSON reads "8.0".
func (c *Capability) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return fmt.Errorf("compute capability: want a string like \"8.0\", got %s", b)
	}
	v, err := ParseCapability(s)
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// AtLeast reports whether c ≥ o.
func (c Capability) AtLeast(o Capability) bool {
	return c.Major > o.Major || (c.Major == o.Major && c.Minor >= o.Minor)
}

// Process is one process holding a context on a GPU.
type Process struct {
	PID         int    `json:"pid"`
	DeviceIndex int    `json:"device_index"`
	DeviceUUID  string `json:"device_uuid,omitempty"`
	// UsedMemory is the VRAM the process holds in bytes, Unknown when the
	// driver does not say (e.g. without permission, or under MIG).
	UsedMemory int64 `json:"used_memory_bytes"`
}

// Device is one GPU.
type Device struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"`
	Model string `json:"model"`
	// VRAMTotal and VRAMFree are bytes; VRAMFree is Unknown when not
	// reported (a declared GPU reports its total as free).
	VRAMTotal  int64      `json:"vram_total_bytes"`
	VRAMFree   int64      `json:"vram_free_bytes"`
	Capability Capability `json:"compute_capability"`
	// Utilization is the percentage of time a kernel ran over the
	// driver's last sample period, Unknown when not reported.
	Utilization int       `json:"utilization_percent"`
	Processes   []Process `json:"processes,omitempty"`
}

// Inventory is what one discovery found.
type Inventory struct {
	Source  Source   `json:"source"`
	Devices []Device `json:"devices"`
	// Notes say why earlier sources were skipped (e.g. "nvml: library
	// libnvidia-ml.so.1 not found").
	Notes []string `json:"notes,omitempty"`
}

// Summary returns the node's GPU kind and count as the policy sees them.
// Nodes are homogeneous inside (policy.Node), so the kind is the device with
// the least VRAM and, among those, the lowest capability: a job placed by
// that kind fits on every device.
func (inv Inventory) Summary() (policy.GPU, int) {
	if len(inv.Devices) == 0 {
		return policy.GPU{}, 0
	}
	least := inv.Devices[0]
	for _, d := range inv.Devices[1:] {
		if d.VRAMTotal < least.VRAMTotal ||
			(d.VRAMTotal == least.VRAMTotal && !d.Capability.AtLeast(least.Capability)) {
			least = d
		}
	}
	return policy.GPU{Model: least.Model, VRAM: least.VRAMTotal, Capability: least.Capability.Float()}, len(inv.Devices)
}

// Discoverer finds the GPUs of this machine.
type Discoverer interface {
	// Discover returns the current inventory. An error wrapping
	// ErrUnavailable means this source does not apply here.
	Discover(ctx context.Context) (Inventory, error)
	// Processes lists the processes holding GPU contexts now, or an
	// error wrapping ErrNoProcessList or ErrUnavailable.
	Processes(ctx context.Context) ([]Process, error)
}

// Options select the sources Auto tries.
type Options struct {
	// Declared, when not empty, is the whole inventory: no probing.
	Declared []Device
	// NVIDIASMI is the nvidia-smi binary; empty means look it up on PATH.
	NVIDIASMI string
	// NoNVML skips NVML even in cgo builds (tests of the fallbacks).
	NoNVML bool
}

// Auto returns a Discoverer that uses the declared inventory if one is
// given, else NVML (cgo builds), else nvidia-smi, else reports no GPUs and
// says why.
func Auto(opts Options) Discoverer {
	if len(opts.Declared) > 0 {
		return Declared(opts.Declared)
	}
	var chain []Discoverer
	if !opts.NoNVML {
		chain = append(chain, NewNVML())
	}
	chain = append(chain, SMI{Path: opts.NVIDIASMI})
	return auto(chain)
}

// auto tries each source in order, falling through on ErrUnavailable.
type auto []Discoverer

func (a auto) Discover(ctx context.Context) (Inventory, error) {
	var notes []string
	for _, d := range a {
		inv, err := d.Discover(ctx)
		if err == nil {
			inv.Notes = append(notes, inv.Notes...)
			return inv, nil
		}
		if !errors.Is(err, ErrUnavailable) {
			return Inventory{}, err
		}
		notes = append(notes, err.Error())
	}
	notes = append(notes, "no NVIDIA GPU found; declare GPUs with --gpu MODEL:VRAM:CAP:xN")
	return Inventory{Source: SourceNone, Devices: []Device{}, Notes: notes}, nil
}

func (a auto) Processes(ctx context.Context) ([]Process, error) {
	var reasons []string
	for _, d := range a {
		ps, err := d.Processes(ctx)
		if err == nil {
			return ps, nil
		}
		if !errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		reasons = append(reasons, err.Error())
	}
	return nil, fmt.Errorf("%w: %s", ErrNoProcessList, strings.Join(reasons, "; "))
}

// ProcessesGone checks a job's teardown: it returns the processes among
// pids that still hold a GPU context (none means the job is gone from the
// GPUs). It returns an error wrapping ErrNoProcessList where the source
// cannot tell (no NVML, no nvidia-smi).
func ProcessesGone(ctx context.Context, d Discoverer, pids []int) ([]Process, error) {
	want := make(map[int]bool, len(pids))
	for _, p := range pids {
		want[p] = true
	}
	ps, err := d.Processes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list gpu processes: %w", err)
	}
	var left []Process
	for _, p := range ps {
		if want[p.PID] {
			left = append(left, p)
		}
	}
	return left, nil
}
