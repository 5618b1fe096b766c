//go:build linux && cgo

package supervisor

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/gpu"
)

// TestRealGPUTeardown runs only with RECLAIMNET_REAL_GPU=1 on a machine
// with an NVIDIA GPU (gpu/testdata/device-check.sh): a job that holds a
// CUDA context, and its child that holds another, appear in NVML's process
// list; after Stop none of them is left on the GPU.
func TestRealGPUTeardown(t *testing.T) {
	if os.Getenv("RECLAIMNET_REAL_GPU") != "1" {
		t.Skip("set RECLAIMNET_REAL_GPU=1 on a machine with an NVIDIA GPU and driver to run this test")
	}
	py := ""
	for _, c := range []string{os.Getenv("RECLAIMNET_GPU_PYTHON"), "python3", "/usr/bin/python3"} {
		if c == "" {
			continue
		}
		out, err := exec.Command(c, "-c", "import torch; print(torch.cuda.is_available())").Output()
		if err == nil && strings.TrimSpace(string(out)) == "True" {
			py = c
			break
		}
	}
	if py == "" {
		t.Skip("no Python with CUDA-enabled torch (set RECLAIMNET_GPU_PYTHON)")
	}
	nv := gpu.NewNVML()
	cfg := testConfig(t)
	cfg.GPU = nv
	cfg.GPUGoneTimeout = 30 * time.Second
	s := newSupervisor(t, cfg)
	hold := `import torch,time; x=torch.ones(1<<24, device="cuda"); torch.cuda.synchronize()`
	j := startJob(t, s, py+` -c '`+hold+`; time.sleep(1000)' &
`+py+` -c '`+hold+`; open("'"$RECLAIMNET_READY_FILE"'","w").close(); time.sleep(1000)'`)
	waitFor(t, 3*time.Minute, "CUDA job ready", func() bool { return j.Status().Ready })
	var members []int
	waitFor(t, time.Minute, "two job processes on the GPU", func() bool {
		members, _ = groupMembers(j.Status().PID)
		left, err := gpu.ProcessesGone(context.Background(), nv, members)
		if err != nil {
			t.Fatalf("ProcessesGone: %v", err)
		}
		return len(left) >= 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := j.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if res := j.Wait(); len(res.GPUProcessesLeft) != 0 {
		t.Errorf("GPU processes left after Stop: %+v", res.GPUProcessesLeft)
	}
	if left, err := gpu.ProcessesGone(context.Background(), nv, members); err != nil || len(left) != 0 {
		t.Errorf("after Stop: got %+v, %v; want no job process on the GPU", left, err)
	}
}
