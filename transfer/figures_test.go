package transfer

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"

	"github.com/quic-go/quic-go"
	"github.com/reclaimnet/reclaimnet/ckpt"
	"golang.org/x/sys/unix"
)

// TestFigures measures the figures in BENCHMARKS.md, side by side in one
// run, and prints them. It asserts nothing about speed. Run it with:
//
//	RECLAIMNET_FIGURES=1 go test ./transfer -run TestFigures -v -timeout 30m
//
// RECLAIMNET_FIGURES_MIB sets the loopback file size (default 512). The
// netns part needs root (ip, tc); the rsync part needs sshd, ssh, rsync.
func TestFigures(t *testing.T) {
	if os.Getenv("RECLAIMNET_FIGURES") == "" {
		t.Skip("set RECLAIMNET_FIGURES=1 to measure and print the BENCHMARKS.md figures")
	}
	mib := 512
	if v, err := strconv.Atoi(os.Getenv("RECLAIMNET_FIGURES_MIB")); err == nil && v > 0 {
		mib = v
	}
	dir := t.TempDir()
	random := filepath.Join(dir, "random.bin")
	if err := os.WriteFile(random, randomBytes(77, mib<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	fp32 := filepath.Join(dir, "fp32.bin")
	if err := os.WriteFile(fp32, fp32Bytes(78, mib<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("FIGURES: %d cores, GOMAXPROCS %d, file %d MiB\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), mib)
	t.Run("loopback", func(t *testing.T) { figLoopback(t, random, fp32) })
	t.Run("pacing", func(t *testing.T) { figPacing(t, random) })
	t.Run("compression", func(t *testing.T) { figCompression(t, fp32) })
	t.Run("netns", func(t *testing.T) { figNetns(t, random) })
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// machineCPU returns the machine's busy and total CPU time so far (jiffies,
// from /proc/stat; idle and iowait count as not busy), or zeros.
func machineCPU() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fs := strings.Fields(line)
	if len(fs) < 6 || fs[0] != "cpu" {
		return 0, 0
	}
	for i, f := range fs[1:] {
		if i >= 8 {
			break // guest time is already in user time
		}
		v, _ := strconv.ParseFloat(f, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

func mbit(bytes int64, d time.Duration) float64 { return float64(bytes) * 8 / d.Seconds() / 1e6 }

// delivery records when the receiver had 10 % and 90 % of the payload
// bytes: steady-state goodput is the 80 % in between divided by the time
// between, free of the handshake, ramp-up, the last chunks' tail and the
// commit.
type delivery struct {
	mu           sync.Mutex
	size, got    int64
	t10, t90     time.Time
	tFirst, tAll time.Time // first bytes / all bytes delivered
	tStart, tEnd time.Time // Send called / returned
}

func (d *delivery) add(n int) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got += int64(n)
	if d.tFirst.IsZero() {
		d.tFirst = now
	}
	if d.tAll.IsZero() && d.got >= d.size {
		d.tAll = now
	}
	if d.t10.IsZero() && d.got*10 >= d.size {
		d.t10 = now
	}
	if d.t90.IsZero() && d.got*10 >= 9*d.size {
		d.t90 = now
	}
}

// steady returns the steady-state goodput in Mbit/s (0 if not measured).
func (d *delivery) steady() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.t10.IsZero() || d.t90.IsZero() || !d.t90.After(d.t10) {
		return 0
	}
	return mbit(d.size*8/10, d.t90.Sub(d.t10))
}

// sendFile stores file as a checkpoint on a fresh sender and sends it to a
// fresh receiver listening on listenAddr (created by listenFn), returning
// the duration and CPU seconds of the send alone (Send → DONE) and the
// receiver's delivery record.
func sendFile(t *testing.T, file string, listen func(n *node) *Server, dial func(*Server) string, comp Compression) (time.Duration, float64, Stats) {
	d, cpu, st, _ := sendFileSteady(t, file, listen, dial, comp)
	return d, cpu, st
}

func sendFileSteady(t *testing.T, file string, listen func(n *node) *Server, dial func(*Server) string, comp Compression) (time.Duration, float64, Stats, *delivery) {
	dev := devCA(t)
	a := newNodeChunker(t, dev, "a", 0, "", ckpt.DefaultChunker)
	b := newNodeChunker(t, dev, "b", 0, "", ckpt.DefaultChunker)
	a.cfg.Compression = comp
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	rec := &delivery{size: fi.Size()}
	b.cfg.chunkStored = rec.add
	src := t.TempDir()
	if err := os.Link(file, filepath.Join(src, "model.pt")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.store.AddDir("j", 1, src, time.Now()); err != nil {
		t.Fatal(err)
	}
	srv := listen(b)
	defer srv.Close()
	c := client(t, a)
	cpu0, t0 := cpuSeconds(), time.Now()
	st, err := c.Send(context.Background(), Request{Addr: dial(srv), Node: "b", JobID: "j", Version: 1, Rate: Unlimited})
	d, cpu := time.Since(t0), cpuSeconds()-cpu0
	rec.mu.Lock()
	rec.tStart, rec.tEnd = t0, t0.Add(d)
	rec.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return d, cpu, st, rec
}

func figLoopback(t *testing.T, random, fp32 string) {
	fi, _ := os.Stat(random)
	size := fi.Size()
	lo := func(n *node) *Server { return listen(t, n, Hooks{}) }
	addr := func(s *Server) string { return s.Addr().String() }

	d, cpu, _ := sendFile(t, random, lo, addr, CompressAuto)
	fmt.Printf("FIGURE loopback reclaimnet-transfer random: %d MiB in %.2fs = %.0f Mbit/s goodput, %.2f CPU s/GB (both ends)\n",
		size>>20, d.Seconds(), mbit(size, d), cpu/(float64(size)/1e9))
	d, cpu, st := sendFile(t, fp32, lo, addr, CompressAuto)
	fmt.Printf("FIGURE loopback reclaimnet-transfer fp32: %d MiB in %.2fs = %.0f Mbit/s goodput (%.1f%% on the wire, %d/%d chunks shuffled), %.2f CPU s/GB (both ends)\n",
		size>>20, d.Seconds(), mbit(size, d), 100*float64(st.WireBytes)/float64(st.RawBytes), st.Shuffled, st.ChunksSent, cpu/(float64(size)/1e9))

	d, cpu, _ = rawQUIC(t, random, "127.0.0.1", func(fn func()) { fn() })
	fmt.Printf("FIGURE loopback raw quic-go stream: %d MiB in %.2fs = %.0f Mbit/s, %.2f CPU s/GB (both ends)\n", size>>20, d.Seconds(), mbit(size, d), cpu/(float64(size)/1e9))

	if d, err := rsyncSSH(t, random); err != nil {
		fmt.Printf("FIGURE loopback rsync -e ssh: not measured: %v\n", err)
	} else {
		fmt.Printf("FIGURE loopback rsync -e ssh: %d MiB in %.2fs = %.0f Mbit/s\n", size>>20, d.Seconds(), mbit(size, d))
	}
}

// deliveryWriter feeds a delivery record from an io.Copy.
type deliveryWriter struct{ d *delivery }

func (w deliveryWriter) Write(p []byte) (int, error) { w.d.add(len(p)); return len(p), nil }

// rawQUIC sends the file's bytes over one quic-go stream with the same TLS
// and windows, the receiver discarding them: the transport's ceiling. The
// listener is bound to host inside within (a network namespace switch).
// The time runs from the dial to the receiver having every byte.
func rawQUIC(t *testing.T, file, host string, within func(func())) (time.Duration, float64, *delivery) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dev := devCA(t)
	sb, _ := dev.Node("b")
	cb, _ := dev.Node("a")
	cfg := DefaultConfig()
	var ln *quic.Listener
	within(func() {
		ln, err = quic.ListenAddr(net.JoinHostPort(host, "0"), sb.ServerTLS("bench"), cfg.quicConfig())
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rec := &delivery{size: int64(len(data))}
	got := make(chan int64, 1)
	go func() {
		conn, err := ln.Accept(context.Background())
		if err != nil {
			got <- -1
			return
		}
		st, err := conn.AcceptUniStream(context.Background())
		if err != nil {
			got <- -1
			return
		}
		n, _ := io.CopyBuffer(deliveryWriter{rec}, st, make([]byte, 256<<10))
		got <- n
		conn.CloseWithError(0, "")
	}()
	cpu0, t0 := cpuSeconds(), time.Now()
	conn, err := quic.DialAddr(context.Background(), net.JoinHostPort(host, strconv.Itoa(ln.Addr().(*net.UDPAddr).Port)), cb.ClientTLS("b", "bench"), cfg.quicConfig())
	if err != nil {
		t.Fatal(err)
	}
	st, err := conn.OpenUniStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := st.Write(data[off:min(off+1<<20, len(data))]); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	if n := <-got; n != int64(len(data)) {
		t.Fatalf("raw quic: received %d of %d", n, len(data))
	}
	d, cpu := time.Since(t0), cpuSeconds()-cpu0
	conn.CloseWithError(0, "")
	cs := conn.ConnectionStats()
	fmt.Printf("FIGURE raw quic-go wire (%s): %d QUIC packets (%.0f bytes avg), %d lost (%.2f%%); payload is %.1f%% of the bytes tbf counted\n",
		host, cs.PacketsSent, float64(cs.BytesSent)/float64(max(cs.PacketsSent, 1)), cs.PacketsLost, 100*float64(cs.PacketsLost)/float64(max(cs.PacketsSent, 1)),
		100*float64(len(data))/float64(cs.BytesSent+42*cs.PacketsSent))
	return d, cpu, rec
}

// rsyncSSH runs a throwaway sshd on a loopback port (temp host key and
// authorized key, nothing of the system's ssh configuration) and times
// rsync -e ssh of the file into a temp directory.
func rsyncSSH(t *testing.T, file string) (time.Duration, error) {
	// RECLAIMNET_SSHD and RECLAIMNET_SSHD_ARGS let a machine without
	// openssh-server use a carried sshd (e.g. with "-r": no re-exec).
	sshdPath := os.Getenv("RECLAIMNET_SSHD")
	if sshdPath == "" {
		sshdPath = "/usr/sbin/sshd"
	}
	for _, bin := range []string{sshdPath, "ssh", "rsync", "ssh-keygen"} {
		if _, err := exec.LookPath(bin); err != nil {
			return 0, fmt.Errorf("%s not installed", bin)
		}
	}
	dir := t.TempDir()
	run := func(name string, args ...string) error {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", name, err, out)
		}
		return nil
	}
	hostKey, userKey := filepath.Join(dir, "host_key"), filepath.Join(dir, "user_key")
	if err := run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", hostKey); err != nil {
		return 0, err
	}
	if err := run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", userKey); err != nil {
		return 0, err
	}
	pub, _ := os.ReadFile(userKey + ".pub")
	auth := filepath.Join(dir, "authorized_keys")
	os.WriteFile(auth, pub, 0o600)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := filepath.Join(dir, "sshd_config")
	os.WriteFile(conf, []byte(fmt.Sprintf("Port %d\nListenAddress 127.0.0.1\nHostKey %s\nAuthorizedKeysFile %s\nPidFile %s\nStrictModes no\nUsePAM no\nPasswordAuthentication no\nPermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\n",
		port, hostKey, auth, filepath.Join(dir, "sshd.pid"))), 0o600)
	// sshd wants its privilege-separation directory.
	os.MkdirAll("/run/sshd", 0o755)
	sshd := exec.Command(sshdPath, append([]string{"-D", "-e", "-f", conf}, strings.Fields(os.Getenv("RECLAIMNET_SSHD_ARGS"))...)...)
	var logBuf strings.Builder
	sshd.Stderr = &logBuf
	if err := sshd.Start(); err != nil {
		return 0, err
	}
	defer func() { sshd.Process.Kill(); sshd.Wait() }()
	sshCmd := fmt.Sprintf("ssh -p %d -i %s -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR", port, userKey)
	if _, ok := wait.Until(10*time.Second, func() (bool, string) {
		return exec.Command("sh", "-c", sshCmd+" root@127.0.0.1 true").Run() == nil, ""
	}); !ok {
		return 0, fmt.Errorf("sshd did not come up: %s", logBuf.String())
	}
	dst := t.TempDir()
	t0 := time.Now()
	rsyncPath, _ := exec.LookPath("rsync")
	rsyncPath, _ = filepath.Abs(rsyncPath)
	if out, err := exec.Command("rsync", "-a", "--rsync-path="+rsyncPath, "-e", sshCmd, file, "root@127.0.0.1:"+dst+"/").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("rsync: %v: %s", err, out)
	}
	return time.Since(t0), nil
}

// figPacing sends at 50, 200 and 800 Mbit/s and reports each 1 s window's
// bytes against the assigned rate.
func figPacing(t *testing.T, random string) {
	dev := devCA(t)
	a := newNodeChunker(t, dev, "a", 0, "", ckpt.DefaultChunker)
	b := newNodeChunker(t, dev, "b", 0, "", ckpt.DefaultChunker)
	src := t.TempDir()
	os.Link(random, filepath.Join(src, "model.pt"))
	if _, err := a.store.AddDir("j", 1, src, time.Now()); err != nil {
		t.Fatal(err)
	}
	srv := listen(t, b, Hooks{})
	c := client(t, a)
	for _, mbps := range []float64{50, 200, 800} {
		rate := mbps * 1e6 / 8
		tr, err := c.Start(context.Background(), Request{Addr: srv.Addr().String(), Node: "b", JobID: "j", Version: 1, Rate: rate})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // skip the handshake and first fill
		var windows, blocked, procCPU, busy []float64
		prev, tprev, wprev := tr.Stats().WireBytes, time.Now(), tr.writeNanos.Load()
		cpuPrev, busyPrev, totalPrev := cpuSeconds(), 0.0, 0.0
		busyPrev, totalPrev = machineCPU()
		for len(windows) < 5 {
			select {
			case <-tr.Done():
			case <-time.After(time.Second):
			}
			select {
			case <-tr.Done():
				goto report
			default:
			}
			cur, now, wcur := tr.Stats().WireBytes, time.Now(), tr.writeNanos.Load()
			windows = append(windows, float64(cur-prev)/now.Sub(tprev).Seconds()/rate)
			// Stream writes run on Streams workers at once: their blocked
			// time per worker and second.
			blocked = append(blocked, float64(wcur-wprev)/float64(now.Sub(tprev))/float64(c.cfg.Streams))
			// Both ends' CPU (cores) and how busy the whole machine was.
			cpuCur := cpuSeconds()
			procCPU = append(procCPU, (cpuCur-cpuPrev)/now.Sub(tprev).Seconds())
			b, tot := machineCPU()
			busy = append(busy, (b-busyPrev)/max(tot-totalPrev, 1))
			prev, tprev, wprev, cpuPrev, busyPrev, totalPrev = cur, now, wcur, cpuCur, b, tot
		}
	report:
		tr.Cancel()
		tr.Wait()
		lo, hi, sum, loBlocked := 10.0, 0.0, 0.0, 0.0
		for i, w := range windows {
			if w < lo {
				loBlocked = blocked[i]
			}
			lo, hi, sum = min(lo, w), max(hi, w), sum+w
		}
		fmt.Printf("FIGURE pacing %.0f Mbit/s: %d windows of 1 s, mean %.3f, min %.3f, max %.3f of the rate; windows %s; stream writes blocked (per worker) %s, %.2f in the lowest window\n",
			mbps, len(windows), sum/float64(len(windows)), lo, hi, fmtFloats(windows), fmtFloats(blocked), loBlocked)
		fmt.Printf("FIGURE pacing %.0f Mbit/s CPU per window: this process (both ends, cores) %s; whole machine busy (fraction of all %d cores) %s\n",
			mbps, fmtFloats(procCPU), runtime.NumCPU(), fmtFloats(busy))
		wait.For(t, 10*time.Second, "receiver clean-up", func() bool { return len(b.store.Pending()) == 0 })
	}
}

// figCompression compresses the fp32 file chunk by chunk with and without
// the shuffle, on one core and on all.
func figCompression(t *testing.T, fp32 string) {
	data, err := os.ReadFile(fp32)
	if err != nil {
		t.Fatal(err)
	}
	var chunks [][]byte
	ckpt.DefaultChunker.Split(strings.NewReader(string(data)), func(c []byte) error {
		chunks = append(chunks, append([]byte(nil), c...))
		return nil
	})
	for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
		cd, err := newCodec(workers)
		if err != nil {
			t.Fatal(err)
		}
		for _, mode := range []struct {
			name string
			c    Compression
		}{{"zstd-fastest", CompressZstd}, {"shuffle+zstd-fastest", CompressAuto}} {
			var out int64
			var mu sync.Mutex
			next := make(chan []byte)
			t0 := time.Now()
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Go(func() {
					for c := range next {
						var n int
						if mode.c == CompressZstd {
							n = len(cd.enc.EncodeAll(c, nil))
						} else {
							sh := make([]byte, len(c))
							shuffle4(sh, c)
							n = len(cd.enc.EncodeAll(sh, nil))
						}
						mu.Lock()
						out += int64(n)
						mu.Unlock()
					}
				})
			}
			for _, c := range chunks {
				next <- c
			}
			close(next)
			wg.Wait()
			d := time.Since(t0)
			fmt.Printf("FIGURE compression fp32 %s, %d worker(s): %.1f%% of the size, %.0f MB/s\n", mode.name, workers, 100*float64(out)/float64(len(data)), float64(len(data))/1e6/d.Seconds())
		}
		cd.Close()
	}
}

// inNetns runs fn on a thread switched into the named network namespace;
// sockets fn creates stay in that namespace.
func inNetns(name string, fn func()) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return err
	}
	defer orig.Close()
	target, err := os.Open("/var/run/netns/" + name)
	if err != nil {
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns: %w", err)
	}
	defer unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET)
	fn()
	return nil
}

