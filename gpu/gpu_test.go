package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestParseSpec(t *testing.T) {
	tests := []struct {
		spec    string
		want    Device // first device
		count   int
		wantErr string
	}{
		{"A100-80GB:80GiB:8.0:x4", Device{Model: "A100-80GB", VRAMTotal: 80 << 30, Capability: Capability{8, 0}}, 4, ""},
		{"RTX4090:24GB:8.9", Device{Model: "RTX4090", VRAMTotal: 24e9, Capability: Capability{8, 9}}, 1, ""},
		{"H200:141GiB:9.0:x8", Device{Model: "H200", VRAMTotal: 141 << 30, Capability: Capability{9, 0}}, 8, ""},
		{"B200:1.5TiB:10.0:x1", Device{Model: "B200", VRAMTotal: 3 << 39, Capability: Capability{10, 0}}, 1, ""},
		{"A100:80:8.0", Device{}, 0, "want a number with a unit"},
		{"A100:80GiB", Device{}, 0, "want MODEL:VRAM:CAP"},
		{"A100:80GiB:8.0:x4:extra", Device{}, 0, "want MODEL:VRAM:CAP"},
		{":80GiB:8.0", Device{}, 0, "empty model"},
		{"A100:0GiB:8.0", Device{}, 0, "vram must be positive"},
		{"A100:-1GiB:8.0", Device{}, 0, "not a non-negative number"},
		{"A100:80GiB:8", Device{}, 0, "want MAJOR.MINOR"},
		{"A100:80GiB:eight", Device{}, 0, "want MAJOR.MINOR"},
		{"A100:80GiB:8.0:4", Device{}, 0, "must look like x4"},
		{"A100:80GiB:8.0:x0", Device{}, 0, "must be x1 to x1024"},
		{"A100:80GiB:8.0:xmany", Device{}, 0, "must be x1 to x1024"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			devs, err := ParseSpec(tt.spec, 0)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.spec) {
					t.Fatalf("got %v, want an error naming the spec and containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if len(devs) != tt.count {
				t.Fatalf("count: got %d, want %d", len(devs), tt.count)
			}
			for i, d := range devs {
				if d.Index != i || d.Model != tt.want.Model || d.VRAMTotal != tt.want.VRAMTotal || d.VRAMFree != tt.want.VRAMTotal ||
					d.Capability != tt.want.Capability || d.Utilization != Unknown {
					t.Errorf("device %d: got %+v, want %+v (index %d, free = total, utilization unknown)", i, d, tt.want, i)
				}
			}
		})
	}
}

func TestSpecListNumbersAcrossSpecs(t *testing.T) {
	var l SpecList
	for _, s := range []string{"A100-80GB:80GiB:8.0:x2", "RTX3090:24GiB:8.6"} {
		if err := l.Set(s); err != nil {
			t.Fatalf("Set(%q): %v", s, err)
		}
	}
	if err := l.Set("bogus"); err == nil {
		t.Fatal("Set(bogus): got nil, want an error")
	}
	if len(l.Devices) != 3 || l.Devices[2].Index != 2 || l.Devices[2].Model != "RTX3090" {
		t.Fatalf("devices: got %+v, want 3 numbered 0..2 with the RTX3090 last", l.Devices)
	}
	if got, want := l.String(), "A100-80GB:80GiB:8.0:x2,RTX3090:24GiB:8.6"; got != want {
		t.Errorf("String: got %q, want %q (a bad spec adds nothing)", got, want)
	}
	inv, _ := Declared(l.Devices).Discover(context.Background())
	g, n := inv.Summary()
	if n != 3 || g.Model != "RTX3090" || g.VRAM != 24<<30 || g.Capability != 8.6 {
		t.Errorf("Summary: got %+v x%d, want RTX3090 24 GiB 8.6 x3", g, n)
	}
}

func TestParseBytesAndFormat(t *testing.T) {
	for in, want := range map[string]int64{"1B": 1, "1KiB": 1024, "1.5MiB": 3 << 19, "2GB": 2e9, "0.5TiB": 1 << 39, " 7 KB ": 7000} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q): got %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "12", "1e400GB", "NaNGB", "1.2.3MiB"} {
		if _, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q): got nil error, want one", in)
		}
	}
	for in, want := range map[int64]string{-1: "-", 512: "512 B", 80 << 30: "80.0 GiB", 3 << 19: "1.5 MiB"} {
		if got := FormatBytes(in); got != want {
			t.Errorf("FormatBytes(%d): got %q, want %q", in, got, want)
		}
	}
}

