package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reclaimnet/reclaimnet/bpf"
)

// TestKillSwitchCommand runs `reclaimnet killswitch` against maps pinned
// by an enforcer, as the owner would with or without a running agent.
func TestKillSwitchCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (BPF) and CI=true: it must run here")
		}
		t.Skip("needs root (BPF); run as root to exercise the kernel")
	}
	b := make([]byte, 3)
	rand.Read(b)
	pinDir := filepath.Join("/sys/fs/bpf/reclaimnet-test", "cli"+hex.EncodeToString(b))
	e, err := bpf.Open(bpf.Config{Iface: "lo", PinDir: pinDir, NoEgress: true, NoIngress: true})
	if err != nil {
		t.Fatalf("open enforcer: %v", err)
	}
	defer e.Close()
	if err := e.ProtectPorts(bpf.Port{Proto: bpf.ProtoUDP, Number: 7948}, bpf.Port{Proto: bpf.ProtoTCP, Number: 8080}); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Run(context.Background(), append([]string{"reclaimnet", "killswitch"}, args...), strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, stderr := run("status", "--pin-dir", pinDir)
	if code != 0 || !strings.Contains(out, "mode:            off") || !strings.Contains(out, "7948/udp 8080/tcp") {
		t.Errorf("status: exit %d, stdout %q, stderr %q; want 0, mode off, ports 7948/udp 8080/tcp", code, out, stderr)
	}
	code, out, stderr = run("status", "--pin-dir", pinDir, "--json")
	var view KillSwitchView
	if err := json.Unmarshal([]byte(out), &view); code != 0 || err != nil || view.KillSwitch != "off" || view.PinDir != pinDir ||
		strings.Join(view.Protected, " ") != "7948/udp 8080/tcp" || view.IngressLinkPinned {
		t.Errorf("status --json: exit %d, %+v (%v), stderr %q; want mode off, the two ports, no TCX link (ingress not attached)", code, view, err, stderr)
	}
	for _, m := range []bpf.Mode{bpf.ModeHard, bpf.ModeSoft, bpf.ModeOff} {
		code, out, stderr := run("--pin-dir", pinDir, m.String()) // flags before the action work too
		if code != 0 || !strings.Contains(out, "kill-switch "+m.String()) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 0", m, code, out, stderr)
		}
		if got, err := e.KillSwitch(); err != nil || got != m {
			t.Errorf("mode after `killswitch %s` = %s, %v; want %s", m, got, err, m)
		}
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "missing action"},
		{[]string{"medium", "--pin-dir", pinDir}, 2, "unknown action"},
		{[]string{"hard", "--node", "x", "--pin-dir", pinDir}, 2, "not both"},
		{[]string{"hard", "--node", "../etc"}, 2, "cannot name a pin directory"},
		{[]string{"status", "extra", "--pin-dir", pinDir}, 2, "unexpected"},
		{[]string{"hard", "--pin-dir", pinDir + "-absent"}, 1, "no pinned reclaimnet maps"},
		{[]string{"hard", "--pin-dir", t.TempDir()}, 1, "bpffs not mounted"},
	} {
		code, _, stderr := run(c.args...)
		if code != c.code || !strings.Contains(stderr, c.msg) {
			t.Errorf("killswitch %q: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.msg)
		}
	}
	if got, _ := e.KillSwitch(); got != bpf.ModeOff {
		t.Errorf("failed commands changed the mode to %s, want off", got)
	}
}
