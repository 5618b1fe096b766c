package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentProtocolsFlags: --protocols and --fixed-interval reach the
// agent's configuration; a bad list or interval is a usage error (exit 2)
// that names the valid protocols; an empty list switches all off.
func TestAgentProtocolsFlags(t *testing.T) {
	code, out, errOut := runCLI(t, "agent", "--dev", "--protocols", "p1,p3", "--fixed-interval", "90s", "--print-config")
	if code != ExitOK || !strings.Contains(out, `"protocols": "p1,p3"`) || !strings.Contains(out, `"fixed_interval": "1m30s"`) {
		t.Fatalf("exit %d, config:\n%s\n%s", code, out, errOut)
	}
	if code, out, _ := runCLI(t, "agent", "--dev", "--protocols", "", "--print-config"); code != ExitOK || !strings.Contains(out, `"protocols": "none"`) {
		t.Errorf("--protocols \"\": exit %d, want all off (\"none\") in:\n%s", code, out)
	}
	// Not given: the config file's setting stays (empty there means all on).
	path := filepath.Join(t.TempDir(), "agent.json")
	os.WriteFile(path, []byte(`{"protocols":"p2"}`), 0o600)
	if code, out, _ := runCLI(t, "agent", "--dev", "--config", path, "--print-config"); code != ExitOK || !strings.Contains(out, `"protocols": "p2"`) {
		t.Errorf("config file's protocols: exit %d, want p2 kept in:\n%s", code, out)
	}
	for _, bad := range [][]string{{"--protocols", "p1,p4"}, {"--protocols", "p1,p1"}, {"--fixed-interval", "-1m"}, {"--fixed-interval", "soon"}} {
		code, _, errOut := runCLI(t, append([]string{"agent", "--dev"}, bad...)...)
		if code != ExitUsage {
			t.Errorf("agent %v: exit %d, want %d (usage); stderr %q", bad, code, ExitUsage, errOut)
		}
		if bad[0] == "--protocols" && !strings.Contains(errOut, "p1") {
			t.Errorf("agent %v: stderr %q should name the valid protocols", bad, errOut)
		}
	}
}

// TestTraceUsage: 'trace' needs its 'export' verb.
func TestTraceUsage(t *testing.T) {
	for _, args := range [][]string{{"trace"}, {"trace", "import"}, {"trace", "export", "extra"}} {
		if code, _, errOut := runCLI(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d; stderr %q", args, code, ExitUsage, errOut)
		}
	}
	if code, _, errOut := runCLI(t, "trace", "export", "--data-dir", t.TempDir()); code != ExitError || !strings.Contains(errOut, "agent") {
		t.Errorf("trace export without an agent: exit %d, stderr %q; want exit 1 about the agent", code, errOut)
	}
}
