package gpu

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Declared is an inventory the operator states with --gpu specs: for
// machines without NVIDIA drivers and for tests. It cannot list processes.
type Declared []Device

// Discover returns the declared devices.
func (d Declared) Discover(context.Context) (Inventory, error) {
	devs := make([]Device, len(d))
	copy(devs, d)
	return Inventory{Source: SourceDeclared, Devices: devs}, nil
}

// Processes always fails: a declared GPU has no driver to ask.
func (Declared) Processes(context.Context) ([]Process, error) {
	return nil, fmt.Errorf("declared inventory: %w", ErrNoProcessList)
}

// ParseSpec parses one --gpu spec, "MODEL:VRAM:CAP[:xN]", for example
// "A100-80GB:80GiB:8.0:x4" (four A100s with 80 GiB each, capability 8.0).
// VRAM takes a unit: B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB,
// TiB (powers of 1024). The count defaults to 1. Device indexes start at
// first.
func ParseSpec(spec string, first int) ([]Device, error) {
	parts := strings.Split(spec, ":")
	if len(parts) < 3 || len(parts) > 4 {
		return nil, fmt.Errorf("gpu spec %q: want MODEL:VRAM:CAP[:xN], e.g. A100-80GB:80GiB:8.0:x4", spec)
	}
	model := strings.TrimSpace(parts[0])
	if model == "" {
		return nil, fmt.Errorf("gpu spec %q: empty model name", spec)
	}
	vram, err := ParseBytes(parts[1])
	if err != nil {
		return nil, fmt.Errorf("gpu spec %q: vram: %w", spec, err)
	}
	if vram <= 0 {
		return nil, fmt.Errorf("gpu spec %q: vram must be positive", spec)
	}
	capab, err := ParseCapability(parts[2])
	if err != nil {
		return nil, fmt.Errorf("gpu spec %q: %w", spec, err)
	}
	count := 1
	if len(parts) == 4 {
		c := strings.TrimSpace(parts[3])
		if !strings.HasPrefix(c, "x") {
			return nil, fmt.Errorf("gpu spec %q: count %q must look like x4", spec, c)
		}
		n, err := strconv.Atoi(c[1:])
		if err != nil || n < 1 || n > 1024 {
			return nil, fmt.Errorf("gpu spec %q: count %q must be x1 to x1024", spec, c)
		}
		count = n
	}
	devs := make([]Device, count)
	for i := range devs {
		devs[i] = Device{
			Index:       first + i,
			Model:       model,
			VRAMTotal:   vram,
			VRAMFree:    vram,
			Capability:  capab,
			Utilization: Unknown,
		}
	}
	return devs, nil
}

// ParseCapability parses "8.0", "9.0", "12.0". Both parts are required so
// "8" and "86" (ambiguous) are rejected.
func ParseCapability(s string) (Capability, error) {
	s = strings.TrimSpace(s)
	major, minor, ok := strings.Cut(s, ".")
	if !ok {
		return Capability{}, fmt.Errorf("compute capability %q: want MAJOR.MINOR, e.g. 8.0", s)
	}
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil || ma < 1 || ma > 99 || mi < 0 || mi > 9 || strings.HasPrefix(minor, "+") {
		return Capability{}, fmt.Errorf("compute capability %q: want MAJOR.MINOR, e.g. 8.0", s)
	}
	return Capability{Major: ma, Minor: mi}, nil
}

var byteUnits = []struct {
	suffix string
	mult   float64
}{
	// Longest suffixes first so "GiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseBytes parses a size with a unit: "80GiB", "40GB", "1.5TiB",
// "512MiB", "4096B". A bare number is rejected: GB and GiB differ by 7 %.
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	for _, u := range byteUnits {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return 0, fmt.Errorf("size %q: %q is not a non-negative number", s, num)
		}
		b := v * u.mult
		if b >= math.MaxInt64 {
			return 0, fmt.Errorf("size %q: too large", s)
		}
		return int64(math.Round(b)), nil
	}
	return 0, fmt.Errorf("size %q: want a number with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", s)
}

// FormatBytes prints a byte count in binary units ("80.0 GiB").
func FormatBytes(b int64) string {
	if b < 0 {
		return "-"
	}
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit && exp < 3; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGT"[exp])
}

// SpecList is a repeatable --gpu flag (flag.Value): each Set appends the
// devices of one spec, numbering them after the ones already declared.
type SpecList struct {
	specs   []string
	Devices []Device
}

// String returns the specs given so far, comma separated.
func (l *SpecList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.specs, ",")
}

// Set parses and appends one spec.
func (l *SpecList) Set(spec string) error {
	devs, err := ParseSpec(spec, len(l.Devices))
	if err != nil {
		return err
	}
	l.specs = append(l.specs, spec)
	l.Devices = append(l.Devices, devs...)
	return nil
}
