//go:build linux && cgo

package gpu

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
)

// TestNVMLReal checks the NVML source on a machine with a real NVIDIA GPU.
// It runs only with RECLAIMNET_REAL_GPU=1 (gpu/testdata/device-check.sh
// sets it): NVML initialises, every device reports plausible VRAM and
// capability, nvidia-smi (when present) agrees, and a process that holds
// a CUDA context (made with PyTorch when a Python with CUDA torch exists)
// appears in the process list and is gone after it is killed.
func TestNVMLReal(t *testing.T) {
	if os.Getenv("RECLAIMNET_REAL_GPU") != "1" {
		t.Skip("set RECLAIMNET_REAL_GPU=1 on a machine with an NVIDIA GPU and driver to run this test")
	}
	ctx := context.Background()
	src := NewNVML()
	inv, err := src.Discover(ctx)
	if err != nil {
		t.Fatalf("NVML Discover: %v", err)
	}
	if len(inv.Devices) == 0 {
		t.Fatal("NVML reports no devices")
	}
	for _, d := range inv.Devices {
		t.Logf("device %d: %s uuid=%s total=%s free=%s cap=%s util=%d%% procs=%d",
			d.Index, d.Model, d.UUID, FormatBytes(d.VRAMTotal), FormatBytes(d.VRAMFree), d.Capability, d.Utilization, len(d.Processes))
		if d.VRAMTotal <= 1<<30 {
			t.Errorf("device %d VRAM total: got %d bytes, want > 1 GiB", d.Index, d.VRAMTotal)
		}
		if d.VRAMFree < 0 || d.VRAMFree > d.VRAMTotal {
			t.Errorf("device %d VRAM free: got %d, want 0..%d", d.Index, d.VRAMFree, d.VRAMTotal)
		}
		if !d.Capability.AtLeast(Capability{7, 0}) {
			t.Errorf("device %d capability: got %s, want ≥ 7.0", d.Index, d.Capability)
		}
		if !strings.HasPrefix(d.UUID, "GPU-") || d.Model == "" {
			t.Errorf("device %d: got uuid %q model %q, want GPU-… and a model name", d.Index, d.UUID, d.Model)
		}
	}

	if _, err := exec.LookPath("nvidia-smi"); err == nil {
		smi, err := SMI{}.Discover(ctx)
		if err != nil {
			t.Errorf("nvidia-smi Discover: %v", err)
		} else if len(smi.Devices) != len(inv.Devices) {
			t.Errorf("nvidia-smi devices: got %d, NVML %d", len(smi.Devices), len(inv.Devices))
		} else {
			for i, d := range smi.Devices {
				n := inv.Devices[i]
				if d.UUID != n.UUID || d.Capability != n.Capability || d.VRAMTotal>>20 != n.VRAMTotal>>20 {
					t.Errorf("device %d: nvidia-smi says %s %s %d MiB, NVML %s %s %d MiB", i, d.UUID, d.Capability, d.VRAMTotal>>20, n.UUID, n.Capability, n.VRAMTotal>>20)
				}
			}
		}
	} else {
		t.Log("nvidia-smi not on PATH: fallback not compared")
	}

	python := cudaPython(t)
	if python == "" {
		t.Log("no Python with CUDA-enabled torch found (set RECLAIMNET_GPU_PYTHON): process list not checked")
		return
	}
	cmd := exec.Command(python, "-c", "import torch,time; x=torch.ones(1<<24, device='cuda'); torch.cuda.synchronize(); print('ready', flush=True); time.sleep(120)")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", python, err)
	}
	defer cmd.Process.Kill()
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "ready" {
		t.Fatalf("CUDA process: got %q, want ready", line)
	}
	pid := cmd.Process.Pid
	var seen []Process
	wait.ForWhy(t, 30*time.Second, fmt.Sprintf("pid %d in NVML's process list (in a PID namespace NVML reports host PIDs)", pid), func() (bool, string) {
		ps, err := src.Processes(ctx)
		if err != nil {
			t.Fatalf("Processes: %v", err)
		}
		seen = ps
		left, _ := ProcessesGone(ctx, src, []int{pid})
		if len(left) > 0 {
			t.Logf("pid %d holds %s on device %d", pid, FormatBytes(left[0].UsedMemory), left[0].DeviceIndex)
			return true, ""
		}
		return false, fmt.Sprintf("saw %+v", seen)
	})
	cmd.Process.Kill()
	cmd.Wait()
	wait.ForWhy(t, 30*time.Second, fmt.Sprintf("pid %d off the GPU after it was killed", pid), func() (bool, string) {
		left, err := ProcessesGone(ctx, src, []int{pid})
		if err != nil {
			t.Fatalf("ProcessesGone: %v", err)
		}
		return len(left) == 0, fmt.Sprintf("still listed: %+v", left)
	})
}

// cudaPython finds a Python whose torch sees a CUDA device.
func cudaPython(t *testing.T) string {
	cands := []string{os.Getenv("RECLAIMNET_GPU_PYTHON"), "python3", "/usr/bin/python3"}
	for _, c := range cands {
		if c == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, err := exec.CommandContext(ctx, c, "-c", "import torch; print(torch.cuda.is_available())").Output()
		cancel()
		if err == nil && strings.TrimSpace(string(out)) == "True" {
			return c
		}
		t.Logf("%s: no CUDA torch (%v %s)", c, err, strings.TrimSpace(string(out)))
	}
	return ""
}
