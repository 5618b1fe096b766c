package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/enforce"
	"github.com/reclaimnet/reclaimnet/bpf"
	"github.com/reclaimnet/reclaimnet/internal/netnstest"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/web"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{
		"1Gbit": 125e6, "10gbit": 1.25e9, "100Mbit": 12.5e6, "8kbit": 1e3, "800bit": 100, "1Gbps": 125e6, "125MBps": 125e6,
		"125MB": 125e6, "64MiB": 64 << 20, "1KiB/s": 1024, "2.5GB": 2.5e9, "125000000": 125e6, " 1 Gbit ": 125e6,
	} {
		got, err := ParseRate(in)
		if err != nil || float64(got) != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, float64(got), err, want)
		}
	}
	for _, in := range []string{"", "fast", "0", "-1Gbit", "Gbit", "NaN", "Inf", "1Xbit", "1e400"} {
		if got, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %v, want an error", in, float64(got))
		}
	}
	for _, r := range []Rate{125e6, 1.25e9, 12.5e6, 100, 1e3} {
		back, err := ParseRate(r.String())
		if err != nil || back != r {
			t.Errorf("ParseRate(%q) = %v, %v; want %v back", r.String(), float64(back), err, float64(r))
		}
	}
	var cfg Config
	if err := json.Unmarshal([]byte(`{"link_capacity":"10Gbit"}`), &cfg); err != nil || cfg.LinkCapacity != 1.25e9 {
		t.Errorf("JSON \"10Gbit\": got %v, %v; want 1.25e9", float64(cfg.LinkCapacity), err)
	}
	if err := json.Unmarshal([]byte(`{"link_capacity":5e6}`), &cfg); err != nil || cfg.LinkCapacity != 5e6 {
		t.Errorf("JSON 5e6: got %v, %v; want 5e6", float64(cfg.LinkCapacity), err)
	}
	if err := json.Unmarshal([]byte(`{"link_capacity":"lots"}`), &cfg); err == nil {
		t.Error("JSON \"lots\": no error")
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d: %s", url, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, b)
	}
}

// killSwitchOf reads the kill-switch the status page shows for node.
func killSwitchOf(t *testing.T, httpAddr, node string) web.KillSwitchMode {
	t.Helper()
	var st web.Status
	getJSON(t, "http://"+httpAddr+"/v1/status", &st)
	for _, m := range st.Cluster.Members {
		if string(m.ID) == node {
			return m.KillSwitch
		}
	}
	return ""
}

// Without kernel enforcement (auto on loopback, or --enforce off) a node
// says why, publishes no bandwidth, and every status page in the cluster
// shows its kill-switch as "disabled", never a fake "off".
func TestEnforcementOffShowsDisabled(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	a := c.start(c.config("auto-node"))
	cfg := c.config("off-node")
	cfg.Enforce = enforce.ModeOff
	b := c.start(cfg)
	for _, n := range []*testNode{a, b} {
		var es enforce.Status
		getJSON(t, "http://"+n.info.HTTPAddr+"/v1/enforce", &es)
		if es.Enabled || es.KillSwitch != "disabled" {
			t.Errorf("%s /v1/enforce: enabled %v, kill_switch %q; want false, disabled", n.info.Node, es.Enabled, es.KillSwitch)
		}
		wantMode, wantReason := enforce.ModeAuto, "loopback"
		if n == b {
			wantMode, wantReason = enforce.ModeOff, "--enforce off"
		}
		if es.Mode != wantMode || !strings.Contains(es.OffReason, wantReason) {
			t.Errorf("%s /v1/enforce: mode %q, reason %q; want %q and a reason mentioning %q", n.info.Node, es.Mode, es.OffReason, wantMode, wantReason)
		}
	}
	wait.For(t, 20*time.Second, "both nodes shown as disabled on both status pages", func() bool {
		for _, viewer := range []*testNode{a, b} {
			for _, node := range []string{"auto-node", "off-node"} {
				if killSwitchOf(t, viewer.info.HTTPAddr, node) != "disabled" {
					return false
				}
			}
		}
		return true
	})
	rep, ok := a.agent.Mesh().Report("auto-node")
	if !ok || rep.KillSwitch != mesh.KillSwitchDisabled || rep.Bandwidth != nil {
		t.Errorf("own report: found %v, kill-switch %v, bandwidth %v; want disabled and no bandwidth", ok, rep.KillSwitch, rep.Bandwidth)
	}
	if st := a.agent.Status(); len(st.Members) != 2 || st.Members[0].KillSwitch != "disabled" {
		t.Errorf("members view: %+v; want two members, kill-switch disabled", st.Members)
	}
}

