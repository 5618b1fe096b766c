package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
)

// The agent's sandbox flags reach its configuration; bad values are usage
// errors.
func TestAgentSandboxFlagsConfig(t *testing.T) {
	code, out, errOut := runCLI(t, "agent", "--dev", "--sandbox", "off", "--guest-uids", "3000000-3000099", "--guest-memory", "64GiB",
		"--guest-cpus", "12", "--guest-ro-path", "/datasets", "--guest-ro-path", "/opt/sw", "--print-config")
	if code != ExitOK {
		t.Fatalf("print-config: exit %d, stderr %q", code, errOut)
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["sandbox"] != "off" || cfg["guest_uids"] != "3000000-3000099" || cfg["guest_memory"] != "64GiB" || cfg["guest_cpus"] != 12.0 {
		t.Errorf("config %v, want the sandbox flags", cfg)
	}
	if ro, _ := json.Marshal(cfg["guest_ro_paths"]); string(ro) != `["/datasets","/opt/sw"]` {
		t.Errorf("guest_ro_paths %s, want both paths in order", ro)
	}
	if code, out, _ := runCLI(t, "agent", "--dev", "--print-config"); code != ExitOK || !strings.Contains(out, `"sandbox": "on"`) || !strings.Contains(out, `"guest_uids": "2100000000-2100000999"`) {
		t.Errorf("defaults: exit %d, config does not show the sandbox's defaults:\n%s", code, out)
	}
	for _, args := range [][]string{
		{"--sandbox", "maybe"},
		{"--guest-memory", "lots"},
		{"--guest-cpus", "four"},
	} {
		if code, _, errOut := runCLI(t, append([]string{"agent", "--dev"}, args...)...); code != ExitUsage || !strings.Contains(errOut, args[0]) {
			t.Errorf("agent %v: exit %d, stderr %q; want a usage error naming the flag", args, code, errOut)
		}
	}
	for _, args := range [][]string{
		{"--guest-uids", "10-5"},
		{"--guest-ro-path", "relative/path"},
		{"--guest-cpus", "-2"},
	} {
		if code, _, errOut := runCLI(t, append([]string{"agent", "--dev", "--http", ""}, args...)...); code == ExitOK || errOut == "" {
			t.Errorf("agent %v: exit %d, stderr %q; want an error", args, code, errOut)
		}
	}
}

// An agent process run with --sandbox off says so in its log and in
// 'reclaimnet status'; one whose --guest-ro-path does not exist does not
// start.
func TestAgentSandboxOffProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs agent processes")
	}
	c := newProcessCluster(t)
	c.key = strings.TrimSpace(c.mustRun("keygen"))
	c.mustRun("tls", "ca", "create", "--dir", "ca")
	for _, n := range []string{"trusted", "typo"} {
		c.mustRun("tls", "cert", "create", "--node", n, "--ca-dir", "ca", "--out", filepath.Join(n, "tls"))
	}
	c.startAgent("trusted", "--sandbox", "off", "--gossip-port", "0", "--raft-port", "0")
	wait.For(t, 30*time.Second, "status showing the sandbox off", func() bool {
		out, err := c.run("status", "--data-dir", c.dataDir("trusted"))
		return err == nil && strings.Contains(out, "Sandbox:   sandbox off: jobs run unconfined, as the agent's user\n")
	})
	b, err := os.ReadFile(filepath.Join(c.root, "trusted.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "level=WARN msg=\"sandbox off: jobs run unconfined, as the agent's user\"") {
		t.Errorf("the agent's log does not warn that the sandbox is off:\n%s", b)
	}

	out, err := c.run("agent", "--name", "typo", "--data-dir", c.dataDir("typo"), "--bind", "127.0.0.1", "--http", "",
		"--gossip-key", c.key, "--tls-dir", filepath.Join(c.root, "typo", "tls"), "--gossip-port", "0", "--raft-port", "0", "--transfer-port", "0",
		"--guest-ro-path", filepath.Join(c.root, "no-such-dataset"))
	if err == nil || !strings.Contains(err.Error(), "--guest-ro-path") || !strings.Contains(err.Error(), "no-such-dataset") {
		t.Errorf("agent with a missing guest path: %v (stdout %q), want a start-up error naming it", err, out)
	}
}
