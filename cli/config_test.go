package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrintConfigFormats: --print-config=hcl writes a file that --config
// reads back as the same configuration (compared through the JSON form);
// an unknown format is a usage error.
func TestPrintConfigFormats(t *testing.T) {
	flags := []string{"agent", "--name", "gpu-07", "--building", "physics", "--join", "10.0.0.1", "--fixed-load", "0.2",
		"--uplink-capacity", "60Mbit", "--uplink-capacity", "chem=1Gbit", "--bmin", "10Mbit", "--cache-size", "500GiB", "--protocols", "p1,p3"}
	code, asJSON, errOut := runCLI(t, append(flags, "--print-config")...)
	if code != ExitOK {
		t.Fatalf("--print-config: exit %d: %s", code, errOut)
	}
	code, asHCL, errOut := runCLI(t, append(flags, "--print-config=hcl")...)
	if code != ExitOK || !strings.Contains(asHCL, "# node name, unique in the cluster") || !strings.Contains(asHCL, `name = "gpu-07"`) {
		t.Fatalf("--print-config=hcl: exit %d, stderr %q:\n%s", code, errOut, asHCL)
	}
	path := filepath.Join(t.TempDir(), "agent.hcl")
	if err := os.WriteFile(path, []byte(asHCL), 0o600); err != nil {
		t.Fatal(err)
	}
	code, back, errOut := runCLI(t, "agent", "--config", path, "--print-config=json")
	if code != ExitOK || back != asJSON {
		t.Errorf("the printed HCL read back: exit %d, stderr %q\n%s\nwant\n%s", code, errOut, back, asJSON)
	}
	if code, _, errOut := runCLI(t, "agent", "--print-config=yaml"); code != ExitUsage || !strings.Contains(errOut, "want json or hcl") {
		t.Errorf("--print-config=yaml: exit %d, stderr %q; want a usage error naming json and hcl", code, errOut)
	}
	bad := filepath.Join(t.TempDir(), "agent.hcl")
	os.WriteFile(bad, []byte("gossip_port = 7946\nbulding = \"physics\"\n"), 0o600)
	if code, _, errOut := runCLI(t, "agent", "--config", bad, "--print-config"); code != ExitError || !strings.Contains(errOut, `agent.hcl:2,1-8: unknown option "bulding"`) {
		t.Errorf("a typo in the HCL file: exit %d, stderr %q; want exit 1 naming the line and the option", code, errOut)
	}
}
