package cli

import (
	"strings"
	"testing"
)

// TestAgentFixedLoadFlag: --fixed-load reaches the configuration (absent,
// the host's load is measured); a negative or non-numeric load is a usage
// error.
func TestAgentFixedLoadFlag(t *testing.T) {
	code, out, errOut := runCLI(t, "agent", "--dev", "--fixed-load", "0.1", "--print-config")
	if code != ExitOK || !strings.Contains(out, `"fixed_load": 0.1`) {
		t.Fatalf("exit %d, config:\n%s\n%s", code, out, errOut)
	}
	if code, out, _ := runCLI(t, "agent", "--dev", "--print-config"); code != ExitOK || !strings.Contains(out, `"fixed_load": null`) {
		t.Errorf("no --fixed-load: exit %d, want the load measured (fixed_load null) in:\n%s", code, out)
	}
	for _, bad := range []string{"-0.5", "busy", "NaN"} {
		if code, _, errOut := runCLI(t, "agent", "--dev", "--fixed-load", bad); code != ExitUsage || !strings.Contains(errOut, "fixed-load") {
			t.Errorf("--fixed-load %s: exit %d, stderr %q; want usage error naming the flag", bad, code, errOut)
		}
	}
}

// TestAgentRaftHeartbeatFlag: --raft-heartbeat reaches the configuration;
// a non-duration is a usage error and a too-short one is refused.
func TestAgentRaftHeartbeatFlag(t *testing.T) {
	code, out, errOut := runCLI(t, "agent", "--dev", "--raft-heartbeat", "750ms", "--print-config")
	if code != ExitOK || !strings.Contains(out, `"raft_heartbeat": "750ms"`) {
		t.Fatalf("exit %d, config:\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, "agent", "--dev", "--raft-heartbeat", "soon"); code != ExitUsage {
		t.Errorf("--raft-heartbeat soon: exit %d, want %d; stderr %q", code, ExitUsage, errOut)
	}
	if code, _, errOut := runCLI(t, "agent", "--dev", "--raft-heartbeat", "1ms"); code == ExitOK || !strings.Contains(errOut, "at least 10ms") {
		t.Errorf("--raft-heartbeat 1ms: exit %d, stderr %q; want a refusal naming the 10ms floor", code, errOut)
	}
}