func TestCapabilityJSON(t *testing.T) {
	d := Device{Model: "X", Capability: Capability{8, 6}}
	b, err := json.Marshal(d)
	if err != nil || !strings.Contains(string(b), `"compute_capability":"8.6"`) {
		t.Fatalf("Marshal: got %s, %v; want compute_capability \"8.6\"", b, err)
	}
	var back Device
	if err := json.Unmarshal(b, &back); err != nil || back.Capability != d.Capability {
		t.Errorf("round trip: got %+v, %v; want %+v", back.Capability, err, d.Capability)
	}
	if err := json.Unmarshal([]byte(`{"compute_capability":8.6}`), &back); err == nil {
		t.Error("Unmarshal of a number: got nil error, want one")
	}
	if c := (Capability{9, 0}); !c.AtLeast(Capability{8, 9}) || (Capability{8, 6}).AtLeast(Capability{8, 9}) || c.Float() != 9.0 {
		t.Error("AtLeast/Float disagree with numeric order")
	}
}

// smiOutput is what nvidia-smi 550 prints for the queries, with the
// placeholders drivers print for unsupported fields on the second GPU.
const (
	smiGPUs = "0, GPU-11111111-2222-3333-4444-555555555555, NVIDIA H200, 143771, 143176, 9.0, 37\n" +
		"1, GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, NVIDIA A100-SXM4-40GB, 40960, [N/A], 8.0, [Not Supported]\n"
	smiApps = "GPU-11111111-2222-3333-4444-555555555555, 4242, 1024\n" +
		"GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, 77, [N/A]\n"
)

func TestParseSMI(t *testing.T) {
	devs, err := ParseSMIGPUs([]byte(smiGPUs))
	if err != nil {
		t.Fatalf("ParseSMIGPUs: %v", err)
	}
	want := []Device{
		{Index: 0, UUID: "GPU-11111111-2222-3333-4444-555555555555", Model: "NVIDIA H200", VRAMTotal: 143771 << 20, VRAMFree: 143176 << 20, Capability: Capability{9, 0}, Utilization: 37},
		{Index: 1, UUID: "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", Model: "NVIDIA A100-SXM4-40GB", VRAMTotal: 40960 << 20, VRAMFree: Unknown, Capability: Capability{8, 0}, Utilization: Unknown},
	}
	if len(devs) != len(want) {
		t.Fatalf("got %d devices, want %d", len(devs), len(want))
	}
	for i := range want {
		if devs[i].UUID != want[i].UUID || devs[i].Model != want[i].Model || devs[i].VRAMTotal != want[i].VRAMTotal ||
			devs[i].VRAMFree != want[i].VRAMFree || devs[i].Capability != want[i].Capability || devs[i].Utilization != want[i].Utilization {
			t.Errorf("device %d: got %+v, want %+v", i, devs[i], want[i])
		}
	}
	procs, err := ParseSMIApps([]byte(smiApps), devs)
	if err != nil {
		t.Fatalf("ParseSMIApps: %v", err)
	}
	if len(procs) != 2 || procs[0] != (Process{PID: 4242, DeviceIndex: 0, DeviceUUID: want[0].UUID, UsedMemory: 1024 << 20}) ||
		procs[1].DeviceIndex != 1 || procs[1].UsedMemory != Unknown {
		t.Errorf("processes: got %+v", procs)
	}
	if ps, err := ParseSMIApps([]byte("No running processes found\n"), devs); err != nil || len(ps) != 0 {
		t.Errorf("no processes: got %+v, %v; want none", ps, err)
	}
	for name, bad := range map[string]string{
		"short line":   "0, GPU-1, H200, 100\n",
		"bad index":    "zero, GPU-1, H200, 100, 100, 9.0, 0\n",
		"bad memory":   "0, GPU-1, H200, lots, 100, 9.0, 0\n",
		"bad cap":      "0, GPU-1, H200, 100, 100, nine, 0\n",
		"util > 100":   "0, GPU-1, H200, 100, 100, 9.0, 101\n",
		"broken quote": "0, \"GPU-1, H200, 100, 100, 9.0, 0\n",
	} {
		if _, err := ParseSMIGPUs([]byte(bad)); err == nil || !strings.Contains(err.Error(), "nvidia-smi") {
			t.Errorf("%s: got %v, want a parse error naming nvidia-smi", name, err)
		}
	}
	if _, err := ParseSMIApps([]byte("GPU-1, -5, 10\n"), devs); err == nil {
		t.Error("negative pid: got nil error, want one")
	}
}

