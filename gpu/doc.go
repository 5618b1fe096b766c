// Package gpu reports what NVIDIA GPUs a node has: model, VRAM total and
// free, CUDA compute capability, utilisation and the processes using each
// device.
//
// Three sources implement Discoverer, tried in this order by Auto:
//
//   - a declared inventory, parsed from --gpu "MODEL:VRAM:CAP:xN" specs,
//     for machines without NVIDIA drivers and for tests;
//   - NVML through github.com/NVIDIA/go-nvml, compiled only with
//     `linux && cgo` (the library is loaded at run time; a binary built with
//     cgo runs on machines without it and falls through);
//   - the CSV output of nvidia-smi --query-gpu, when the binary is on PATH
//     (the only live source of a CGO_ENABLED=0 static build).
//
// When none applies the inventory is empty and says why. ProcessesGone
// confirms at job teardown that a job's processes no longer hold a GPU.
package gpu
