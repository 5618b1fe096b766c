#!/usr/bin/env bash
# One-shot check of gpu/ on a real NVIDIA machine (no Go toolchain needed).
#
# Build here (a machine with Go), into an ignored folder:
#   mkdir -p out/device
#   go test -c -ldflags='-s -w' -o out/device/gpu.test ./gpu
#   go test -c -ldflags='-s -w' -o out/device/supervisor.test ./agent/supervisor
#   go build -ldflags='-s -w' -o out/device/reclaimnet .
#   CGO_ENABLED=0 go build -ldflags='-s -w' -o out/device/reclaimnet-static .
# Then on the GPU machine, from the repository root:
#   bash gpu/testdata/device-check.sh out/device
#
# It prints the inventory from NVML (cgo binary) and from nvidia-smi (static
# binary), runs TestNVMLReal (NVML against the real driver, nvidia-smi
# agreeing, a CUDA process seen and then gone) and TestRealGPUTeardown (a
# supervised job holding the GPU leaves no process on it after Stop), and
# writes everything it printed to $OUT/gpu-device-check.log when $OUT is
# set. Exit status: non-zero if any step that must work failed.
set -uo pipefail
bin=${1:-out/device}
log=${OUT:-/tmp}/gpu-device-check.log
: >"$log"
status=0
step() {
  echo "== $*" | tee -a "$log"
  "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  echo "== exit $rc" | tee -a "$log"
  return "$rc"
}
step uname -a
step nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.free,compute_cap,utilization.gpu --format=csv,noheader,nounits || true
step "$bin/reclaimnet" version || status=1
step "$bin/reclaimnet" gpus || status=1
step "$bin/reclaimnet" gpus --json || status=1
# The static build cannot load NVML: it must fall back to nvidia-smi.
step "$bin/reclaimnet-static" gpus || status=1
step env RECLAIMNET_REAL_GPU=1 "$bin/gpu.test" -test.run 'TestNVMLReal' -test.v -test.count=1 -test.timeout 5m || status=1
# The rest of the package (mock servers, parsers) must pass there too;
# TestNVMLAbsentHere skips itself on a machine with a driver.
step "$bin/gpu.test" -test.count=1 -test.timeout 5m || status=1
if [ -x "$bin/supervisor.test" ]; then
  step env RECLAIMNET_REAL_GPU=1 "$bin/supervisor.test" -test.run 'TestRealGPUTeardown' -test.v -test.count=1 -test.timeout 5m || status=1
else
  echo "== $bin/supervisor.test missing: supervised GPU teardown not checked" | tee -a "$log"
fi
echo "== overall status $status (log: $log)" | tee -a "$log"
exit "$status"
