//go:build linux && cgo

package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// gpuModel is what NVML reports for one kind of GPU.
type gpuModel struct {
	name         string
	memMiB       uint64
	major, minor int
}

// h200 is what the driver reports for a real H200 (see
// testdata/device-check-h200.log); the A100s are the SXM4 boards with the
// sizes nvidia-smi shows for them.
var (
	h200    = gpuModel{"NVIDIA H200", 143771, 9, 0}
	a100x80 = gpuModel{"NVIDIA A100-SXM4-80GB", 81920, 8, 0}
	a100x40 = gpuModel{"NVIDIA A100-SXM4-40GB", 40960, 8, 0}
)

// board is an NVML library made of go-nvml's generated mocks. lib is what
// the source under test calls; calls records its Init and Shutdown calls;
// devs are the devices, whose functions a test may replace.
type board struct {
	lib   nvml.Interface
	calls *mock.Interface
	devs  []*mock.Device
}

// newBoard answers like a machine with the given GPUs: each device reports
// its model, a fixed UUID, its memory (all free) and its capability. Any
// other call panics (a nil mock function), as the real library would fail
// the test by crashing.
func newBoard(models ...gpuModel) board {
	b := board{calls: &mock.Interface{}}
	for i, m := range models {
		uuid := fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", i, i+1)
		m := m
		b.devs = append(b.devs, &mock.Device{
			GetUUIDFunc: func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
			GetNameFunc: func() (string, nvml.Return) { return m.name, nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				return nvml.Memory{Total: m.memMiB << 20, Free: m.memMiB << 20}, nvml.SUCCESS
			},
			GetCudaComputeCapabilityFunc: func() (int, int, nvml.Return) { return m.major, m.minor, nvml.SUCCESS },
		})
	}
	b.calls.InitFunc = func() nvml.Return { return nvml.SUCCESS }
	b.calls.ShutdownFunc = func() nvml.Return { return nvml.SUCCESS }
	b.calls.DeviceGetCountFunc = func() (int, nvml.Return) { return len(b.devs), nvml.SUCCESS }
	b.calls.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(b.devs) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return b.devs[i], nvml.SUCCESS
	}
	b.lib = b.calls
	return b
}

// stockDGXA100 is go-nvml's own mock of a DGX A100 (eight A100-SXM4-40GB).
func stockDGXA100() board {
	s := dgxa100.New()
	b := board{lib: s, calls: &s.Interface}
	for _, d := range s.Devices {
		b.devs = append(b.devs, &d.(*dgxa100.Device).Device)
	}
	return b
}

// uuid is the UUID a board's device reports, read without recording a call.
func (b board) uuid(i int) string {
	u, _ := b.devs[i].GetUUIDFunc()
	return u
}