// figNetns shapes a veth pair between the root namespace (sender) and a
// fresh namespace (receiver) with tbf and measures goodput.
func figNetns(t *testing.T, random string) {
	if os.Geteuid() != 0 {
		fmt.Println("FIGURE netns: not measured: needs root")
		return
	}
	id := os.Getpid() % 10000
	ns, va, vb := fmt.Sprintf("rnfig%d", id), fmt.Sprintf("rnfa%d", id), fmt.Sprintf("rnfb%d", id)
	sh := func(cmd string) error {
		if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", cmd, err, out)
		}
		return nil
	}
	setup := []string{
		"ip netns add " + ns,
		fmt.Sprintf("ip link add %s type veth peer name %s", va, vb),
		fmt.Sprintf("ip link set %s netns %s", vb, ns),
		fmt.Sprintf("ip addr add 10.231.%d.1/30 dev %s", id%250, va),
		fmt.Sprintf("ip link set %s up", va),
		fmt.Sprintf("ip -n %s addr add 10.231.%d.2/30 dev %s", ns, id%250, vb),
		fmt.Sprintf("ip -n %s link set %s up", ns, vb),
		fmt.Sprintf("ip -n %s link set lo up", ns),
	}
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", va).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	for _, c := range setup {
		if err := sh(c); err != nil {
			fmt.Printf("FIGURE netns: not measured: %v\n", err)
			return
		}
	}
	peer := fmt.Sprintf("10.231.%d.2", id%250)
	fi, _ := os.Stat(random)
	for _, shape := range []struct {
		name string
		bits float64
	}{{"1gbit", 1e9}, {"240mbit", 240e6}} {
		if only := os.Getenv("RECLAIMNET_FIGURES_SHAPES"); only != "" && !strings.Contains(only, shape.name) {
			continue
		}
		if err := sh(fmt.Sprintf("tc qdisc replace dev %s root tbf rate %s burst 1mb latency 50ms", va, shape.name)); err != nil {
			fmt.Printf("FIGURE netns: not measured: %v\n", err)
			return
		}
		inNS := func(n *node) *Server {
			var s *Server
			var err error
			if nerr := inNetns(ns, func() { s, err = Listen(peer+":0", n.cfg, Hooks{}) }); nerr != nil {
				t.Fatal(nerr)
			}
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		figNetnsOnce(t, random, shape.name, shape.bits, inNS, peer)
		d, cpu, rec := rawQUIC(t, random, peer, func(fn func()) {
			if err := inNetns(ns, fn); err != nil {
				t.Fatal(err)
			}
		})
		g, ss := mbit(fi.Size(), d), rec.steady()
		fmt.Printf("FIGURE netns veth tbf %s raw quic-go stream: %d MiB in %.2fs (dial→last byte read) = %.0f Mbit/s = %.1f%% of the shaped rate; steady state %.0f Mbit/s = %.1f%%; %.2f CPU s/GB\n",
			shape.name, fi.Size()>>20, d.Seconds(), g, 100*g*1e6/shape.bits, ss, 100*ss*1e6/shape.bits, cpu/(float64(fi.Size())/1e9))
	}
}

