package netnstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"
)

// UDPSink counts the bytes it receives and remembers the TOS byte of the
// latest datagram.
type UDPSink struct {
	Addr     netip.AddrPort
	Received atomic.Int64
	TOS      atomic.Int32 // -1 until a datagram with a TOS byte arrives
	Err      atomic.Value // string: why the reader stopped
}

// StartUDPSink listens in ns on ip (port 0) with an 8 MiB receive buffer
// and IP_RECVTOS; it stops at test end.
func StartUDPSink(t testing.TB, ns netns.NsHandle, ip netip.Addr) *UDPSink {
	t.Helper()
	c := listenUDP(t, ns, ip)
	c.SetReadBuffer(8 << 20)
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1) })
	if serr != nil {
		t.Fatalf("IP_RECVTOS: %v", serr)
	}
	s := &UDPSink{Addr: c.LocalAddr().(*net.UDPAddr).AddrPort()}
	s.TOS.Store(-1)
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 64<<10)
		oob := make([]byte, 128)
		for {
			n, oobn, _, _, err := c.ReadMsgUDP(buf, oob)
			if err != nil {
				s.Err.Store(err.Error())
				return
			}
			s.Received.Add(int64(n))
			msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
			if perr != nil {
				continue
			}
			for _, m := range msgs {
				if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) > 0 {
					s.TOS.Store(int32(m.Data[0]))
				}
			}
		}
	})
	t.Cleanup(func() { c.Close(); wg.Wait() })
	return s
}

// listenUDP opens a UDP socket in ns on ip, port 0. The caller closes it.
func listenUDP(t testing.TB, ns netns.NsHandle, ip netip.Addr) *net.UDPConn {
	t.Helper()
	var (
		c   *net.UDPConn
		err error
	)
	In(t, ns, func() { c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0))) })
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	return c
}

// WaitReceiving polls until the sink has received something, failing the
// test after 5 s with what snd reports.
func (s *UDPSink) WaitReceiving(t testing.TB, snd *Sender) {
	t.Helper()
	wait.ForWhy(t, 5*time.Second, fmt.Sprintf("sink %s receiving", s.Addr), func() (bool, string) {
		return s.Received.Load() > 0, fmt.Sprintf("sender wrote %d bytes, last send error %v, reader stopped: %v", snd.Sent.Load(), snd.Err.Load(), s.Err.Load())
	})
}

// Sender sends payload-sized writes paced at a fixed rate until the test
// ends, counting the payload bytes written.
type Sender struct {
	Local netip.AddrPort // the sending socket's address (its port identifies the flow)
	Sent  atomic.Int64
	Err   atomic.Value // error: the last write error ignored
}

// StartUDPSender sends 1200-byte datagrams from ns (local, port 0) to to
// at bytesPerSec until test end. Writes the kernel drops below the socket
// (ENOBUFS, EPERM: a ceiling or a full queue; ECONNREFUSED) are recorded
// in Err and sending goes on.
func StartUDPSender(t testing.TB, ns netns.NsHandle, local netip.Addr, to netip.AddrPort, bytesPerSec float64) *Sender {
	t.Helper()
	var (
		c   *net.UDPConn
		err error
	)
	In(t, ns, func() {
		c, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)), net.UDPAddrFromAddrPort(to))
	})
	if err != nil {
		t.Fatalf("dial udp: %v", err)
	}
	s := &Sender{Local: c.LocalAddr().(*net.UDPAddr).AddrPort()}
	runPaced(t, bytesPerSec, 1200, func(b []byte) error {
		n, err := c.Write(b)
		s.Sent.Add(int64(n))
		if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ECONNREFUSED) {
			s.Err.Store(err)
			return nil // dropped below us (the ceiling, a full queue): keep sending
		}
		return err
	}, func() { c.Close() })
	return s
}

// StartTCPSender connects from ns (local, port 0) to to and writes 16 KiB
// at a time at bytesPerSec until test end; a write error fails the test.
func StartTCPSender(t testing.TB, ns netns.NsHandle, local netip.Addr, to netip.AddrPort, bytesPerSec float64) *Sender {
	t.Helper()
	var (
		c   *net.TCPConn
		err error
	)
	In(t, ns, func() {
		c, err = net.DialTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(local, 0)), net.TCPAddrFromAddrPort(to))
	})
	if err != nil {
		t.Fatalf("dial tcp: %v", err)
	}
	s := &Sender{Local: c.LocalAddr().(*net.TCPAddr).AddrPort()}
	runPaced(t, bytesPerSec, 16<<10, func(b []byte) error {
		n, err := c.Write(b)
		s.Sent.Add(int64(n))
		return err
	}, func() { c.Close() })
	return s
}

// runPaced calls write with chunk-sized buffers at bytesPerSec until test
// end; closeFn unblocks a pending write.
func runPaced(t testing.TB, bytesPerSec float64, chunk int, write func([]byte) error, closeFn func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		lim := rate.NewLimiter(rate.Limit(bytesPerSec), 64<<10)
		buf := make([]byte, chunk)
		for {
			if err := lim.WaitN(ctx, chunk); err != nil {
				return
			}
			if err := write(buf); err != nil {
				if ctx.Err() == nil {
					t.Errorf("send: %v", err)
				}
				return
			}
		}
	})
	t.Cleanup(func() { cancel(); closeFn(); wg.Wait() })
}

// RateOver returns the rate (per second) at which counter grows over d.
func RateOver(counter *atomic.Int64, d time.Duration) float64 {
	b0, t0 := counter.Load(), time.Now()
	time.Sleep(d)
	return float64(counter.Load()-b0) / time.Since(t0).Seconds()
}
