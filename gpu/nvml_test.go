//go:build linux && cgo

package gpu

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// fillLive gives each mock device what the stock servers leave unset (the
// mocks panic on a nil function): utilisation, free memory and processes.
// procs maps a device index to the PIDs running on it.
func fillLive(t *testing.T, s *server.Server, procs map[int][]uint32) {
	t.Helper()
	for i, h := range s.Devices {
		d := h.(*server.Device)
		d.MemoryInfo.Free = d.MemoryInfo.Total / uint64(i+2)
		util := uint32(10 * i)
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: util, Memory: util / 2}, nvml.SUCCESS
		}
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			var out []nvml.ProcessInfo
			for _, pid := range procs[i] {
				out = append(out, nvml.ProcessInfo{Pid: pid, UsedGpuMemory: uint64(pid) << 20})
			}
			return out, nvml.SUCCESS
		}
		d.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			// The first compute process also shows as graphics: count it once.
			if len(procs[i]) > 0 {
				return []nvml.ProcessInfo{{Pid: procs[i][0], UsedGpuMemory: uint64(procs[i][0]) << 20}}, nvml.SUCCESS
			}
			return nil, nvml.SUCCESS
		}
	}
}

func TestNVMLMockServers(t *testing.T) {
	tests := []struct {
		name     string
		server   *server.Server
		model    string
		vramMiB  uint64
		capab    Capability
		wantDevs int
	}{
		{"dgxh200", dgxh200.New(), "NVIDIA H200 141GB HBM3e", 144384, Capability{9, 0}, 8},
		{"dgxa100", dgxa100.New(), gpus.A100_SXM4_40GB.Name, gpus.A100_SXM4_40GB.MemoryMB, Capability{8, 0}, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fillLive(t, tt.server, map[int][]uint32{0: {4242, 4343}, 3: {777}})
			inv, err := newNVMLWith(tt.server).Discover(context.Background())
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if inv.Source != SourceNVML {
				t.Errorf("source: got %q, want %q", inv.Source, SourceNVML)
			}
			if len(inv.Devices) != tt.wantDevs {
				t.Fatalf("devices: got %d, want %d", len(inv.Devices), tt.wantDevs)
			}
			for i, d := range inv.Devices {
				mock := tt.server.Devices[i].(*server.Device)
				if d.Index != i || d.UUID != mock.UUID || d.Model != tt.model {
					t.Errorf("device %d: got index %d uuid %q model %q, want %d %q %q", i, d.Index, d.UUID, d.Model, i, mock.UUID, tt.model)
				}
				if want := int64(tt.vramMiB) << 20; d.VRAMTotal != want {
					t.Errorf("device %d total: got %d, want %d", i, d.VRAMTotal, want)
				}
				if want := int64(tt.vramMiB<<20) / int64(i+2); d.VRAMFree != want {
					t.Errorf("device %d free: got %d, want %d", i, d.VRAMFree, want)
				}
				if d.Capability != tt.capab {
					t.Errorf("device %d capability: got %v, want %v", i, d.Capability, tt.capab)
				}
				if d.Utilization != 10*i {
					t.Errorf("device %d utilization: got %d, want %d", i, d.Utilization, 10*i)
				}
			}
			gotPIDs := func(d Device) []int {
				var p []int
				for _, x := range d.Processes {
					p = append(p, x.PID)
				}
				return p
			}
			if got := gotPIDs(inv.Devices[0]); !slices.Equal(got, []int{4242, 4343}) {
				t.Errorf("device 0 processes: got %v, want [4242 4343] (graphics duplicate counted once)", got)
			}
			if got := inv.Devices[3].Processes; len(got) != 1 || got[0].PID != 777 || got[0].UsedMemory != 777<<20 || got[0].DeviceIndex != 3 {
				t.Errorf("device 3 processes: got %+v, want pid 777 using %d bytes on device 3", got, 777<<20)
			}
			if got := gotPIDs(inv.Devices[1]); len(got) != 0 {
				t.Errorf("device 1 processes: got %v, want none", got)
			}
			if n, want := len(tt.server.ShutdownCalls()), len(tt.server.InitCalls()); n != want {
				t.Errorf("Shutdown calls: got %d, want one per Init (%d)", n, want)
			}
			g, n := inv.Summary()
			if n != tt.wantDevs || g.Model != tt.model || g.Capability != tt.capab.Float() {
				t.Errorf("Summary: got %+v x%d, want %s cap %v x%d", g, n, tt.model, tt.capab.Float(), tt.wantDevs)
			}
		})
	}
}

func TestNVMLHeterogeneousSummary(t *testing.T) {
	s := server.NewServerWithGPUs("550.54.15", "12.550.54.15", 12040, gpus.H200_SXM5_141GB, gpus.A100_SXM4_80GB, gpus.A100_SXM4_40GB)
	fillLive(t, s, nil)
	inv, err := newNVMLWith(s).Discover(context.Background())
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	g, n := inv.Summary()
	if n != 3 || g.Model != gpus.A100_SXM4_40GB.Name || g.VRAM != int64(gpus.A100_SXM4_40GB.MemoryMB)<<20 || g.Capability != 8.0 {
		t.Errorf("Summary: got %+v x%d, want the smallest device %s x3", g, n, gpus.A100_SXM4_40GB.Name)
	}
}

