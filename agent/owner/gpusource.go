package owner

import (
	"context"
	"fmt"
	"slices"

	"github.com/reclaimnet/reclaimnet/gpu"
)

// GPUProcessLister lists the processes holding GPU contexts; a
// gpu.Discoverer (NVML, or nvidia-smi --query-compute-apps) is one.
type GPUProcessLister interface {
	Processes(ctx context.Context) ([]gpu.Process, error)
}

// GPUSource finds the owner's processes on lent GPUs: every process the
// lister reports on a lent device that is not a guest's.
type GPUSource struct {
	Lister GPUProcessLister
	// Lent are the lent devices' indexes; nil lends every GPU.
	Lent   []int
	Guests Guests
}

// OwnerGPUProcesses lists the owner's processes on lent GPUs now.
func (g GPUSource) OwnerGPUProcesses(ctx context.Context) ([]GPUProcess, error) {
	ps, err := g.Lister.Processes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list gpu processes: %w", err)
	}
	var out []GPUProcess
	for _, p := range ps {
		if g.Lent != nil && !slices.Contains(g.Lent, p.DeviceIndex) {
			continue
		}
		guest, err := g.Guests.IsGuest(p.PID)
		if gone(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if !guest {
			out = append(out, GPUProcess{PID: p.PID, GPU: p.DeviceIndex, Name: procComm(g.Guests.ProcRoot, p.PID)})
		}
	}
	return out, nil
}