// fakeSMI writes an executable that answers the two queries like
// nvidia-smi, or exits with code when code is not 0: the stand-in for a
// GPU driver this machine does not have.
func fakeSMI(t *testing.T, code int) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "nvidia-smi")
	gpus := filepath.Join(dir, "gpus.csv")
	apps := filepath.Join(dir, "apps.csv")
	if err := os.WriteFile(gpus, []byte(smiGPUs), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(apps, []byte(smiApps), 0o644); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\n" +
		"if [ " + strconv.Itoa(code) + " -ne 0 ]; then echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' >&2; exit " + strconv.Itoa(code) + "; fi\n" +
		"[ \"$2\" = '--format=csv,noheader,nounits' ] || { echo \"bad format $2\" >&2; exit 2; }\n" +
		"case \"$1\" in\n" +
		"  '" + smiGPUQuery + "') cat " + gpus + " ;;\n" +
		"  '" + smiAppQuery + "') cat " + apps + " ;;\n" +
		"  *) echo \"unknown query $1\" >&2; exit 2 ;;\n" +
		"esac\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAutoOrder(t *testing.T) {
	ctx := context.Background()
	declared, _ := ParseSpec("A6000:48GiB:8.6:x2", 0)

	t.Run("declared wins over a working nvidia-smi", func(t *testing.T) {
		inv, err := Auto(Options{Declared: declared, NVIDIASMI: fakeSMI(t, 0)}).Discover(ctx)
		if err != nil || inv.Source != SourceDeclared || len(inv.Devices) != 2 || inv.Devices[0].Model != "A6000" {
			t.Errorf("got %+v, %v; want the two declared A6000s", inv, err)
		}
	})
	t.Run("nvidia-smi when NVML is unavailable", func(t *testing.T) {
		inv, err := Auto(Options{NoNVML: true, NVIDIASMI: fakeSMI(t, 0)}).Discover(ctx)
		if err != nil || inv.Source != SourceNVIDIASMI || len(inv.Devices) != 2 {
			t.Fatalf("got %+v, %v; want two devices from nvidia-smi", inv, err)
		}
		if p := inv.Devices[0].Processes; len(p) != 1 || p[0].PID != 4242 {
			t.Errorf("device 0 processes: got %+v, want pid 4242", p)
		}
		left, err := ProcessesGone(ctx, Auto(Options{NoNVML: true, NVIDIASMI: fakeSMI(t, 0)}), []int{77, 5})
		if err != nil || len(left) != 1 || left[0].PID != 77 {
			t.Errorf("ProcessesGone: got %+v, %v; want pid 77 still on device 1", left, err)
		}
	})
	t.Run("driver not loaded falls through to none", func(t *testing.T) {
		inv, err := Auto(Options{NoNVML: true, NVIDIASMI: fakeSMI(t, 9)}).Discover(ctx)
		if err != nil || inv.Source != SourceNone || len(inv.Devices) != 0 {
			t.Fatalf("got %+v, %v; want source none", inv, err)
		}
		if joined := strings.Join(inv.Notes, "|"); !strings.Contains(joined, "could not communicate") || !strings.Contains(joined, "--gpu") {
			t.Errorf("notes: got %q, want nvidia-smi's reason and a hint to use --gpu", joined)
		}
	})
	t.Run("other nvidia-smi failures are errors", func(t *testing.T) {
		_, err := Auto(Options{NoNVML: true, NVIDIASMI: fakeSMI(t, 4)}).Discover(ctx)
		if err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("got %v, want a plain error (exit 4 is a permission problem, not a missing driver)", err)
		}
	})
	t.Run("no source", func(t *testing.T) {
		d := Auto(Options{NoNVML: true, NVIDIASMI: filepath.Join(t.TempDir(), "absent")})
		inv, err := d.Discover(ctx)
		if err != nil || inv.Source != SourceNone || len(inv.Notes) != 2 {
			t.Errorf("got %+v, %v; want source none with two notes", inv, err)
		}
		if _, err := ProcessesGone(ctx, d, []int{1}); !errors.Is(err, ErrNoProcessList) {
			t.Errorf("ProcessesGone: got %v, want ErrNoProcessList", err)
		}
		if _, err := ProcessesGone(ctx, Declared(declared), []int{1}); !errors.Is(err, ErrNoProcessList) {
			t.Errorf("ProcessesGone on declared: got %v, want ErrNoProcessList", err)
		}
	})
}
