package netnstest

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// StartTCPEcho listens in ns on ip (port 0) and echoes each connection
// until test end.
func StartTCPEcho(t testing.TB, ns netns.NsHandle, ip netip.Addr) *net.TCPAddr {
	t.Helper()
	return startTCPServer(t, ns, ip, func(c net.Conn) {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				c.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	})
}

// StartTCPSink listens in ns on ip (port 0) and discards what each
// connection sends until test end.
func StartTCPSink(t testing.TB, ns netns.NsHandle, ip netip.Addr) *net.TCPAddr {
	t.Helper()
	return startTCPServer(t, ns, ip, func(c net.Conn) {
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	})
}

// startTCPServer accepts connections and runs serve on each in its own
// goroutine; at test end it closes the listener and every connection and
// waits for the goroutines.
func startTCPServer(t testing.TB, ns netns.NsHandle, ip netip.Addr, serve func(net.Conn)) *net.TCPAddr {
	t.Helper()
	var (
		ln  net.Listener
		err error
	)
	In(t, ns, func() { ln, err = net.Listen("tcp", netip.AddrPortFrom(ip, 0).String()) })
	if err != nil {
		t.Fatalf("listen tcp: %v", err)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  []net.Conn // guarded by mu
		closed bool       // guarded by mu
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				c.Close()
			}
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().(*net.TCPAddr)
}

// DialTCP connects from ns to to within timeout; the connection closes at
// test end.
func DialTCP(t testing.TB, ns netns.NsHandle, to *net.TCPAddr, timeout time.Duration) (net.Conn, error) {
	t.Helper()
	var (
		c   net.Conn
		err error
	)
	In(t, ns, func() { c, err = net.DialTimeout("tcp", to.String(), timeout) })
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// TCPEcho writes a message on c and waits for the echo, within timeout.
func TCPEcho(c net.Conn, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	_, err := readFull(c, buf)
	return err
}
