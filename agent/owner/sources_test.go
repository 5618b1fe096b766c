package owner

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/gpu"
	"github.com/reclaimnet/reclaimnet/internal/wait"
)

func TestUnderCgroup(t *testing.T) {
	const parent = "/reclaimnet/guests"
	for _, tc := range []struct {
		name, text string
		want       bool
	}{
		{"v2 job", "0::/reclaimnet/guests/job-7\n", true},
		{"v2 the parent itself", "0::/reclaimnet/guests\n", true},
		{"v2 owner", "0::/user.slice/user-1000.slice/session-2.scope\n", false},
		{"a sibling sharing the prefix", "0::/reclaimnet/guests2/job-1\n", false},
		{"hybrid, job in a v1 controller", "12:memory:/reclaimnet/guests/job-7\n4:pids:/\n0::/\n", true},
		{"hybrid, job in the v2 hierarchy", "12:memory:/\n1:name=systemd:/user.slice\n0::/reclaimnet/guests/job-7\n", true},
		{"hybrid owner", "12:memory:/user.slice\n0::/user.slice/session-2.scope\n", false},
		{"a colon in the path", "0::/reclaimnet/guests/job:7\n", true},
		{"garbage", "no colons here\n", false},
		{"empty", "", false},
	} {
		if got := underCgroup([]byte(tc.text), parent); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNewGuests(t *testing.T) {
	for _, bad := range []string{"", "reclaimnet/guests", "/", "//", "/.."} {
		if _, err := NewGuests("", bad); err == nil {
			t.Errorf("NewGuests(%q) accepted it", bad)
		}
	}
	g, err := NewGuests("", "/reclaimnet/guests/")
	if err != nil || g.Parent != "/reclaimnet/guests" || g.ProcRoot != "/proc" {
		t.Errorf("NewGuests: %+v, %v", g, err)
	}
}

// statLine is a /proc/PID/stat line with the fields ProcCPU reads.
func statLine(pid int, comm string, flags, utime, stime, start uint64) string {
	f := make([]string, 50)
	for i := range f {
		f[i] = "0"
	}
	f[0] = "S"
	f[9-3], f[14-3], f[15-3], f[22-3] = fmt.Sprint(flags), fmt.Sprint(utime), fmt.Sprint(stime), fmt.Sprint(start)
	return fmt.Sprintf("%d (%s) %s\n", pid, comm, strings.Join(f, " "))
}

func TestParseProcStat(t *testing.T) {
	st, err := parseProcStat([]byte(statLine(42, "a (b) c)", pfKthread, 120, 30, 999)))
	if err != nil || st.comm != "a (b) c)" || st.flags != pfKthread || st.ticks != 150 || st.start != 999 {
		t.Errorf("parsed %+v, %v", st, err)
	}
	for _, bad := range []string{"", "42 no comm", "42 (x) S 1 2", "42 (x) S " + strings.Repeat("x ", 30)} {
		if st, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) = %+v, want an error", bad, st)
		}
	}
}

// fakeProc is a proc tree in a temporary directory.
type fakeProc struct{ root string }

func newFakeProc(t *testing.T) fakeProc {
	p := fakeProc{t.TempDir()}
	p.uptime(t, 1000)
	return p
}

