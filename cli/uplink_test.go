package cli

import (
	"strings"
	"testing"
)

// TestAgentUplinkAndBminFlags: --uplink-capacity and --bmin reach the
// configuration; a bad rate is a usage error naming the flag.
func TestAgentUplinkAndBminFlags(t *testing.T) {
	code, out, errOut := runCLI(t, "agent", "--dev", "--uplink-capacity", "60Mbit", "--uplink-capacity", "b=1Gbit",
		"--bmin", "10Mbit", "--print-config")
	if code != ExitOK {
		t.Fatalf("exit %d, config:\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{`"uplink_capacity": {`, `"*": "60Mbit"`, `"b": "1Gbit"`, `"bmin": "10Mbit"`} {
		if !strings.Contains(out, want) {
			t.Errorf("config lacks %s:\n%s", want, out)
		}
	}
	if code, out, _ := runCLI(t, "agent", "--dev", "--print-config"); code != ExitOK || !strings.Contains(out, `"uplink_capacity": {}`) || !strings.Contains(out, `"bmin": 0`) {
		t.Errorf("no flags: exit %d, want no uplink capacity declared and no bmin in:\n%s", code, out)
	}
	for _, bad := range [][]string{{"--uplink-capacity", "a="}, {"--uplink-capacity", "fast"}, {"--bmin", "-1Mbit"}, {"--bmin", "x"}} {
		flag := strings.TrimPrefix(bad[0], "--")
		if code, _, errOut := runCLI(t, append([]string{"agent", "--dev"}, bad...)...); code != ExitUsage || !strings.Contains(errOut, flag) {
			t.Errorf("%v: exit %d, stderr %q; want a usage error naming the flag", bad, code, errOut)
		}
	}
}