const unprivilegedChildEnv = "RECLAIMNET_AGENT_UNPRIVILEGED_CHILD"

// --enforce on without the privilege fails New with an error that says
// what is missing and what to do, before anything is created. As root the
// test re-runs itself as nobody.
func TestEnforceOnWithoutPrivilege(t *testing.T) {
	t.Parallel()
	if os.Getenv(unprivilegedChildEnv) == "1" || os.Geteuid() != 0 {
		cfg := DefaultConfig()
		cfg.Name, cfg.Dev, cfg.BindAddr, cfg.HTTPAddr, cfg.Enforce = "unpriv", true, "127.0.0.1", "", enforce.ModeOn
		cfg.GossipPort, cfg.RaftPort, cfg.TransferPort = 0, 0, 0
		a, err := New(cfg, testLogger())
		if err == nil {
			a.closeAll()
			if os.Getenv(unprivilegedChildEnv) != "1" {
				t.Skip("not root but holds CAP_BPF and CAP_NET_ADMIN, so it may enforce: nothing to refuse here (as root, CI re-runs this test as nobody, where it must fail)")
			}
			t.Fatal("New with --enforce on as nobody: no error")
		}
		for _, want := range []string{"--enforce on", "needs root", "--enforce auto or off"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("New with --enforce on unprivileged: err = %q, want it to mention %q", err, want)
			}
		}
		fmt.Println("NEW-ERROR:", err)
		return
	}
	out := netnstest.RerunAsNobody(t, "TestEnforceOnWithoutPrivilege", unprivilegedChildEnv+"=1")
	if !strings.Contains(out, "NEW-ERROR:") {
		t.Fatalf("run as nobody did not reach New (skipped?):\n%s", out)
	}
	t.Logf("%s", out)
}

// requireRootKernel skips (or, with CI=true, fails) a test that needs root
// and the kernel's BPF, TC and network namespaces.
func requireRootKernel(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format+" (needs root, BPF, TC and network namespaces; CI=true: it must run)", args...)
	}
	t.Skipf(format+" (needs root, BPF, TC and network namespaces; fails under CI=true)", args...)
}

const netnsChildEnv = "RECLAIMNET_AGENT_NETNS_CHILD"

