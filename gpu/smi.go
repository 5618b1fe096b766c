package gpu

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// smiGPUQuery and smiAppQuery are the nvidia-smi queries the fallback runs;
// nounits makes memory plain MiB and utilisation a plain percentage.
const (
	smiGPUQuery = "--query-gpu=index,uuid,name,memory.total,memory.free,compute_cap,utilization.gpu"
	smiAppQuery = "--query-compute-apps=gpu_uuid,pid,used_memory"
	smiFormat   = "--format=csv,noheader,nounits"
	smiTimeout  = 15 * time.Second
)

// nvidia-smi exit codes meaning "no usable driver here" (nvidia-smi(1)).
const (
	smiExitDriverNotLoaded = 9
	smiExitNoNVML          = 12
)

// SMI discovers GPUs by running nvidia-smi and reading its CSV output: the
// live source of builds without cgo.
type SMI struct {
	// Path is the nvidia-smi binary; empty means look it up on PATH.
	Path string
}

// Discover runs nvidia-smi --query-gpu and --query-compute-apps.
func (s SMI) Discover(ctx context.Context) (Inventory, error) {
	out, err := s.run(ctx, smiGPUQuery)
	if err != nil {
		return Inventory{}, err
	}
	devs, err := ParseSMIGPUs(out)
	if err != nil {
		return Inventory{}, err
	}
	appsOut, err := s.run(ctx, smiAppQuery)
	if err != nil {
		return Inventory{}, err
	}
	procs, err := ParseSMIApps(appsOut, devs)
	if err != nil {
		return Inventory{}, err
	}
	for _, p := range procs {
		for i := range devs {
			if devs[i].Index == p.DeviceIndex {
				devs[i].Processes = append(devs[i].Processes, p)
			}
		}
	}
	return Inventory{Source: SourceNVIDIASMI, Devices: devs}, nil
}

// Processes runs nvidia-smi --query-compute-apps.
func (s SMI) Processes(ctx context.Context) ([]Process, error) {
	out, err := s.run(ctx, smiGPUQuery)
	if err != nil {
		return nil, err
	}
	devs, err := ParseSMIGPUs(out)
	if err != nil {
		return nil, err
	}
	appsOut, err := s.run(ctx, smiAppQuery)
	if err != nil {
		return nil, err
	}
	return ParseSMIApps(appsOut, devs)
}

func (s SMI) run(ctx context.Context, query string) ([]byte, error) {
	path := s.Path
	if path == "" {
		p, err := exec.LookPath("nvidia-smi")
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi: not found on PATH: %w", ErrUnavailable)
		}
		path = p
	}
	ctx, cancel := context.WithTimeout(ctx, smiTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, query, smiFormat)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String() + " " + string(out))
		var ee *exec.ExitError
		switch {
		case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("nvidia-smi: %s not found: %w", path, ErrUnavailable)
		case errors.As(err, &ee) && (ee.ExitCode() == smiExitDriverNotLoaded || ee.ExitCode() == smiExitNoNVML):
			return nil, fmt.Errorf("nvidia-smi: no usable driver (exit %d: %s): %w", ee.ExitCode(), msg, ErrUnavailable)
		}
		return nil, fmt.Errorf("run %s %s: %w: %s", path, query, err, msg)
	}
	return out, nil
}

// smiNA reports the placeholders nvidia-smi prints for missing values.
func smiNA(v string) bool {
	return strings.HasPrefix(v, "[") || v == "N/A" || v == ""
}

// smiMiB parses a nounits memory field (MiB); placeholders give Unknown.
func smiMiB(v string) (int64, error) {
	if smiNA(v) {
		return Unknown, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("memory %q is not a MiB count", v)
	}
	return n << 20, nil
}

func readSMICSV(out []byte, fields int, what string) ([][]string, error) {
	r := csv.NewReader(bytes.NewReader(out))
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = -1
	var rows [][]string
	for line := 1; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parse nvidia-smi %s output: %w", what, err)
		}
		if len(rec) == 1 && strings.HasPrefix(strings.TrimSpace(rec[0]), "No ") {
			// "No devices were found", "No running processes found".
			continue
		}
		if len(rec) != fields {
			return nil, fmt.Errorf("parse nvidia-smi %s output: line %d has %d fields, want %d: %q", what, line, len(rec), fields, strings.Join(rec, ","))
		}
		for i := range rec {
			rec[i] = strings.TrimSpace(rec[i])
		}
		rows = append(rows, rec)
	}
}

// ParseSMIGPUs parses the output of
// nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.free,compute_cap,utilization.gpu --format=csv,noheader,nounits.
func ParseSMIGPUs(out []byte) ([]Device, error) {
	rows, err := readSMICSV(out, 7, "--query-gpu")
	if err != nil {
		return nil, err
	}
	devs := make([]Device, 0, len(rows))
	for _, f := range rows {
		idx, err := strconv.Atoi(f[0])
		if err != nil || idx < 0 {
			return nil, fmt.Errorf("parse nvidia-smi --query-gpu output: index %q is not a number", f[0])
		}
		total, err := smiMiB(f[3])
		if err != nil {
			return nil, fmt.Errorf("parse nvidia-smi --query-gpu output: gpu %d total %w", idx, err)
		}
		free, err := smiMiB(f[4])
		if err != nil {
			return nil, fmt.Errorf("parse nvidia-smi --query-gpu output: gpu %d free %w", idx, err)
		}
		var capab Capability
		if !smiNA(f[5]) {
			if capab, err = ParseCapability(f[5]); err != nil {
				return nil, fmt.Errorf("parse nvidia-smi --query-gpu output: gpu %d: %w", idx, err)
			}
		}
		util := Unknown
		if !smiNA(f[6]) {
			if util, err = strconv.Atoi(f[6]); err != nil || util < 0 || util > 100 {
				return nil, fmt.Errorf("parse nvidia-smi --query-gpu output: gpu %d utilization %q is not a percentage", idx, f[6])
			}
		}
		devs = append(devs, Device{
			Index: idx, UUID: f[1], Model: f[2],
			VRAMTotal: total, VRAMFree: free,
			Capability: capab, Utilization: util,
		})
	}
	return devs, nil
}

// ParseSMIApps parses the output of
// nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits,
// resolving each GPU UUID to its index in devs (Unknown if absent).
func ParseSMIApps(out []byte, devs []Device) ([]Process, error) {
	rows, err := readSMICSV(out, 3, "--query-compute-apps")
	if err != nil {
		return nil, err
	}
	var procs []Process
	for _, f := range rows {
		pid, err := strconv.Atoi(f[1])
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("parse nvidia-smi --query-compute-apps output: pid %q is not a process id", f[1])
		}
		used, err := smiMiB(f[2])
		if err != nil {
			return nil, fmt.Errorf("parse nvidia-smi --query-compute-apps output: pid %d used %w", pid, err)
		}
		p := Process{PID: pid, DeviceIndex: Unknown, DeviceUUID: f[0], UsedMemory: used}
		for _, d := range devs {
			if d.UUID == f[0] {
				p.DeviceIndex = d.Index
			}
		}
		procs = append(procs, p)
	}
	return procs, nil
}
