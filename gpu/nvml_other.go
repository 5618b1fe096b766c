//go:build !(linux && cgo)

package gpu

import (
	"context"
	"fmt"
)

// NVMLAvailable reports whether this build can use NVML (linux with cgo).
const NVMLAvailable = false

// nvmlMissing stands in for NVML in builds without cgo.
type nvmlMissing struct{}

// NewNVML returns a source that always reports ErrUnavailable: this binary
// was built without cgo (or not for Linux), so it cannot load NVML.
func NewNVML() Discoverer { return nvmlMissing{} }

func (nvmlMissing) Discover(context.Context) (Inventory, error) {
	return Inventory{}, fmt.Errorf("nvml: not in this build (built without cgo): %w", ErrUnavailable)
}

func (nvmlMissing) Processes(context.Context) ([]Process, error) {
	return nil, fmt.Errorf("nvml: not in this build (built without cgo): %w", ErrUnavailable)
}