// TestNVMLInitFailureIsGated uses a mock whose every function except Init
// is nil: any call after the failed Init panics, as the real library
// crashes the process.
func TestNVMLInitFailureIsGated(t *testing.T) {
	for _, tt := range []struct {
		ret             nvml.Return
		wantUnavailable bool
		wantMsg         string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, true, "libnvidia-ml.so.1 not found"},
		{nvml.ERROR_DRIVER_NOT_LOADED, true, "driver not loaded"},
		{nvml.ERROR_NO_PERMISSION, false, "nvml init"},
	} {
		t.Run(tt.wantMsg, func(t *testing.T) {
			lib := &mock.Interface{InitFunc: func() nvml.Return { return tt.ret }}
			src := newNVMLWith(lib)
			_, err := src.Discover(context.Background())
			if err == nil || errors.Is(err, ErrUnavailable) != tt.wantUnavailable || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Discover: got %v, want an error containing %q (unavailable=%v)", err, tt.wantMsg, tt.wantUnavailable)
			}
			_, err = src.Processes(context.Background())
			if err == nil || errors.Is(err, ErrUnavailable) != tt.wantUnavailable {
				t.Errorf("Processes: got %v, want unavailable=%v", err, tt.wantUnavailable)
			}
			if n := len(lib.InitCalls()); n != 2 {
				t.Errorf("Init calls: got %d, want 2", n)
			}
		})
	}
}

func TestNVMLDeviceErrors(t *testing.T) {
	t.Run("utilization not supported is unknown", func(t *testing.T) {
		s := dgxh200.NewWithGPUs(gpus.H200_SXM5_141GB)
		fillLive(t, s, nil)
		s.Devices[0].(*server.Device).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
		}
		inv, err := newNVMLWith(s).Discover(context.Background())
		if err != nil {
			t.Fatalf("Discover: %v", err)
		}
		if got := inv.Devices[0].Utilization; got != Unknown {
			t.Errorf("utilization: got %d, want Unknown (%d)", got, Unknown)
		}
	})
	t.Run("lost gpu is an error naming the device", func(t *testing.T) {
		s := dgxh200.NewWithGPUs(gpus.H200_SXM5_141GB, gpus.H200_SXM5_141GB)
		fillLive(t, s, nil)
		s.Devices[1].(*server.Device).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		}
		_, err := newNVMLWith(s).Discover(context.Background())
		if !errors.Is(err, nvml.ERROR_GPU_IS_LOST) || !strings.Contains(err.Error(), "device 1 memory") || errors.Is(err, ErrUnavailable) {
			t.Errorf("Discover: got %v, want ERROR_GPU_IS_LOST for device 1 memory, not unavailable", err)
		}
		if n, want := len(s.ShutdownCalls()), len(s.InitCalls()); n != want {
			t.Errorf("Shutdown calls after an error: got %d, want %d", n, want)
		}
	})
	t.Run("process memory not available is unknown", func(t *testing.T) {
		s := dgxh200.NewWithGPUs(gpus.H200_SXM5_141GB)
		fillLive(t, s, nil)
		s.Devices[0].(*server.Device).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 9, UsedGpuMemory: nvmlValueNotAvailable}}, nvml.SUCCESS
		}
		ps, err := newNVMLWith(s).Processes(context.Background())
		if err != nil || len(ps) != 1 || ps[0].UsedMemory != Unknown {
			t.Errorf("Processes: got %+v, %v; want pid 9 with Unknown memory", ps, err)
		}
	})
}

func TestProcessesGoneNVML(t *testing.T) {
	procs := map[int][]uint32{0: {100, 200}, 1: {300}}
	s := dgxa100.NewWithGPUs(gpus.A100_SXM4_80GB, gpus.A100_SXM4_80GB)
	fillLive(t, s, procs)
	src := newNVMLWith(s)
	left, err := ProcessesGone(context.Background(), src, []int{200, 300, 999})
	if err != nil {
		t.Fatalf("ProcessesGone: %v", err)
	}
	var pids []int
	for _, p := range left {
		pids = append(pids, p.PID)
	}
	if !slices.Equal(pids, []int{200, 300}) {
		t.Errorf("still on a GPU: got %v, want [200 300]", pids)
	}
	// The job's processes exit: the driver drops them from its lists.
	procs[0], procs[1] = []uint32{100}, nil
	left, err = ProcessesGone(context.Background(), src, []int{200, 300, 999})
	if err != nil || len(left) != 0 {
		t.Errorf("after exit: got %+v, %v; want none left", left, err)
	}
}

// TestNVMLAbsentHere runs the real go-nvml against this machine. Without an
// NVIDIA driver, Init reports the library missing and nothing else is
// called (a call would crash the test binary).
func TestNVMLAbsentHere(t *testing.T) {
	if os.Getenv("RECLAIMNET_REAL_GPU") == "1" {
		t.Skip("RECLAIMNET_REAL_GPU=1: this machine has a GPU; TestNVMLReal covers it")
	}
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("/dev/nvidiactl exists: this machine has an NVIDIA driver")
	}
	_, err := NewNVML().Discover(context.Background())
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Discover without a driver: got %v, want ErrUnavailable", err)
	}
	inv, err := Auto(Options{NVIDIASMI: "/nonexistent/nvidia-smi"}).Discover(context.Background())
	if err != nil || inv.Source != SourceNone || len(inv.Devices) != 0 || len(inv.Notes) != 3 {
		t.Errorf("Auto without GPUs: got %+v, %v; want source none, no devices, three notes", inv, err)
	}
}