// fillLive gives each device a live state: device i has 1/(i+2) of its
// memory free and is 10·i % busy, and procs maps a device index to the
// PIDs running on it.
func fillLive(b board, procs map[int][]uint32) {
	for i, d := range b.devs {
		static := d.GetMemoryInfoFunc
		d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			m, ret := static()
			m.Free = m.Total / uint64(i+2)
			m.Used = m.Total - m.Free
			return m, ret
		}
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

func TestNVMLBoards(t *testing.T) {
	eight := func(m gpuModel) []gpuModel { return slices.Repeat([]gpuModel{m}, 8) }
	tests := []struct {
		name    string
		board   board
		model   string
		vramMiB uint64
		capab   Capability
	}{
		{"h200x8", newBoard(eight(h200)...), h200.name, h200.memMiB, Capability{9, 0}},
		{"a100x80x8", newBoard(eight(a100x80)...), a100x80.name, a100x80.memMiB, Capability{8, 0}},
		{"go-nvml dgxa100", stockDGXA100(), "Mock NVIDIA A100-SXM4-40GB", 40960, Capability{8, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.board
			fillLive(b, map[int][]uint32{0: {4242, 4343}, 3: {777}})
			inv, err := newNVMLWith(b.lib).Discover(context.Background())
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if inv.Source != SourceNVML {
				t.Errorf("source: got %q, want %q", inv.Source, SourceNVML)
			}
			if len(inv.Devices) != 8 {
				t.Fatalf("devices: got %d, want 8", len(inv.Devices))
			}
			for i, d := range inv.Devices {
				if d.Index != i || d.UUID != b.uuid(i) || d.Model != tt.model {
					t.Errorf("device %d: got index %d uuid %q model %q, want %d %q %q", i, d.Index, d.UUID, d.Model, i, b.uuid(i), tt.model)
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
			if got := inv.Devices[3].Processes; len(got) != 1 || got[0].PID != 777 || got[0].UsedMemory != 777<<20 || got[0].DeviceIndex != 3 || got[0].DeviceUUID != b.uuid(3) {
				t.Errorf("device 3 processes: got %+v, want pid 777 using %d bytes on device 3", got, 777<<20)
			}
			if got := gotPIDs(inv.Devices[1]); len(got) != 0 {
				t.Errorf("device 1 processes: got %v, want none", got)
			}
			if n, want := len(b.calls.ShutdownCalls()), len(b.calls.InitCalls()); n != want || want != 1 {
				t.Errorf("Init/Shutdown calls: got %d/%d, want 1/1", want, n)
			}
			g, n := inv.Summary()
			if n != 8 || g.Model != tt.model || g.VRAM != int64(tt.vramMiB)<<20 || g.Capability != tt.capab.Float() {
				t.Errorf("Summary: got %+v x%d, want %s cap %v x8", g, n, tt.model, tt.capab.Float())
			}
		})
	}
}

func TestNVMLHeterogeneousSummary(t *testing.T) {
	for _, order := range [][]gpuModel{{h200, a100x80, a100x40}, {a100x40, h200, a100x80}} {
		b := newBoard(order...)
		fillLive(b, nil)
		inv, err := newNVMLWith(b.lib).Discover(context.Background())
		if err != nil {
			t.Fatalf("Discover: %v", err)
		}
		g, n := inv.Summary()
		if n != 3 || g.Model != a100x40.name || g.VRAM != int64(a100x40.memMiB)<<20 || g.Capability != 8.0 {
			t.Errorf("Summary of %v: got %+v x%d, want the smallest device %s x3", order, g, n, a100x40.name)
		}
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
		b := newBoard(h200)
		fillLive(b, nil)
		b.devs[0].GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
		}
		inv, err := newNVMLWith(b.lib).Discover(context.Background())
		if err != nil {
			t.Fatalf("Discover: %v", err)
		}
		if got := inv.Devices[0].Utilization; got != Unknown {
			t.Errorf("utilization: got %d, want Unknown (%d)", got, Unknown)
		}
	})
	t.Run("lost gpu is an error naming the device", func(t *testing.T) {
		b := newBoard(h200, h200)
		fillLive(b, nil)
		b.devs[1].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		}
		_, err := newNVMLWith(b.lib).Discover(context.Background())
		if !errors.Is(err, nvml.ERROR_GPU_IS_LOST) || !strings.Contains(err.Error(), "device 1 memory") || errors.Is(err, ErrUnavailable) {
			t.Errorf("Discover: got %v, want ERROR_GPU_IS_LOST for device 1 memory, not unavailable", err)
		}
		if n, want := len(b.calls.ShutdownCalls()), len(b.calls.InitCalls()); n != want || want != 1 {
			t.Errorf("Shutdown calls after an error: got %d, want %d", n, want)
		}
	})
	t.Run("process memory not available is unknown", func(t *testing.T) {
		b := newBoard(h200)
		fillLive(b, nil)
		b.devs[0].GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 9, UsedGpuMemory: nvmlValueNotAvailable}}, nvml.SUCCESS
		}
		ps, err := newNVMLWith(b.lib).Processes(context.Background())
		if err != nil || len(ps) != 1 || ps[0].UsedMemory != Unknown {
			t.Errorf("Processes: got %+v, %v; want pid 9 with Unknown memory", ps, err)
		}
	})
}

func TestProcessesGoneNVML(t *testing.T) {
	procs := map[int][]uint32{0: {100, 200}, 1: {300}}
	b := newBoard(a100x80, a100x80)
	fillLive(b, procs)
	src := newNVMLWith(b.lib)
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