// An agent with --enforce on inside a network namespace, bound to a veth:
// its kill-switch reaches /v1/status through its gossip telemetry, and
// flipping the switch in the pinned maps (what 'reclaimnet killswitch
// soft' does, with no help from the agent) changes what the page shows
// within a few seconds. The test runs its body again as a child process
// inside the namespace (nsenter), so every thread of that agent is in it.
func TestEnforcementKillSwitchOnStatusPage(t *testing.T) {
	t.Parallel()
	if os.Getenv(netnsChildEnv) == "1" {
		enforcementChild(t, os.Getenv(netnsChildEnv+"_IFACE"), os.Getenv(netnsChildEnv+"_PIN"))
		return
	}
	if os.Geteuid() != 0 {
		requireRootKernel(t, "not root")
	}
	for _, tool := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			requireRootKernel(t, "%s not found", tool)
		}
	}
	sfx := make([]byte, 3)
	rand.Read(sfx)
	s := hex.EncodeToString(sfx)
	ns, ifA, ifB := "rnag-"+s, "rnga"+s, "rngb"+s
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			requireRootKernel(t, "ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run("-n", ns, "link", "set", "lo", "up")
	run("-n", ns, "link", "add", ifA, "type", "veth", "peer", "name", ifB)
	run("-n", ns, "addr", "add", "10.78.0.1/24", "dev", ifA)
	run("-n", ns, "addr", "add", "10.78.0.2/24", "dev", ifB)
	run("-n", ns, "link", "set", ifA, "up")
	run("-n", ns, "link", "set", ifB, "up")
	pin := filepath.Join("/sys/fs/bpf/reclaimnet-test", "agent"+s)
	t.Cleanup(func() { os.RemoveAll(pin) })

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+ns, os.Args[0],
		"-test.run=^TestEnforcementKillSwitchOnStatusPage$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), netnsChildEnv+"=1", netnsChildEnv+"_IFACE="+ifA, netnsChildEnv+"_PIN="+pin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("agent in namespace %s: %v\n%s", ns, err, out)
	}
	if !strings.Contains(string(out), "CHILD-DONE") {
		t.Fatalf("the child did not run the checks (skipped?):\n%s", out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}

func enforcementChild(t *testing.T, iface, pin string) {
	c := newTestCluster(t)
	cfg := c.config("enforced-" + filepath.Base(pin))
	cfg.BindAddr = "10.78.0.1" // default --iface: the veth that holds it
	cfg.TransferPort = 17948
	cfg.Building = "physics"
	cfg.Enforce = enforce.ModeOn
	cfg.BPFPinDir = pin
	n := c.start(cfg)
	node, httpAddr := cfg.Name, n.info.HTTPAddr

	var es enforce.Status
	getJSON(t, "http://"+httpAddr+"/v1/enforce", &es)
	if !es.Enabled || es.Mode != enforce.ModeOn || es.Iface != iface || !slices.Contains(es.Protected, "17948/udp") {
		t.Fatalf("/v1/enforce: enabled %v, mode %q, iface %q, protected %q; want true, on, %s, with 17948/udp",
			es.Enabled, es.Mode, es.Iface, es.Protected, iface)
	}
	for _, p := range es.Protected {
		if _, gossip := n.agent.Mesh().LocalAddr(); p == fmt.Sprintf("%d/udp", gossip) || p == fmt.Sprintf("%d/tcp", gossip) {
			t.Errorf("gossip port %s is protected", p)
		}
	}
	wait.For(t, 15*time.Second, "kill-switch off on the status page", func() bool {
		return killSwitchOf(t, httpAddr, node) == web.KillSwitchOff
	})
	// The measured estimate replaces the leader's default in telemetry.
	wait.For(t, 15*time.Second, "bandwidth towards physics in the node's telemetry", func() bool {
		rep, ok := n.agent.Mesh().Report(node)
		return ok && len(rep.Bandwidth) > 0 && rep.Bandwidth[0].Building == "physics" && rep.Bandwidth[0].Available > 0
	})

	maps, err := bpf.OpenPinned(pin)
	if err != nil {
		t.Fatalf("open pinned maps in %s: %v", pin, err)
	}
	defer maps.Close()
	for _, mode := range []bpf.Mode{bpf.ModeSoft, bpf.ModeHard, bpf.ModeOff} {
		start := time.Now()
		if err := maps.SetKillSwitch(mode); err != nil {
			t.Fatalf("set kill-switch %v: %v", mode, err)
		}
		want := web.KillSwitchMode(mode.String())
		wait.For(t, 10*time.Second, "kill-switch "+string(want)+" on the status page", func() bool {
			return killSwitchOf(t, httpAddr, node) == want
		})
		t.Logf("kill-switch %s reached /v1/status after %v", want, time.Since(start).Round(time.Millisecond))
	}
	// The agent's own orders are timed: a scheduled reclaim sets soft
	// (the histogram's one sample), its cancellation off (no sample).
	if r := call(t, n, localapi.Request{Op: localapi.OpReclaim, Notice: time.Minute}); r.Error != "" {
		t.Fatalf("reclaim: %+v", r)
	}
	wait.For(t, 10*time.Second, "kill-switch soft after the reclaim", func() bool {
		return killSwitchOf(t, httpAddr, node) == web.KillSwitchSoft
	})
	if r := call(t, n, localapi.Request{Op: localapi.OpReclaimCancel}); r.Error != "" {
		t.Fatalf("cancel: %+v", r)
	}
	wait.For(t, 10*time.Second, "kill-switch off after the cancel", func() bool {
		return killSwitchOf(t, httpAddr, node) == web.KillSwitchOff
	})
	for mode, want := range map[string]uint64{"soft": 1, "hard": 0} {
		if got, sum := histogramOf(t, n, "reclaimnet_killswitch_isolate_duration_seconds", map[string]string{"mode": mode}); got != want || (want > 0 && sum <= 0) {
			t.Errorf("time to isolate %s: %d samples (%.6f s), want %d", mode, got, sum, want)
		}
	}
	n.stop(t, false)
	if _, err := os.Stat(pin); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("pin directory after a stop with the switch off: stat err %v, want it removed", err)
	}
	fmt.Println("CHILD-DONE")
}
