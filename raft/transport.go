package raft

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/reclaimnet/reclaimnet/pki/enroll"
)

// The first byte a dialer writes after the TLS handshake says what the
// connection carries (Consul multiplexes its server port the same way).
const (
	muxRaft    byte = 0x01 // hashicorp/raft RPCs
	muxForward byte = 0x02 // commands forwarded to the leader
)

// alpnRaft is the TLS application protocol of the coordinator port.
const alpnRaft = "reclaimnet-raft/1"

// handshakeTimeout bounds the TLS handshake and the mux byte of an
// accepted connection.
const handshakeTimeout = 10 * time.Second

var errMuxClosed = errors.New("raft listener closed")

// mux owns the coordinator's TLS listener. It hands Raft connections to the
// stream layer and forwarded-command connections to a handler.
type mux struct {
	ln        net.Listener
	advertise net.Addr
	serverTLS *tls.Config
	clientTLS *tls.Config
	dial      func(network, addr string, timeout time.Duration) (net.Conn, error)
	forward   func(net.Conn) // serves one forwarded-command connection
	// enroll serves one enrollment connection (ALPN reclaimnet-enroll/1,
	// possibly without a client certificate); nil refuses them.
	enroll func(*tls.Conn)
	logger *slog.Logger

	raftConns chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{} // guarded by mu: every open conn, closed on Close
}

func newMux(ln net.Listener, advertise net.Addr, serverTLS, clientTLS *tls.Config,
	dial func(string, string, time.Duration) (net.Conn, error), logger *slog.Logger) *mux {
	return &mux{
		ln: ln, advertise: advertise, serverTLS: serverTLS, clientTLS: clientTLS, dial: dial, logger: logger,
		raftConns: make(chan net.Conn), closed: make(chan struct{}), conns: map[net.Conn]struct{}{},
	}
}

// start begins accepting; forward serves forwarded-command connections.
func (m *mux) start(forward func(net.Conn)) {
	m.forward = forward
	m.wg.Go(m.acceptLoop)
}

func (m *mux) acceptLoop() {
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.closed:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			m.logger.Warn("raft listener accept failed", "err", err)
			return
		}
		if !m.track(conn) {
			return
		}
		m.wg.Go(func() { m.serve(conn) })
	}
}

// track records conn so Close can close it; false if already closed.
func (m *mux) track(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.closed:
		_ = c.Close()
		return false
	default:
	}
	m.conns[c] = struct{}{}
	return true
}

func (m *mux) untrack(c net.Conn) {
	m.mu.Lock()
	delete(m.conns, c)
	m.mu.Unlock()
}

func (m *mux) serve(raw net.Conn) {
	conn := tls.Server(raw, m.serverTLS)
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	var kind [1]byte
	if err := conn.Handshake(); err != nil {
		m.logger.Warn("raft listener: TLS handshake failed", "remote", raw.RemoteAddr(), "err", err)
		m.drop(raw)
		return
	}
	if enroll.IsEnrollment(conn.ConnectionState()) {
		// Never Raft or a forwarded command: this peer may hold no
		// certificate at all.
		if m.enroll != nil {
			m.enroll(conn)
		}
		m.drop(raw)
		return
	}
	if _, err := io.ReadFull(conn, kind[:]); err != nil {
		m.drop(raw)
		return
	}
	_ = conn.SetDeadline(time.Time{})
	tc := &trackedConn{Conn: conn, m: m, raw: raw}
	switch kind[0] {
	case muxRaft:
		select {
		case m.raftConns <- tc:
		case <-m.closed:
			_ = tc.Close()
		}
	case muxForward:
		m.forward(tc)
		_ = tc.Close()
	default:
		m.logger.Warn("raft listener: unknown connection type", "remote", raw.RemoteAddr(), "type", kind[0])
		m.drop(raw)
	}
}

func (m *mux) drop(raw net.Conn) {
	_ = raw.Close()
	m.untrack(raw)
}

// dialKind opens a TLS connection to addr and announces its kind.
func (m *mux) dialKind(addr string, kind byte, timeout time.Duration) (net.Conn, error) {
	select {
	case <-m.closed:
		return nil, errMuxClosed
	default:
	}
	raw, err := m.dial("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	if !m.track(raw) {
		return nil, errMuxClosed
	}
	conn := tls.Client(raw, m.clientTLS)
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if err := conn.Handshake(); err != nil {
		m.drop(raw)
		return nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
	}
	if _, err := conn.Write([]byte{kind}); err != nil {
		m.drop(raw)
		return nil, fmt.Errorf("write to %s: %w", addr, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return &trackedConn{Conn: conn, m: m, raw: raw}, nil
}

// Close stops accepting, closes every connection and waits for the
// listener's goroutines.
func (m *mux) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		close(m.closed)
		for c := range m.conns {
			_ = c.Close()
		}
		m.mu.Unlock()
		_ = m.ln.Close()
	})
	m.wg.Wait()
	return nil
}

// trackedConn forgets itself in the mux when closed.
type trackedConn struct {
	net.Conn
	m    *mux
	raw  net.Conn
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.m.untrack(c.raw) })
	return err
}

// streamLayer is the hraft.StreamLayer on top of the mux.
type streamLayer struct{ m *mux }

var _ hraft.StreamLayer = streamLayer{}

func (s streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.m.raftConns:
		return c, nil
	case <-s.m.closed:
		return nil, errMuxClosed
	}
}

// Close is a no-op: the Coordinator closes the mux after Raft has shut
// down, because the same listener serves forwarded commands.
func (s streamLayer) Close() error { return nil }

// Addr is the advertised address: what peers dial.
func (s streamLayer) Addr() net.Addr { return s.m.advertise }

func (s streamLayer) Dial(addr hraft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return s.m.dialKind(string(addr), muxRaft, timeout)
}

// advertiseAddr is a fixed net.Addr.
type advertiseAddr string

func (a advertiseAddr) Network() string { return "tcp" }
func (a advertiseAddr) String() string  { return string(a) }
