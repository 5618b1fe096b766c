package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
)

var testBin string // reclaimnet, built once by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "reclaimnet-packaging-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testBin = filepath.Join(dir, "reclaimnet")
	// The test binary's build settings, so the build cache serves
	// everything but the link.
	if out, err := exec.Command("go", "build", "-o", testBin, "github.com/reclaimnet/reclaimnet").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needTool returns the path of a command the test uses. Under CI=true it
// must be there (.ci/run installs it); elsewhere the test skips without.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found: .ci/run installs it", name)
	}
	t.Skipf("%s not found (CI=true makes this a failure)", name)
	return ""
}

func cmdOutput(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestDebPackage builds the .deb from a freshly built binary and checks
// it as dpkg sees it: the listing, the control fields, the conffile, the
// files' contents, the maintainer scripts (installed, removed and purged
// in a scratch root), and the unit under systemd-analyze verify.
func TestDebPackage(t *testing.T) {
	dpkgDeb := needTool(t, "dpkg-deb")
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The pages the packaged binary writes itself: one per visible
	// command (help and completion included), none for hidden ones.
	pagesDir := t.TempDir()
	cmdOutput(t, testBin, "man", pagesDir)
	pageFiles, _ := filepath.Glob(filepath.Join(pagesDir, "*.1"))
	if len(pageFiles) < 20 {
		t.Fatalf("reclaimnet man wrote %d pages, want one per command", len(pageFiles))
	}

	start := time.Now()
	deb, err := buildDeb(debOptions{Root: root, Binary: testBin, OutDir: t.TempDir(), Maintainer: defaultMaintainer})
	if err != nil {
		t.Fatalf("buildDeb: %v", err)
	}
	fi, err := os.Stat(deb)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s (%.1f MB) in %v", filepath.Base(deb), float64(fi.Size())/1e6, time.Since(start).Round(time.Millisecond))

	listing := cmdOutput(t, dpkgDeb, "-c", deb)
	t.Logf("dpkg-deb -c:\n%s", listing)
	modes := map[string]string{}
	for line := range strings.Lines(listing) {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("listing line %q", line)
		}
		if f[1] != "root/root" {
			t.Errorf("%s owned by %s, want root/root", f[5], f[1])
		}
		modes[strings.TrimPrefix(f[5], ".")] = f[0]
	}
	want := map[string]string{
		binPath:               "-rwxr-xr-x",
		unitPath:              "-rw-r--r--",
		configPath:            "-rw-r--r--",
		docDir + "/copyright": "-rw-r--r--",
		docDir + "/README.md": "-rw-r--r--",
	}
	for _, p := range pageFiles {
		want[manDir+"/"+filepath.Base(p)+".gz"] = "-rw-r--r--"
	}
	for _, p := range []string{"reclaimnet", "reclaimnet-agent", "reclaimnet-run", "reclaimnet-reclaim", "reclaimnet-sim", "reclaimnet-tls-cert-create"} {
		if modes[manDir+"/"+p+".1.gz"] == "" {
			t.Errorf("no man page %s.1.gz in %s", p, manDir)
		}
	}
	for p := range modes {
		if strings.HasPrefix(p, manDir+"/") && !strings.HasSuffix(p, "/") && want[p] == "" {
			t.Errorf("%s: a man page the binary does not write", p)
		}
		if strings.HasPrefix(p, manDir+"/reclaimnet-man.") || strings.HasPrefix(p, manDir+"/reclaimnet-demo-job.") {
			t.Errorf("%s: a man page of a hidden command", p)
		}
	}
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, d := range docs {
		want[docDir+"/docs/"+filepath.Base(d)] = "-rw-r--r--"
	}
	for p, m := range want {
		if modes[p] != m {
			t.Errorf("%s: got mode %q in the package, want %q", p, modes[p], m)
		}
	}

	bi, err := buildinfo.ReadFile(testBin)
	if err != nil {
		t.Fatal(err)
	}
	version := strings.Fields(cmdOutput(t, testBin, "version"))[1]
	fields := map[string]string{}
	for _, k := range []string{"Package", "Version", "Architecture", "Depends", "Maintainer"} {
		fields[k] = strings.TrimSpace(cmdOutput(t, dpkgDeb, "-f", deb, k))
	}
	debVersion := strings.Replace(strings.TrimPrefix(version, "v"), "-", "~", 1)
	if fields["Package"] != "reclaimnet" || fields["Version"] != debVersion || fields["Architecture"] != runtime.GOARCH || fields["Maintainer"] != defaultMaintainer {
		t.Errorf("control fields %v: want reclaimnet %s %s by %s", fields, debVersion, runtime.GOARCH, defaultMaintainer)
	}
	t.Run("libc dependency", func(t *testing.T) {
		got, ok := strings.CutPrefix(fields["Depends"], "libc6 (>= ")
		if !ok || !strings.HasSuffix(got, ")") {
			t.Fatalf("Depends %q: want libc6 (>= VERSION)", fields["Depends"])
		}
		got = strings.TrimSuffix(got, ")")
		// readelf lists the same symbol versions independently.
		readelf := needTool(t, "readelf")
		var newest string
		for _, v := range regexp.MustCompile(`GLIBC_([0-9.]+)`).FindAllStringSubmatch(cmdOutput(t, readelf, "-V", "-W", testBin), -1) {
			if newest == "" || compareVersions(v[1], newest) > 0 {
				newest = v[1]
			}
		}
		if got != newest {
			t.Errorf("Depends: libc6 (>= %s); readelf's newest GLIBC_ version is %s", got, newest)
		}
		// The binary runs here, so this glibc must satisfy it.
		host := strings.TrimPrefix(strings.TrimSpace(cmdOutput(t, "getconf", "GNU_LIBC_VERSION")), "glibc ")
		if compareVersions(got, host) > 0 {
			t.Errorf("Depends: libc6 (>= %s), but the binary runs on glibc %s", got, host)
		}
	})
	if got := strings.TrimSpace(cmdOutput(t, dpkgDeb, "-I", deb, "conffiles")); got != configPath {
		t.Errorf("conffiles: got %q, want %s", got, configPath)
	}

	x := t.TempDir()
	cmdOutput(t, dpkgDeb, "-x", deb, x)
	if a, b := readFile(t, filepath.Join(x, binPath)), readFile(t, testBin); !bytes.Equal(a, b) {
		t.Errorf("%s differs from the binary packaged (%d and %d bytes)", binPath, len(a), len(b))
	}
	unit := readFile(t, filepath.Join(x, unitPath))
	if src, _ := packageFiles.ReadFile("files/reclaimnet.service"); !bytes.Equal(unit, src) {
		t.Errorf("%s differs from files/reclaimnet.service", unitPath)
	}

	t.Run("default config", func(t *testing.T) {
		cfg, err := agent.LoadConfigFile(filepath.Join(x, configPath), agent.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("the shipped config does not validate: %v", err)
		}
		state := parseUnit(t, string(unit))["Service"]["StateDirectory"]
		if len(state) != 1 || cfg.DataDir != "/var/lib/"+state[0] {
			t.Errorf("config data_dir %q, unit StateDirectory %v: want the same directory", cfg.DataDir, state)
		}
		if !strings.Contains(string(unit), "--config "+configPath) {
			t.Errorf("the unit does not start the agent with --config %s", configPath)
		}
	})

	t.Run("copyright", func(t *testing.T) {
		c := string(readFile(t, filepath.Join(x, docDir, "copyright")))
		for _, d := range bi.Deps {
			if !strings.Contains(c, "\n"+d.Path+" "+d.Version+": ") {
				t.Errorf("copyright lacks the licence of %s %s", d.Path, d.Version)
			}
		}
		for _, s := range []string{"Copyright 2009 The Go Authors", "Copyright (c) 2022 UCLASystem", "Mozilla Public License"} {
			if !strings.Contains(c, s) {
				t.Errorf("copyright lacks %q", s)
			}
		}
	})

	t.Run("man pages", func(t *testing.T) {
		z, err := gzip.NewReader(bytes.NewReader(readFile(t, filepath.Join(x, manDir, "reclaimnet-agent.1.gz"))))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(z)
		if src := readFile(t, filepath.Join(pagesDir, "reclaimnet-agent.1")); err != nil || !bytes.Equal(b, src) {
			t.Errorf("reclaimnet-agent.1.gz: %v; want exactly the page the binary writes (%d bytes, got %d)", err, len(src), len(b))
		}
		for _, want := range []string{`.TH "RECLAIMNET" "1"`, "reclaimnet-agent", `\fB--data-dir\fP`} {
			if !bytes.Contains(b, []byte(want)) {
				t.Errorf("reclaimnet-agent.1 lacks %q", want)
			}
		}
		// man itself renders it, where installed.
		if man, err := exec.LookPath("man"); err == nil {
			out, err := exec.Command(man, "-l", filepath.Join(x, manDir, "reclaimnet-agent.1.gz")).CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte("data-dir")) {
				t.Errorf("man -l reclaimnet-agent.1.gz: %v\n%s", err, out)
			}
		}
	})

	t.Run("install remove purge", func(t *testing.T) {
		dpkg := needTool(t, "dpkg")
		if os.Geteuid() != 0 {
			if os.Getenv("CI") == "true" {
				t.Fatal("dpkg --root needs root (CI runs as root)")
			}
			t.Skip("dpkg --root needs root")
		}
		// A scratch dpkg database; the scripts see DPKG_ROOT and touch
		// neither the host's systemd nor its /var/lib.
		r := t.TempDir()
		for _, d := range []string{"var/lib/dpkg/updates", "var/lib/dpkg/info"} {
			if err := os.MkdirAll(filepath.Join(r, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(r, "var/lib/dpkg/status"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		dp := func(args ...string) string {
			return cmdOutput(t, dpkg, append([]string{"--root=" + r, "--force-script-chrootless", "--log=/dev/null"}, args...)...)
		}
		dp("--force-depends", "-i", deb)
		if st := dp("-s", "reclaimnet"); !strings.Contains(st, "Status: install ok installed") || !strings.Contains(st, "Version: "+debVersion) {
			t.Errorf("dpkg -s after install:\n%s", st)
		}
		for _, p := range []string{binPath, unitPath, configPath} {
			if _, err := os.Stat(filepath.Join(r, p)); err != nil {
				t.Errorf("after install: %v", err)
			}
		}
		// The agent's data directory, as the unit's StateDirectory makes it.
		data := filepath.Join(r, "var/lib/reclaimnet")
		if err := os.MkdirAll(data, 0o700); err != nil {
			t.Fatal(err)
		}
		dp("-r", "reclaimnet")
		if _, err := os.Stat(filepath.Join(r, binPath)); !os.IsNotExist(err) {
			t.Errorf("after remove: %s still there (%v)", binPath, err)
		}
		if _, err := os.Stat(filepath.Join(r, configPath)); err != nil {
			t.Errorf("after remove the edited-or-not conffile stays until purge: %v", err)
		}
		dp("-P", "reclaimnet")
		for _, p := range []string{filepath.Join(r, configPath), data} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("after purge: %s still there (%v)", p, err)
			}
		}
	})

	t.Run("systemd-analyze verify", func(t *testing.T) {
		analyze := needTool(t, "systemd-analyze")
		// verify resolves the unit's dependencies (multi-user.target, …)
		// and ExecStart inside --root: give it the host's units beside the
		// extracted package.
		dst := filepath.Join(x, filepath.Dir(unitPath))
		for _, src := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
			entries, _ := os.ReadDir(src)
			for _, e := range entries {
				if !e.Type().IsRegular() {
					continue
				}
				if _, err := os.Stat(filepath.Join(dst, e.Name())); err == nil {
					continue
				}
				if err := os.WriteFile(filepath.Join(dst, e.Name()), readFile(t, filepath.Join(src, e.Name())), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		out, err := exec.Command(analyze, "verify", "--root="+x, filepath.Base(unitPath)).CombinedOutput()
		// verify exits 0 on unknown keys and bad values, but names them.
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
	})
}

// TestUnitKeepsReclaimedNodeDown checks the unit's restart rules against
// how the real binary exits: an agent set to exit at a reclaim (on_reclaim
// exit) exits with a status the unit counts as success and never
// restarts; a stop exits 0. (With the default, stay, a reclaimed agent
// does not exit at all: agent.TestLendAfterReclaim.)
func TestUnitKeepsReclaimedNodeDown(t *testing.T) {
	src, err := packageFiles.ReadFile("files/reclaimnet.service")
	if err != nil {
		t.Fatal(err)
	}
	svc := parseUnit(t, string(src))["Service"]
	if r := svc["Restart"]; !slices.Equal(r, []string{"on-failure"}) {
		t.Errorf("Restart=%v, want on-failure", r)
	}
	if m := svc["KillMode"]; !slices.Equal(m, []string{"mixed"}) {
		t.Errorf("KillMode=%v, want mixed (SIGTERM to the agent alone)", m)
	}

	// Reclaimed: the agent leaves after 'reclaim --now' and exits.
	code, stderr := runAgent(t, "reclaimed", func(dir string) {
		out, err := exec.Command(testBin, "reclaim", "--now", "--data-dir", dir, "--pin-dir", t.TempDir()).CombinedOutput()
		if err != nil {
			t.Fatalf("reclaim --now: %v\n%s", err, out)
		}
	})
	status := strconv.Itoa(code)
	if code == 0 || !slices.Contains(svc["RestartPreventExitStatus"], status) || !slices.Contains(svc["SuccessExitStatus"], status) {
		t.Errorf("a reclaimed agent exits %d; the unit's RestartPreventExitStatus=%v and SuccessExitStatus=%v must both hold it, and it must not be 0",
			code, svc["RestartPreventExitStatus"], svc["SuccessExitStatus"])
	}
	if !strings.Contains(stderr, "reclaimed") {
		t.Errorf("the reclaimed agent's stderr does not say it was reclaimed:\n%s", stderr)
	}

	// Stopped: SIGTERM, as systemctl stop sends it.
	code, stderr = runAgent(t, "stopped", func(dir string) {
		var info localapi.Info
		if err := json.Unmarshal(readFile(t, filepath.Join(dir, localapi.InfoFile)), &info); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(info.PID, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	})
	if code != 0 {
		t.Errorf("an agent stopped with SIGTERM exits %d, want 0\n%s", code, stderr)
	}
}

// runAgent runs a throwaway agent until act has made it exit; it returns
// the exit status and what the agent wrote to stderr.
func runAgent(t *testing.T, name string, act func(dataDir string)) (int, string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(testBin, "agent", "--dev", "--name", "pkg-"+name, "--data-dir", dir, "--bind", "127.0.0.1",
		"--http", "", "--gossip-port", "0", "--raft-port", "0", "--transfer-port", "0", "--local-timings", "--enforce", "off",
		"--on-reclaim", "exit")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	wait.For(t, 30*time.Second, name+" agent leads its one-node cluster", func() bool {
		out, err := exec.Command(testBin, "members", "--data-dir", dir).Output()
		return err == nil && strings.Contains(string(out), " leader ")
	})
	act(dir)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s agent still running\n%s", name, stderr.String())
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// parseUnit reads a systemd unit: section, key, the value's words (a key
// given twice appends).
func parseUnit(t *testing.T, text string) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	var sec string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			sec = strings.Trim(line, "[]")
			out[sec] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || sec == "" {
				t.Fatalf("unit line %q", line)
			}
			out[sec][k] = append(out[sec][k], strings.Fields(v)...)
		}
	}
	return out
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// compareVersions orders dotted numeric versions ("2.3.2" < "2.34").
func compareVersions(a, b string) int {
	num := func(s string) []int {
		var n []int
		for p := range strings.SplitSeq(s, ".") {
			x, _ := strconv.Atoi(p)
			n = append(n, x)
		}
		return n
	}
	return slices.Compare(num(a), num(b))
}
