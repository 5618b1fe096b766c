//go:build linux && cgo

package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlValueNotAvailable is what NVML reports as a process's used memory
// when it cannot say (NVML_VALUE_NOT_AVAILABLE, e.g. under MIG).
const nvmlValueNotAvailable = ^uint64(0)

// NVMLAvailable reports whether this build can use NVML (linux with cgo).
const NVMLAvailable = true

// nvmlSource discovers GPUs through NVML. Every call is gated on a
// successful Init: go-nvml crashes the process if anything else is called
// after Init failed (library not found on machines without a driver).
type nvmlSource struct {
	mu  sync.Mutex // serialises Init/Shutdown pairs
	lib nvml.Interface
}

// NewNVML returns the NVML source. It loads libnvidia-ml.so.1 on each
// Discover (reference counted by NVML) and reports ErrUnavailable where the
// library or the driver is missing.
func NewNVML() Discoverer { return &nvmlSource{lib: nvml.New()} }

// newNVMLWith uses the given NVML implementation (go-nvml's mock servers in
// tests).
func newNVMLWith(lib nvml.Interface) *nvmlSource { return &nvmlSource{lib: lib} }

// session runs f between Init and Shutdown, and only if Init succeeded.
func (s *nvmlSource) session(f func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ret := s.lib.Init()
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("nvml: library libnvidia-ml.so.1 not found: %w", ErrUnavailable)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("nvml: NVIDIA driver not loaded: %w", ErrUnavailable)
	default:
		return fmt.Errorf("nvml init: %w", ret)
	}
	defer s.lib.Shutdown()
	return f()
}

func (s *nvmlSource) Discover(ctx context.Context) (Inventory, error) {
	var devs []Device
	err := s.session(func() error {
		n, ret := s.lib.DeviceGetCount()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml device count: %w", ret)
		}
		devs = make([]Device, 0, n)
		for i := 0; i < n; i++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			d, err := s.device(i)
			if err != nil {
				return err
			}
			devs = append(devs, d)
		}
		return nil
	})
	if err != nil {
		return Inventory{}, err
	}
	return Inventory{Source: SourceNVML, Devices: devs}, nil
}

func (s *nvmlSource) Processes(ctx context.Context) ([]Process, error) {
	var all []Process
	err := s.session(func() error {
		n, ret := s.lib.DeviceGetCount()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml device count: %w", ret)
		}
		for i := 0; i < n; i++ {
			h, ret := s.lib.DeviceGetHandleByIndex(i)
			if ret != nvml.SUCCESS {
				return fmt.Errorf("nvml device %d handle: %w", i, ret)
			}
			uuid, ret := h.GetUUID()
			if ret != nvml.SUCCESS {
				return fmt.Errorf("nvml device %d uuid: %w", i, ret)
			}
			ps, err := deviceProcesses(h, i, uuid)
			if err != nil {
				return err
			}
			all = append(all, ps...)
		}
		return nil
	})
	return all, err
}

// device reads one device; called inside a session.
func (s *nvmlSource) device(i int) (Device, error) {
	h, ret := s.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("nvml device %d handle: %w", i, ret)
	}
	d := Device{Index: i, Utilization: Unknown}
	if d.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("nvml device %d uuid: %w", i, ret)
	}
	if d.Model, ret = h.GetName(); ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("nvml device %d name: %w", i, ret)
	}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("nvml device %d memory: %w", i, ret)
	}
	d.VRAMTotal, d.VRAMFree = int64(mem.Total), int64(mem.Free)
	major, minor, ret := h.GetCudaComputeCapability()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("nvml device %d compute capability: %w", i, ret)
	}
	d.Capability = Capability{Major: major, Minor: minor}
	switch util, ret := h.GetUtilizationRates(); ret {
	case nvml.SUCCESS:
		d.Utilization = int(util.Gpu)
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NO_PERMISSION:
		// Leave Unknown: MIG devices and some vGPUs do not report it.
	default:
		return Device{}, fmt.Errorf("nvml device %d utilization: %w", i, ret)
	}
	ps, err := deviceProcesses(h, i, d.UUID)
	if err != nil {
		return Device{}, err
	}
	d.Processes = ps
	return d, nil
}

// deviceProcesses merges the compute and graphics process lists of one
// device (a CUDA process appears in either, or in both: count it once).
func deviceProcesses(h nvml.Device, index int, uuid string) ([]Process, error) {
	var out []Process
	seen := map[uint32]bool{}
	for _, list := range []struct {
		kind string
		get  func() ([]nvml.ProcessInfo, nvml.Return)
	}{
		{"compute", h.GetComputeRunningProcesses},
		{"graphics", h.GetGraphicsRunningProcesses},
	} {
		infos, ret := list.get()
		if errors.Is(ret, nvml.ERROR_NOT_SUPPORTED) {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml device %d %s processes: %w", index, list.kind, ret)
		}
		for _, p := range infos {
			if seen[p.Pid] {
				continue
			}
			seen[p.Pid] = true
			used := int64(Unknown)
			if p.UsedGpuMemory != nvmlValueNotAvailable {
				used = int64(p.UsedGpuMemory)
			}
			out = append(out, Process{PID: int(p.Pid), DeviceIndex: index, DeviceUUID: uuid, UsedMemory: used})
		}
	}
	return out, nil
}
