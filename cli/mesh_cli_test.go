package cli

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reclaimnet/reclaimnet/agent"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/pki"
)

func TestKeygen(t *testing.T) {
	code, out, errOut := runCLI(t, "keygen")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out))
	if err != nil || len(key) != 32 {
		t.Fatalf("keygen printed %q: %d bytes, err %v; want 32 base64 bytes", out, len(key), err)
	}
	if _, err := agent.DecodeGossipKey(strings.TrimSpace(out)); err != nil {
		t.Errorf("the agent refuses keygen's key: %v", err)
	}
	_, out2, _ := runCLI(t, "keygen")
	if out2 == out {
		t.Errorf("two keygen runs printed the same key")
	}
	// --out: a new file of mode 0600 the agent reads; never replaced.
	path := filepath.Join(t.TempDir(), "gossip.key")
	if code, _, errOut := runCLI(t, "keygen", "--out", path); code != ExitOK {
		t.Fatalf("keygen --out: exit %d: %s", code, errOut)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("keygen --out wrote %v (%v), want mode 0600", fi, err)
	}
	if _, err := agent.ReadGossipKeyFile(path); err != nil {
		t.Errorf("the agent refuses keygen's key file: %v", err)
	}
	if code, _, errOut := runCLI(t, "keygen", "--out", path); code != ExitError || !strings.Contains(errOut, path) {
		t.Errorf("keygen --out onto an existing key: exit %d, stderr %q; want exit 1 naming the file", code, errOut)
	}
}

func TestTLSCommands(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca")
	if code, _, errOut := runCLI(t, "tls", "ca", "create", "--dir", ca); code != ExitOK {
		t.Fatalf("tls ca create: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, "tls", "ca", "create", "--dir", ca); code != ExitError || !strings.Contains(errOut, "refusing to overwrite") {
		t.Errorf("second tls ca create: exit %d, stderr %q; want exit 1 refusing to overwrite", code, errOut)
	}
	out := filepath.Join(dir, "node-a")
	if code, _, errOut := runCLI(t, "tls", "cert", "create", "--node", "node-a", "--ca-dir", ca, "--out", out, "--host", "10.0.0.5"); code != ExitOK {
		t.Fatalf("tls cert create: exit %d: %s", code, errOut)
	}
	b, err := pki.LoadNode(out)
	if err != nil {
		t.Fatalf("LoadNode on the created dir: %v", err)
	}
	if b.Node != "node-a" {
		t.Errorf("certificate node: got %q, want node-a", b.Node)
	}
	if fi, err := os.Stat(filepath.Join(out, pki.NodeKeyFile)); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("node key permissions: %v, %v; want no group/other access", fi.Mode(), err)
	}
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"tls", "cert", "create", "--ca-dir", ca}, ExitUsage, "--node is required"},
		{[]string{"tls", "cert", "create", "--node", "bad name!", "--ca-dir", ca}, ExitUsage, "--node"},
		{[]string{"tls", "cert", "create", "--node", "x", "--ca-dir", filepath.Join(dir, "none")}, ExitError, "no CA in"},
		{[]string{"tls", "frob", "create"}, ExitUsage, "unknown tls command"},
		{[]string{"tls"}, ExitUsage, "want 'tls ca create'"},
	} {
		code, _, errOut := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.err) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d containing %q", tc.args, code, errOut, tc.code, tc.err)
		}
	}
}

func TestClientCommandsWithoutAgent(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"members", "--data-dir", dir},
		{"status", "--data-dir", dir},
		{"join", "--data-dir", dir, "10.0.0.1"},
	} {
		code, _, errOut := runCLI(t, args...)
		if code != ExitError || !strings.Contains(errOut, "no agent running") {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 with 'no agent running'", args, code, errOut)
		}
	}
	if code, _, errOut := runCLI(t, "join", "--data-dir", dir); code != ExitUsage || !strings.Contains(errOut, "at least one peer") {
		t.Errorf("join without a peer: exit %d, stderr %q; want exit 2", code, errOut)
	}
}

func TestAgentFlagsOverrideConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.json")
	os.WriteFile(path, []byte(`{"name":"from-file","building":"physics","gossip_port":8000,"join":["a","b"]}`), 0o600)
	code, out, errOut := runCLI(t, "agent", "--config", path, "--building", "chemistry", "--join", "c", "--print-config")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{`"name": "from-file"`, `"building": "chemistry"`, `"gossip_port": 8000`, `"c"`} {
		if !strings.Contains(out, want) {
			t.Errorf("effective config lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, `"a"`) {
		t.Errorf("--join should replace the file's join list:\n%s", out)
	}
	if code, _, errOut := runCLI(t, "agent", "--name", "x", "--data-dir", t.TempDir(), "--tls-dir", "y"); code != ExitError || !strings.Contains(errOut, "keygen") {
		t.Errorf("agent without a gossip key: exit %d, stderr %q; want exit 1 with a keygen hint", code, errOut)
	}
}

func TestMembersTable(t *testing.T) {
	var buf bytes.Buffer
	printMembers(&buf, []localapi.MemberView{
		{Name: "gpu-01", Building: "physics", State: "alive", Role: "leader", GPUs: 4, FreeGPUs: 2, GPUModel: "A100",
			Hazard: 0.99 / 3600, Bandwidth: []localapi.BuildingBandwidth{{Building: "physics", Available: 102.5e6}}, Addr: "10.0.0.1:7946"},
		{Name: "gpu-02", State: "dead", Role: "-", Addr: "10.0.0.2:7946"},
	})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("table has %d lines, want 3:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{"gpu-01", "physics", "alive", "leader", "2/4 A100", "0.99/h", "physics:820Mb/s"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("row %q lacks %q", lines[1], want)
		}
	}
	if f := strings.Fields(lines[2]); f[1] != "-" || f[2] != "dead" {
		t.Errorf("row %q: want building '-' and state dead", lines[2])
	}
}
