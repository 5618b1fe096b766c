package mesh

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// MemNetwork connects in-memory transports for cluster tests. Packets are
// delivered through a bounded buffer and dropped, like UDP, when the buffer
// is full or the receiver is closed or unknown; streams are net.Pipe pairs.
// Nothing in it blocks forever, so it runs under testing/synctest.
type MemNetwork struct {
	// PacketBuffer is each transport's receive buffer (default 256).
	PacketBuffer int

	mu       sync.Mutex
	byAddr   map[string]*MemTransport
	isolated map[string]bool // addresses cut off from every other
	nextIP   uint32
	drops    uint64
}

// NewTransport returns a transport with a fresh address 10.x.y.z:7946.
func (n *MemNetwork) NewTransport() *MemTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byAddr == nil {
		n.byAddr = map[string]*MemTransport{}
	}
	n.nextIP++
	ip := net.IPv4(10, byte(n.nextIP>>16), byte(n.nextIP>>8), byte(n.nextIP))
	size := n.PacketBuffer
	if size <= 0 {
		size = 256
	}
	t := &MemTransport{
		net:      n,
		addr:     &net.UDPAddr{IP: ip, Port: DefaultGossipPort},
		packetCh: make(chan *memberlist.Packet, size),
		streamCh: make(chan net.Conn, 16),
		done:     make(chan struct{}),
	}
	n.byAddr[t.addr.String()] = t
	return t
}

// Drops is how many packets the network dropped.
func (n *MemNetwork) Drops() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.drops
}

// Isolate cuts the transport at addr off from all others (cut true) or
// reconnects it: packets either way are dropped and dials refused, as a
// node whose network link is down. Streams already open stay open.
func (n *MemNetwork) Isolate(addr string, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.isolated == nil {
		n.isolated = map[string]bool{}
	}
	n.isolated[addr] = cut
}

// peer returns the transport at addr if from can reach it.
func (n *MemNetwork) peer(from, addr string) (*MemTransport, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.isolated[from] || n.isolated[addr] {
		return nil, false
	}
	t, ok := n.byAddr[addr]
	return t, ok
}

func (n *MemNetwork) countDrop() {
	n.mu.Lock()
	n.drops++
	n.mu.Unlock()
}

// MemTransport is one node's endpoint on a MemNetwork; it implements
// memberlist.NodeAwareTransport.
type MemTransport struct {
	net      *MemNetwork
	addr     *net.UDPAddr
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn

	mu     sync.Mutex // guards closed and sends on the channels
	closed bool
	done   chan struct{}
}

var _ memberlist.NodeAwareTransport = (*MemTransport)(nil)

// Addr is the transport's address ("10.0.0.1:7946").
func (t *MemTransport) Addr() string { return t.addr.String() }

// FinalAdvertiseAddr implements memberlist.Transport.
func (t *MemTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return t.addr.IP, t.addr.Port, nil
}

// WriteTo implements memberlist.Transport.
func (t *MemTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends a packet; like UDP it never fails because the peer
// is gone or slow: the packet is dropped.
func (t *MemTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	dest, ok := t.net.peer(t.Addr(), a.Addr)
	if !ok {
		t.net.countDrop()
		return now, nil
	}
	p := &memberlist.Packet{Buf: append([]byte(nil), b...), From: t.addr, Timestamp: now}
	dest.mu.Lock()
	defer dest.mu.Unlock()
	if dest.closed {
		t.net.countDrop()
		return now, nil
	}
	select {
	case dest.packetCh <- p:
	default:
		t.net.countDrop()
	}
	return now, nil
}

// PacketCh implements memberlist.Transport.
func (t *MemTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout implements memberlist.Transport.
func (t *MemTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// errRefused is what dialing a closed or unknown transport returns.
var errRefused = errors.New("connection refused")

// DialAddressTimeout opens an in-memory stream to the peer, or fails like
// a refused TCP connection.
func (t *MemTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	dest, ok := t.net.peer(t.Addr(), a.Addr)
	if !ok {
		return nil, fmt.Errorf("dial %s: %w", a.Addr, errRefused)
	}
	local, remote := net.Pipe()
	dest.mu.Lock()
	if dest.closed {
		dest.mu.Unlock()
		return nil, fmt.Errorf("dial %s: %w", a.Addr, errRefused)
	}
	select {
	case dest.streamCh <- &memConn{Conn: remote, local: dest.addr, remote: t.addr}:
		dest.mu.Unlock()
		return &memConn{Conn: local, local: t.addr, remote: dest.addr}, nil
	default:
		dest.mu.Unlock()
		local.Close()
		remote.Close()
		return nil, fmt.Errorf("dial %s: accept backlog full: %w", a.Addr, errRefused)
	}
}

// StreamCh implements memberlist.Transport.
func (t *MemTransport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown closes the transport: later packets to it are dropped and dials
// refused.
func (t *MemTransport) Shutdown() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.closed = true
		close(t.done)
	}
	return nil
}

// memConn gives a pipe end real-looking addresses (memberlist logs them
// and parses the remote address of streams).
type memConn struct {
	net.Conn
	local, remote *net.UDPAddr
}

func (c *memConn) LocalAddr() net.Addr  { return &net.TCPAddr{IP: c.local.IP, Port: c.local.Port} }
func (c *memConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: c.remote.IP, Port: c.remote.Port} }