func (p fakeProc) uptime(t *testing.T, secs float64) {
	if err := os.WriteFile(filepath.Join(p.root, "uptime"), fmt.Appendf(nil, "%.2f 1234.00\n", secs), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (p fakeProc) proc(t *testing.T, pid int, comm, cgroup string, flags, ticks, start uint64) {
	dir := filepath.Join(p.root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"cgroup": cgroup,
		"comm":   comm + "\n",
		"stat":   statLine(pid, comm, flags, ticks, 0, start),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (p fakeProc) gone(t *testing.T, pid int) {
	if err := os.RemoveAll(filepath.Join(p.root, strconv.Itoa(pid))); err != nil {
		t.Fatal(err)
	}
}

const (
	guestCgroup = "0::/reclaimnet/guests/job-1\n"
	ownerCgroup = "0::/user.slice/session-2.scope\n"
)

// listed is a fake GPU process list (this machine has no GPU).
type listed []gpu.Process

func (l listed) Processes(context.Context) ([]gpu.Process, error) { return l, nil }

func TestGPUSourceTellsGuestsApart(t *testing.T) {
	p := newFakeProc(t)
	p.proc(t, 100, "guest-train", guestCgroup, 0, 0, 1)
	p.proc(t, 200, "python3", ownerCgroup, 0, 0, 1)
	p.proc(t, 300, "blender", ownerCgroup, 0, 0, 1)
	g, err := NewGuests(p.root, "/reclaimnet/guests")
	if err != nil {
		t.Fatal(err)
	}
	src := GPUSource{
		// 400 exited between the list and the cgroup check.
		Lister: listed{{PID: 100, DeviceIndex: 0}, {PID: 200, DeviceIndex: 0}, {PID: 300, DeviceIndex: 2}, {PID: 400, DeviceIndex: 0}},
		Lent:   []int{0, 1},
		Guests: g,
	}
	got, err := src.OwnerGPUProcesses(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != (GPUProcess{PID: 200, GPU: 0, Name: "python3"}) {
		t.Errorf("owner's processes %+v, want only 200 on GPU 0 (100 is a guest's, 300 is on GPU 2, not lent)", got)
	}
	src.Lent = nil
	if got, _ := src.OwnerGPUProcesses(context.Background()); len(got) != 2 {
		t.Errorf("every GPU lent: %+v, want 200 and 300", got)
	}
}

func TestProcCPUFake(t *testing.T) {
	p := newFakeProc(t)
	g, _ := NewGuests(p.root, "/reclaimnet/guests")
	c := &ProcCPU{Guests: g, Exclude: []int{7}}
	p.proc(t, 7, "reclaimnet", ownerCgroup, 0, 0, 10)       // the agent
	p.proc(t, 10, "make", ownerCgroup, 0, 1000, 100)        // the owner's
	p.proc(t, 11, "python3", guestCgroup, 0, 5000, 100)     // a guest's
	p.proc(t, 12, "kworker/0:1", "0::/\n", pfKthread, 0, 5) // a kernel thread
	p.proc(t, 13, "vim", ownerCgroup, 0, 10, 100)
	if _, ok, err := c.OwnerCPU(context.Background()); ok || err != nil {
		t.Fatalf("first call: ok %v, %v; want no interval yet", ok, err)
	}
	p.uptime(t, 1002)
	p.proc(t, 7, "reclaimnet", ownerCgroup, 0, 900, 10)
	p.proc(t, 10, "make", ownerCgroup, 0, 1300, 100)    // +300 ticks
	p.proc(t, 11, "python3", guestCgroup, 0, 9000, 100) // not counted
	p.proc(t, 12, "kworker/0:1", "0::/\n", pfKthread, 900, 5)
	p.gone(t, 13)                                     // exited: its last interval is lost
	p.proc(t, 14, "cc1", ownerCgroup, 0, 60, 100_050) // started since: all 60 ticks
	p.proc(t, 15, "late", ownerCgroup, 0, 500, 100)   // older, first seen now: not counted
	load, ok, err := c.OwnerCPU(context.Background())
	if err != nil || !ok {
		t.Fatalf("second call: ok %v, %v", ok, err)
	}
	if want := (300.0 + 60) / clockTicks / 2; load.Cores < want-1e-9 || load.Cores > want+1e-9 || load.TopPID != 10 || load.TopName != "make" {
		t.Errorf("load %+v, want %.2f cores, busiest 10 make", load, want)
	}
	// PID 10 reused by a new process: a new key.
	p.uptime(t, 1003)
	p.proc(t, 10, "make", ownerCgroup, 0, 20, 100_250)
	load, _, _ = c.OwnerCPU(context.Background())
	if want := 20.0 / clockTicks; load.Cores < want-1e-9 || load.Cores > want+1e-9 {
		t.Errorf("after PID reuse %+v, want %.2f cores", load, want)
	}
}

// requirePrivileged skips a test that needs root and cgroups, or fails it
// with CI=true.
func requirePrivileged(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// testGuestCgroup makes a guests' parent cgroup with one job cgroup in the
// cgroup v2 hierarchy (pure v2, or the hybrid layout's unified one) and
// returns a function that moves a process into the job.
func testGuestCgroup(t *testing.T) (join func(pid int)) {
	t.Helper()
	if os.Geteuid() != 0 {
		requirePrivileged(t, "needs root to make cgroups")
	}
	var root string
	for _, r := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(r, "cgroup.procs")); err == nil {
			if _, err := os.Stat(filepath.Join(r, "cgroup.controllers")); err == nil {
				root = r
				break
			}
		}
	}
	if root == "" {
		requirePrivileged(t, "no cgroup v2 hierarchy mounted")
	}
	top := filepath.Join(root, fmt.Sprintf("rn-owner-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	job := filepath.Join(top, "guests", "job-1")
	if err := os.MkdirAll(job, 0o755); err != nil {
		requirePrivileged(t, "make a cgroup: %v", err)
	}
	t.Cleanup(func() {
		for _, d := range []string{job, filepath.Dir(job), top} {
			if err := os.Remove(d); err != nil {
				t.Errorf("remove cgroup %s: %v", d, err)
			}
		}
	})
	return func(pid int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(job, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			t.Fatalf("move %d into %s: %v", pid, job, err)
		}
	}
}

// start runs a command for the test and stops it at the end.
func start(t *testing.T, name string, args ...string) int {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd.Process.Pid
}

// guestParent moves pid into the job cgroup and returns the guests'
// parent as /proc/PID/cgroup shows it (relative to this process's cgroup
// namespace).
func guestParent(t *testing.T, join func(int), pid int) string {
	t.Helper()
	join(pid)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok && strings.HasSuffix(p, "/guests/job-1") {
			return path.Dir(p)
		}
	}
	t.Fatalf("process %d not in the job cgroup: %s", pid, b)
	return ""
}

// A real process in the guests' cgroup holding "a GPU" (the GPU list is
// faked: no GPU here) does not end lending; the owner's process outside
// it does, with its PID and name in the reason.
func TestGPUSourceRealCgroup(t *testing.T) {
	join := testGuestCgroup(t)
	guest := start(t, "sleep", "300")
	owner := start(t, "sleep", "301")
	parent := guestParent(t, join, guest)
	g, err := NewGuests("", parent)
	if err != nil {
		t.Fatal(err)
	}
	p := policy(t, Config{LendTZ: "UTC"})
	now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	lent, _ := p.Decide(State{}, Observations{}, now)

	obs := (&Observer{GPU: GPUSource{Lister: listed{{PID: guest, DeviceIndex: 0}}, Guests: g}}).Observe(context.Background())
	if !obs.GPUKnown || len(obs.GPU) != 0 || len(obs.Problems) != 0 {
		t.Fatalf("guest only: %+v, want no owner process", obs)
	}
	if _, d := p.Decide(lent, obs, now.Add(5*time.Second)); d.Do != Nothing {
		t.Errorf("a guest's GPU process: %s, want nothing", d)
	}

	obs = (&Observer{GPU: GPUSource{Lister: listed{{PID: guest, DeviceIndex: 0}, {PID: owner, DeviceIndex: 0}}, Guests: g}}).Observe(context.Background())
	_, d := p.Decide(lent, obs, now.Add(5*time.Second))
	if want := fmt.Sprintf("owner process %d (sleep) on GPU 0", owner); d.Do != Reclaim || d.Notice != 2*time.Minute || d.Reason != want {
		t.Errorf("the owner's GPU process: %s, want a reclaim with notice 2m: %s", d, want)
	}
}

// The /proc scan counts a busy process outside the guests' cgroup and not
// one inside it.
func TestProcCPURealCgroup(t *testing.T) {
	join := testGuestCgroup(t)
	guest := start(t, "sh", "-c", "while :; do :; done")
	owner := start(t, "sh", "-c", "while :; do :; done")
	parent := guestParent(t, join, guest)
	g, err := NewGuests("", parent)
	if err != nil {
		t.Fatal(err)
	}
	c := &ProcCPU{Guests: g, Exclude: []int{os.Getpid()}}
	if _, err := c.sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	var guestSeen bool
	wait.ForWhy(t, 10*time.Second, "the owner's busy process counted", func() (bool, string) {
		sm, err := c.sample(context.Background())
		if err != nil {
			return false, err.Error()
		}
		guestSeen = guestSeen || sm.ticks[guest] > 0
		return sm.ticks[owner] > 0, fmt.Sprintf("%d processes counted", len(sm.ticks))
	})
	if guestSeen {
		t.Errorf("the guest's busy process %d was counted as the owner's", guest)
	}
	wait.ForWhy(t, 10*time.Second, "an owner's load above zero", func() (bool, string) {
		load, ok, err := c.OwnerCPU(context.Background())
		return ok && err == nil && load.Cores > 0, fmt.Sprintf("%+v %v %v", load, ok, err)
	})
}

// writeEvent writes one struct input_event (64-bit layout).
func writeEvent(t *testing.T, f *os.File, typ, code uint16, value int32) {
	t.Helper()
	var b [eventSize]byte
	binary.NativeEndian.PutUint16(b[16:], typ)
	binary.NativeEndian.PutUint16(b[18:], code)
	binary.NativeEndian.PutUint32(b[20:], uint32(value))
	if _, err := f.Write(b[:]); err != nil {
		t.Fatal(err)
	}
}

// fakeDevice makes a FIFO standing in for an input device and opens it for
// writing (read-write, so opening does not wait for a reader and the
// reader never sees the end).
func fakeDevice(t *testing.T, dir, name string) *os.File {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestEventDevices reads fake input devices: only keys, buttons and
// motion count, each event is stamped when it arrives, a device plugged
// in later is found.
func TestEventDevices(t *testing.T) {
	dir := t.TempDir()
	ev0, ev1 := fakeDevice(t, dir, "event0"), fakeDevice(t, dir, "event1")
	if err := os.WriteFile(filepath.Join(dir, "mouse0"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	var stamps atomic.Int64
	clock := func() time.Time { return base.Add(time.Duration(stamps.Add(1)) * time.Second) }
	e, err := WatchEventDevices(dir, clock, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if in, err := e.LastInput(context.Background()); err != nil || !in.At.IsZero() {
		t.Fatalf("before any event: %+v, %v", in, err)
	}
	waitInput := func(via string, at time.Time) {
		t.Helper()
		wait.ForWhy(t, 5*time.Second, "input from "+via, func() (bool, string) {
			in, err := e.LastInput(context.Background())
			return err == nil && in.Via == via, fmt.Sprintf("%+v %v", in, err)
		})
		if in, _ := e.LastInput(context.Background()); !in.At.Equal(at) {
			t.Errorf("input from %s at %v, want %v (events that are not input must not be stamped)", via, in.At, at)
		}
	}
	// A sync and a scan code (not input), then a relative motion.
	writeEvent(t, ev0, 0, 0, 0)
	writeEvent(t, ev0, 4, 4, 30)
	writeEvent(t, ev0, evRel, 0, 5)
	waitInput("input device event0", base.Add(time.Second))
	writeEvent(t, ev1, evKey, 30, 1)
	waitInput("input device event1", base.Add(2*time.Second))
	ev2 := fakeDevice(t, dir, "event2")
	wait.For(t, 5*time.Second, "the new device opened", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.open[filepath.Join(dir, "event2")] != nil
	})
	writeEvent(t, ev2, evAbs, 0, 100)
	waitInput("input device event2", base.Add(3*time.Second))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	left := len(e.open)
	e.mu.Unlock()
	if left != 0 {
		t.Errorf("%d devices still open after Close", left)
	}
}

func TestEventDevicesNone(t *testing.T) {
	for _, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), "missing")} {
		if e, err := WatchEventDevices(dir, nil, 0); err == nil || !strings.Contains(err.Error(), "no event device") {
			t.Errorf("%s: %v, %v; want no event device", dir, e, err)
		}
	}
}

func TestParseLogind(t *testing.T) {
	for _, tc := range []struct {
		out    string
		want   Input
		hasErr bool
	}{
		{"IdleHint=no\nIdleSinceHint=1772441000000000\n", Input{Active: true, Via: "login manager's idle hint"}, false},
		{"IdleHint=yes\nIdleSinceHint=1772441000123456\n", Input{At: time.UnixMicro(1772441000123456), Via: "login manager's idle hint"}, false},
		{"IdleSinceHint=0\nIdleHint=yes\n", Input{Via: "login manager's idle hint"}, false},
		{"IdleHint=yes\n", Input{}, true},
		{"IdleHint=maybe\nIdleSinceHint=0\n", Input{}, true},
		{"IdleHint=yes\nIdleSinceHint=soon\n", Input{}, true},
		{"", Input{}, true},
	} {
		got, err := parseLogind([]byte(tc.out))
		if (err != nil) != tc.hasErr || got != tc.want {
			t.Errorf("parseLogind(%q) = %+v, %v; want %+v (error %v)", tc.out, got, err, tc.want, tc.hasErr)
		}
	}
}

// fakeLoginctl is a script standing in for loginctl (no logind runs here).
func fakeLoginctl(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "loginctl")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLogind(t *testing.T) {
	ok := fakeLoginctl(t, `[ "$1 $2 $3" = "show-session --property=IdleHint --property=IdleSinceHint" ] || exit 3
echo IdleHint=yes; echo IdleSinceHint=1772441000000000`)
	in, err := Logind{Path: ok}.LastInput(context.Background())
	if err != nil || !in.At.Equal(time.UnixMicro(1772441000000000)) {
		t.Errorf("idle session: %+v, %v", in, err)
	}
	bad := fakeLoginctl(t, `echo "Failed to connect to bus: Host is down" >&2; exit 1`)
	if _, err := (Logind{Path: bad}).LastInput(context.Background()); err == nil || !strings.Contains(err.Error(), "Host is down") {
		t.Errorf("failing loginctl: %v, want its message", err)
	}
}

// The machine's own loginctl, where a login manager runs: a smoke check on
// a real machine. It skips where none answers (CI containers run no
// login manager, so it skips there too); the parser and the error paths are
// tested above with a fake loginctl, so the skip hides no code path.
func TestLogindReal(t *testing.T) {
	if _, err := exec.LookPath("loginctl"); err != nil {
		t.Skip("loginctl is not installed")
	}
	in, err := Logind{}.LastInput(context.Background())
	if err != nil {
		t.Skipf("no login manager answers here: %v", err)
	}
	if !in.Active && in.At.After(time.Now()) {
		t.Errorf("idle since %v, in the future", in.At)
	}
}

func TestNewObserver(t *testing.T) {
	gpuPolicy := policy(t, Config{})
	if _, err := NewObserver(gpuPolicy, SourceOptions{GPUs: listed{}}); err == nil || !strings.Contains(err.Error(), "guests' cgroup") {
		t.Errorf("GPU watched without the guests' cgroup: %v", err)
	}
	if _, err := NewObserver(gpuPolicy, SourceOptions{GuestCgroup: "/reclaimnet/guests"}); err == nil || !strings.Contains(err.Error(), "no GPU process list") {
		t.Errorf("GPU watched without a process list: %v", err)
	}
	off := policy(t, Config{GPU: "off"})
	if o, err := NewObserver(off, SourceOptions{}); err != nil || o.GPU != nil || o.Input != nil || o.CPU != nil {
		t.Errorf("nothing watched: %+v, %v", o, err)
	}

	input := policy(t, Config{GPU: "off", Input: "now"})
	missing := filepath.Join(t.TempDir(), "no-loginctl")
	_, err := NewObserver(input, SourceOptions{InputDir: t.TempDir(), Loginctl: missing})
	if err == nil || !strings.Contains(err.Error(), "no event device") || !strings.Contains(err.Error(), "no-loginctl") {
		t.Errorf("no input source: %v, want both reasons", err)
	}
	dir := t.TempDir()
	dev := fakeDevice(t, dir, "event0")
	o, err := NewObserver(input, SourceOptions{InputDir: dir, Loginctl: missing})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	writeEvent(t, dev, evKey, 30, 1)
	wait.ForWhy(t, 5*time.Second, "the key press observed", func() (bool, string) {
		obs := o.Observe(context.Background())
		return obs.InputKnown && !obs.Input.At.IsZero(), fmt.Sprintf("%+v", obs)
	})
	if err := o.Close(); err != nil {
		t.Error(err)
	}

	// auto with a working login manager and no devices: the manager.
	lg := fakeLoginctl(t, "echo IdleHint=no; echo IdleSinceHint=0")
	o, err = NewObserver(input, SourceOptions{InputDir: t.TempDir(), Loginctl: lg})
	if err != nil {
		t.Fatal(err)
	}
	if obs := o.Observe(context.Background()); !obs.InputKnown || !obs.Input.Active {
		t.Errorf("login manager only: %+v", obs)
	}
	devicesOnly := policy(t, Config{GPU: "off", Input: "now", InputSource: InputDevices})
	if _, err := NewObserver(devicesOnly, SourceOptions{InputDir: t.TempDir(), Loginctl: lg}); err == nil {
		t.Error("input_source devices with no device: accepted")
	}
}
