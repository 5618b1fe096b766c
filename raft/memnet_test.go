package raft

import (
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"
)

// memNet is an in-memory network of net.Pipe connections, so a whole
// cluster (TLS, mux, Raft RPCs, forwarding) runs inside a testing/synctest
// bubble in fake time.
type memNet struct {
	mu        sync.Mutex
	listeners map[string]*memListener
	next      int
}

func newMemNet() *memNet { return &memNet{listeners: map[string]*memListener{}} }

// listen returns a listener at a fresh address (or addr, if given).
func (n *memNet) listen(addr string) *memListener {
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr == "" {
		n.next++
		addr = fmt.Sprintf("10.9.0.%d:7947", n.next)
	}
	l := &memListener{net: n, addr: advertiseAddr(addr), conns: make(chan net.Conn), done: make(chan struct{})}
	n.listeners[addr] = l
	return l
}

func (n *memNet) dial(_, addr string, timeout time.Duration) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "mem", Err: syscall.ECONNREFUSED}
	}
	client, server := net.Pipe()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
	case <-t.C:
	}
	client.Close()
	server.Close()
	return nil, &net.OpError{Op: "dial", Net: "mem", Err: syscall.ECONNREFUSED}
}

type memListener struct {
	net   *memNet
	addr  advertiseAddr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.net.mu.Lock()
		if l.net.listeners[string(l.addr)] == l {
			delete(l.net.listeners, string(l.addr))
		}
		l.net.mu.Unlock()
	})
	return nil
}

func (l *memListener) Addr() net.Addr { return l.addr }
