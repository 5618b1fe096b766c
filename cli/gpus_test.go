package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestGPUsCommand(t *testing.T) {
	t.Run("declared table", func(t *testing.T) {
		code, out, errOut := runCLI(t, "gpus", "--gpu", "A100-80GB:80GiB:8.0:x2", "--gpu", "RTX4090:24GiB:8.9")
		if code != ExitOK {
			t.Fatalf("exit code: got %d, want %d (stderr %q)", code, ExitOK, errOut)
		}
		for _, want := range []string{"source: declared", "A100-80GB", "80.0 GiB", "RTX4090", "8.9"} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout: got %q, want it to contain %q", out, want)
			}
		}
		if n := strings.Count(out, "A100-80GB"); n != 2 {
			t.Errorf("A100 rows: got %d, want 2", n)
		}
	})
	t.Run("json", func(t *testing.T) {
		code, out, _ := runCLI(t, "gpus", "--json", "--gpu", "H200:141GiB:9.0:x8")
		var inv struct {
			Source  string `json:"source"`
			Devices []struct {
				Index      int    `json:"index"`
				VRAM       int64  `json:"vram_total_bytes"`
				Capability string `json:"compute_capability"`
			} `json:"devices"`
		}
		if code != ExitOK || json.Unmarshal([]byte(out), &inv) != nil {
			t.Fatalf("exit %d, output %q: want exit 0 and JSON", code, out)
		}
		if inv.Source != "declared" || len(inv.Devices) != 8 || inv.Devices[7].Index != 7 || inv.Devices[0].VRAM != 141<<30 || inv.Devices[0].Capability != "9.0" {
			t.Errorf("got %+v, want 8 declared H200s with 141 GiB and capability 9.0", inv)
		}
	})
	t.Run("bad spec is a usage error", func(t *testing.T) {
		code, _, errOut := runCLI(t, "gpus", "--gpu", "A100:80:8.0")
		if code != ExitUsage || !strings.Contains(errOut, "want a number with a unit") {
			t.Errorf("got exit %d stderr %q, want exit %d and the unit hint", code, errOut, ExitUsage)
		}
	})
	t.Run("extra argument", func(t *testing.T) {
		if code, _, _ := runCLI(t, "gpus", "now"); code != ExitUsage {
			t.Errorf("exit code: got %d, want %d", code, ExitUsage)
		}
	})
}
