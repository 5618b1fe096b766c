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
//
// go-nvml is pinned at v0.13.0-1, so that a first build prints nothing.
// Its nvml.h (CUDA 13.0) defines DEPRECATED as nothing; the later
// releases served (v0.13.3-1, v0.13.4-1) mark some 30 functions with
// __attribute__((deprecated)), and since the bindings wrap every one of
// them, a build on a cold cache prints 147 lines of C compiler warnings.
// The functions used here (device count and handles, UUID, name, memory,
// compute capability, utilisation, process lists) are in both; the
// library is loaded at run time, and NVML keeps its versioned entry points
// across drivers. v0.13.0-1 has no mock server packages (mock/server,
// mock/gpus, mock/dgxh200): the tests build their GPUs from its generated
// mocks (mock.Interface, mock.Device) and its mock DGX A100.
package gpu