// figNetnsOnce sends the file once over the shaped veth and prints its
// figures.
func figNetnsOnce(t *testing.T, random, shape string, bits float64, inNS func(*node) *Server, peer string) {
	fi, _ := os.Stat(random)
	name := shape + " receiver-fsync-per-chunk"
	{
		shape := struct {
			name string
			bits float64
		}{name, bits}
		d, cpu, st, rec := sendFileSteady(t, random, inNS, func(s *Server) string { return net.JoinHostPort(peer, strconv.Itoa(s.Addr().Port)) }, CompressAuto)
		g, ss := mbit(fi.Size(), d), rec.steady()
		fmt.Printf("FIGURE netns veth tbf %s reclaimnet-transfer: %d MiB in %.2fs (Send→DONE) = %.0f Mbit/s = %.1f%% of the shaped rate; steady state (10%%→90%% of the bytes stored at the receiver) %.0f Mbit/s = %.1f%%; %.2f CPU s/GB\n",
			shape.name, fi.Size()>>20, d.Seconds(), g, 100*g*1e6/shape.bits, ss, 100*ss*1e6/shape.bits, cpu/(float64(fi.Size())/1e9))
		fmt.Printf("FIGURE netns veth tbf %s reclaimnet-transfer phases: Send→first chunk stored %.0f ms, first→last chunk stored %.2f s, last chunk stored→DONE read (commit) %.0f ms\n",
			shape.name, ms(rec.tFirst.Sub(rec.tStart)), rec.tAll.Sub(rec.tFirst).Seconds(), ms(rec.tEnd.Sub(rec.tAll)))
		fmt.Printf("FIGURE netns veth tbf %s reclaimnet-transfer wire: %d QUIC packets (%.0f bytes avg), %d lost (%.2f%%); payload is %.1f%% of the bytes tbf counted (QUIC + UDP/IP/Ethernet headers)\n",
			shape.name, st.PacketsSent, float64(st.QUICBytesSent)/float64(max(st.PacketsSent, 1)), st.PacketsLost, 100*float64(st.PacketsLost)/float64(max(st.PacketsSent, 1)),
			100*float64(fi.Size())/float64(st.QUICBytesSent+42*st.PacketsSent))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fmtFloats(fs []float64) string {
	var b strings.Builder
	for i, f := range fs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.3f", f)
	}
	return b.String()
}
