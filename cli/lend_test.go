package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent"
	"github.com/reclaimnet/reclaimnet/agent/owner"
)

func TestLendCommandLine(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"lend", "--status", "--until", "18:00", "--data-dir", dir}, ExitUsage, "--status and --until do not go together"},
		{[]string{"lend", "--until", "", "--data-dir", dir}, ExitUsage, "--until needs a time"},
		{[]string{"lend", "now", "--data-dir", dir}, ExitUsage, "unexpected arguments"},
		{[]string{"lend", "--until", "soon", "--data-dir", dir}, ExitUsage, "--until: until \"soon\": want HH:MM"},
		{[]string{"lend", "--until", "Fry 18:00", "--data-dir", dir}, ExitUsage, `unknown day "Fry"`},
		{[]string{"lend", "--data-dir", dir}, ExitError, "no agent running"},
		{[]string{"agent", "--lend-window", "Mon-Fry 19:00-08:00", "--print-config"}, ExitUsage, `unknown day "Fry"`},
		{[]string{"agent", "--owner-gpu", "soon", "--print-config"}, ExitUsage, "owner gpu"},
		{[]string{"agent", "--on-reclaim", "maybe", "--print-config"}, ExitUsage, "--on-reclaim"},
		{[]string{"agent", "--lend-lead", "0s"}, ExitUsage, "must be positive"},
	} {
		code, _, errOut := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	// The owner flags reach the configuration --print-config shows.
	code, out, errOut := runCLI(t, "agent", "--lend-window", "Mon-Fri 19:00-08:00", "--lend-window", "Sat,Sun", "--lend-tz", "Europe/Berlin",
		"--owner-gpu", "now", "--owner-idle", "20m", "--owner-max-reclaims", "2", "--on-reclaim", "exit", "--print-config")
	var cfg agent.Config
	if code != ExitOK || json.Unmarshal([]byte(out), &cfg) != nil {
		t.Fatalf("--print-config: exit %d, %s %s", code, out, errOut)
	}
	o := cfg.Owner
	if len(o.LendWindows) != 2 || o.LendTZ != "Europe/Berlin" || o.GPU != "now" || o.Idle != owner.Duration(20*time.Minute) ||
		o.MaxReclaimsPerHour != 2 || cfg.OnReclaim != agent.OnReclaimExit || o.LendLead != owner.Duration(owner.DefaultLead) {
		t.Errorf("--print-config owner %+v, on_reclaim %q", o, cfg.OnReclaim)
	}
}

// TestLendAgainstAgent: lend --status on a running agent, lend --until,
// and lend during a reclaim's notice withdrawing it.
func TestLendAgainstAgent(t *testing.T) {
	cfg := soloConfig(t)
	a, _ := startSolo(t, cfg)
	dir := cfg.DataDir

	code, out, errOut := runCLI(t, "lend", "--status", "--data-dir", dir)
	for _, want := range []string{"policy:\n  lending windows: always", "owner activity: gpu notice 2m0s", "state: lent", "next planned reclaim: none"} {
		if code != ExitOK || !strings.Contains(out, want) {
			t.Errorf("lend --status: exit %d, stdout %q (stderr %q): missing %q", code, out, errOut, want)
		}
	}
	code, out, _ = runCLI(t, "lend", "--status", "--json", "--data-dir", dir)
	var st owner.Status
	if code != ExitOK || json.Unmarshal([]byte(out), &st) != nil || st.State != owner.StateLent || !st.Lent {
		t.Errorf("lend --status --json: exit %d, %s", code, out)
	}
	code, out, errOut = runCLI(t, "lend", "--until", "1m", "--data-dir", dir)
	if code != ExitError || !strings.Contains(errOut, "not more than the lead time") {
		t.Errorf("lend --until 1m (within the 10m lead): exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	if code, out, errOut := runCLI(t, "reclaim", "--data-dir", dir, "--notice", "10m", "--detach"); code != ExitOK {
		t.Fatalf("reclaim --notice: exit %d, %s %s", code, out, errOut)
	}
	code, out, _ = runCLI(t, "lend", "--status", "--data-dir", dir)
	if code != ExitOK || !strings.Contains(out, "state: reclaiming: reclaimed by the owner") {
		t.Errorf("lend --status during the owner's reclaim: %q", out)
	}
	code, out, errOut = runCLI(t, "lend", "--data-dir", dir)
	if code != ExitOK || !strings.Contains(out, "lent; the node rejoins") || !strings.Contains(out, "state: lent: lent by the owner (reclaimnet lend)") {
		t.Errorf("lend: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, ok := a.Coordinator().State().Reclaims["solo"]; ok {
		t.Error("the reclaim is still in the replicated state after lend")
	}
	code, out, _ = runCLI(t, "reclaim", "--data-dir", dir, "--status")
	if code != ExitOK || !strings.Contains(out, "no reclaim under way") {
		t.Errorf("reclaim --status after lend: %q", out)
	}
}
