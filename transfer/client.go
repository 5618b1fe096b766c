package transfer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/policy"
	"golang.org/x/time/rate"
)

// Client sends checkpoints from its store. It is safe for concurrent use;
// each transfer has its own socket.
type Client struct {
	cfg   Config
	codec *codec
	log   *slog.Logger
}

// NewClient validates cfg and returns a Client; Close it when done. A
// Client without a Store can only fetch.
func NewClient(cfg Config) (*Client, error) {
	if err := cfg.validateNet(); err != nil {
		return nil, err
	}
	cd, err := newCodec(cfg.Streams)
	if err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, codec: cd, log: cfg.logger()}, nil
}

// Close releases the compressor. Transfers still running fail.
func (c *Client) Close() error {
	c.codec.Close()
	return nil
}

// Request says what to send where.
type Request struct {
	// Addr is the receiver's transfer address (host:port).
	Addr string
	// Node is the receiver's node name; its certificate must name it.
	Node string
	// JobID and Version pick a committed version in the sender's store.
	JobID   string
	Version uint64
	// Class is the traffic class the kernel layer marks this flow with.
	Class policy.TrafficClass
	// Rate is the assigned rate in bytes per second: Unlimited for an
	// unpaced transfer; 0 (no room: the policy's meaning) holds it at
	// PausedRate.
	Rate float64
	// BindIP is the local address to send from ("" = any).
	BindIP string
}

// Stats counts what a transfer did.
type Stats struct {
	// Attempts is the number of connections made (1 + resumes).
	Attempts int
	// ChunksSent and RawBytes count chunks and their uncompressed bytes
	// sent, over all attempts (re-sends included).
	ChunksSent int64
	RawBytes   int64
	// WireBytes counts CHUNK frame bytes written to streams (after
	// compression), updated per piece written; QUIC's own overhead is not
	// included.
	WireBytes int64
	// Resent counts chunks sent again because the receiver asked again.
	Resent int64
	// Shuffled and Compressed count chunks by encoding.
	Shuffled   int64
	Compressed int64
	// QUICBytesSent, PacketsSent and PacketsLost are quic-go's counters of
	// the connections that ended (QUIC packets with their headers and AEAD
	// tags, retransmissions included; no UDP/IP headers): what the path
	// carried for the chunks.
	QUICBytesSent int64
	PacketsSent   int64
	PacketsLost   int64
}

// Transfer is one send in progress.
type Transfer struct {
	c      *Client
	req    Request
	m      *ckpt.Manifest
	udp    *net.UDPConn
	tr     *quic.Transport
	cancel context.CancelCauseFunc
	done   chan struct{}
	err    error // set before done closes

	chunkSender
	resent, attempts atomic.Int64
	// quic-go's counters of the ended connections.
	quicBytes, quicPackets, quicLost atomic.Int64
}

// chunkSender sends chunks read from a store as CHUNK frames, each on a
// data stream it opens: a Transfer's sender and a server answering a
// fetch both use one.
type chunkSender struct {
	store   *ckpt.Store
	codec   *codec
	mode    Compression
	limiter *rate.Limiter
	// corrupt is Config.corruptChunk (tests).
	corrupt func(h ckpt.Hash, payload []byte)
	chooser chooser

	chunks, raw, wire, shuffled, compressed atomic.Int64
	// writeNanos is the time spent inside stream writes (blocked by QUIC
	// flow or congestion control, i.e. by the path or the receiver), as
	// opposed to waiting for the pacer: it tells a pacing dip's cause.
	writeNanos atomic.Int64
}

// Send runs a transfer to completion.
func (c *Client) Send(ctx context.Context, req Request) (Stats, error) {
	t, err := c.Start(ctx, req)
	if err != nil {
		return Stats{}, err
	}
	err = t.Wait()
	return t.Stats(), err
}

// Start binds the transfer's own UDP socket and starts sending in the
// background. LocalPort is valid as soon as Start returns, before the first
// packet.
func (c *Client) Start(ctx context.Context, req Request) (*Transfer, error) {
	if c.cfg.Store == nil {
		return nil, errors.New("start transfer: the client has no store")
	}
	m, err := c.cfg.Store.Manifest(req.JobID, req.Version)
	if err != nil {
		return nil, fmt.Errorf("start transfer: %w", err)
	}
	if !(req.Rate >= 0) {
		return nil, fmt.Errorf("start transfer: rate %v: want Unlimited or a rate ≥ 0", req.Rate)
	}
	var ip net.IP
	if req.BindIP != "" {
		if ip = net.ParseIP(req.BindIP); ip == nil {
			return nil, fmt.Errorf("start transfer: bad bind address %q", req.BindIP)
		}
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip})
	if err != nil {
		return nil, fmt.Errorf("start transfer: socket: %w", err)
	}
	t := &Transfer{c: c, req: req, m: m, udp: udp, tr: &quic.Transport{Conn: udp}, done: make(chan struct{})}
	t.chunkSender.init(c.cfg.Store, c.codec, c.cfg.Compression, c.cfg.corruptChunk)
	t.SetRate(req.Rate)
	ctx, t.cancel = context.WithCancelCause(ctx)
	go t.run(ctx)
	return t, nil
}

// LocalPort is the UDP source port of every packet of this transfer.
func (t *Transfer) LocalPort() int { return t.udp.LocalAddr().(*net.UDPAddr).Port }

// Class is the transfer's traffic class.
func (t *Transfer) Class() policy.TrafficClass { return t.req.Class }

// Manifest is what is being sent.
func (t *Transfer) Manifest() *ckpt.Manifest { return t.m }

// Rates a transfer may be given besides a number of bytes per second.
const (
	// Unlimited is the rate of an unpaced transfer (P3 off, or no decided
	// flow); every rate at or above it is unpaced.
	Unlimited = math.MaxFloat64
	// PausedRate is the pace of a transfer given a rate of 0 (the policy
	// left it no room this period): next to nothing on the links, enough
	// to keep its connection until room returns.
	PausedRate = 16 << 10
)

// SetRate changes the assigned rate (bytes per second; Unlimited for
// none, 0 for PausedRate). It takes effect at the next piece written.
func (t *Transfer) SetRate(bytesPerSec float64) {
	switch {
	case bytesPerSec >= Unlimited:
		t.limiter.SetLimit(rate.Inf)
		return
	case bytesPerSec <= 0 || math.IsNaN(bytesPerSec):
		bytesPerSec = PausedRate
	}
	t.limiter.SetLimit(rate.Limit(bytesPerSec))
	t.limiter.SetBurst(burstFor(bytesPerSec))
}

// burstFor keeps the bucket to about 10 ms of the rate (so each 1 s window is
// within about 1 % of it) but never below two pieces (or WaitN could not
// pass a piece).
func burstFor(bytesPerSec float64) int {
	b := int(bytesPerSec / 100)
	if b < 2*pieceSize {
		b = 2 * pieceSize
	}
	return b
}

// Cancel stops the transfer; the receiver removes the partial data.
func (t *Transfer) Cancel() { t.cancel(ErrCancelled) }

// Done is closed when the transfer has finished.
func (t *Transfer) Done() <-chan struct{} { return t.done }

// Wait blocks until the transfer finishes and returns its error.
func (t *Transfer) Wait() error {
	<-t.done
	return t.err
}

// Stats returns the counters so far.
func (t *Transfer) Stats() Stats {
	return Stats{
		Attempts: int(t.attempts.Load()), ChunksSent: t.chunks.Load(), RawBytes: t.raw.Load(),
		WireBytes: t.wire.Load(), Resent: t.resent.Load(), Shuffled: t.shuffled.Load(), Compressed: t.compressed.Load(),
		QUICBytesSent: t.quicBytes.Load(), PacketsSent: t.quicPackets.Load(), PacketsLost: t.quicLost.Load(),
	}
}

// permanent marks an error that a new attempt cannot fix.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

func (t *Transfer) run(ctx context.Context) {
	defer close(t.done)
	defer t.udp.Close()
	defer t.tr.Close()
	defer t.cancel(nil)
	log := t.c.log.With("job", t.m.JobID, "version", t.m.Version, "peer", t.req.Node, "port", t.LocalPort())
	var err error
	for attempt := 1; attempt <= t.c.cfg.Attempts; attempt++ {
		t.attempts.Add(1)
		err = t.session(ctx)
		if err == nil {
			t.err = nil
			return
		}
		if cause := context.Cause(ctx); cause != nil {
			if errors.Is(cause, ErrCancelled) {
				err = ErrCancelled
			} else {
				err = cause
			}
			break
		}
		var p permanent
		if errors.As(err, &p) || isTLSFailure(err) {
			break
		}
		if attempt < t.c.cfg.Attempts {
			log.Info("transfer: connection lost, resuming", "attempt", attempt, "err", err)
			select {
			case <-time.After(t.c.cfg.RetryBackoff):
			case <-ctx.Done():
			}
		}
	}
	t.err = fmt.Errorf("send %s v%d to %s: %w", t.m.JobID, t.m.Version, t.req.Node, err)
}

func isTLSFailure(err error) bool {
	var te *quic.TransportError
	return errors.As(err, &te) && te.ErrorCode.IsCryptoError()
}

// session runs one connection: OFFER, NEED, chunks, DONE.
func (t *Transfer) session(ctx context.Context) (err error) {
	addr, err := net.ResolveUDPAddr("udp", t.req.Addr)
	if err != nil {
		return permanent{fmt.Errorf("resolve %s: %w", t.req.Addr, err)}
	}
	tlsConf := t.c.cfg.TLS.ClientTLS(t.req.Node, ALPN)
	dctx, dcancel := context.WithTimeout(ctx, t.c.cfg.HandshakeTimeout)
	conn, err := t.tr.Dial(dctx, addr, tlsConf, t.c.cfg.quicConfig())
	dcancel()
	if err != nil {
		if isTLSFailure(err) {
			return permanent{fmt.Errorf("handshake: %w", err)}
		}
		return fmt.Errorf("dial: %w", err)
	}
	code, msg := codeFailed, "sender failed"
	defer func() {
		if err == nil {
			code, msg = codeOK, "done"
		} else if ctx.Err() != nil {
			code, msg = codeCancelled, "cancelled"
		}
		conn.CloseWithError(code, msg)
		cs := conn.ConnectionStats()
		t.quicBytes.Add(int64(cs.BytesSent))
		t.quicPackets.Add(int64(cs.PacketsSent))
		t.quicLost.Add(int64(cs.PacketsLost))
	}()
	ctl, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return fmt.Errorf("open control stream: %w", err)
	}
	if err := writeFrame(ctl, frameOffer, encodeOffer(t.req.Class, t.m)); err != nil {
		return fmt.Errorf("send offer: %w", err)
	}
	first, err := readFrame(ctl, maxControlFrame)
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	var need []ckpt.Hash
	switch first.typ {
	case frameDone:
		return checkDone(first.payload, t.m)
	case frameFail:
		return failError(first.payload)
	case frameNeed:
		if need, err = parseHashes(first.payload); err != nil {
			return permanent{err}
		}
	default:
		return permanent{fmt.Errorf("%w: unexpected %v", ErrProtocol, first.typ)}
	}
	sizes := make(map[ckpt.Hash]int64)
	for _, c := range t.m.Chunks() {
		sizes[c.Hash] = c.Size
	}
	queue := newWorkQueue(need)

	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	finished := make(chan error, 2+t.c.cfg.Streams)
	var wg sync.WaitGroup
	wg.Go(func() {
		finished <- t.readControl(ctl, queue)
	})
	for i := 0; i < t.c.cfg.Streams; i++ {
		wg.Go(func() {
			if err := t.worker(sctx, conn, queue, sizes); err != nil {
				finished <- err
			}
		})
	}
	select {
	case err = <-finished:
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	scancel()
	if err == nil {
		conn.CloseWithError(codeOK, "done")
	} else if ctx.Err() != nil {
		conn.CloseWithError(codeCancelled, "cancelled")
	} else {
		conn.CloseWithError(codeFailed, "sender failed")
	}
	wg.Wait()
	return err
}

// readControl handles the receiver's frames after the first NEED. It
// returns nil on DONE.
func (t *Transfer) readControl(ctl *quic.Stream, queue *workQueue) error {
	for {
		f, err := readFrame(ctl, maxControlFrame)
		if err != nil {
			return fmt.Errorf("control stream: %w", err)
		}
		switch f.typ {
		case frameNeed:
			hs, err := parseHashes(f.payload)
			if err != nil {
				return permanent{err}
			}
			t.resent.Add(int64(len(hs)))
			queue.push(hs)
		case frameDone:
			return checkDone(f.payload, t.m)
		case frameFail:
			return failError(f.payload)
		default:
			return permanent{fmt.Errorf("%w: unexpected %v", ErrProtocol, f.typ)}
		}
	}
}

func checkDone(p []byte, m *ckpt.Manifest) error {
	want := m.Hash()
	if len(p) != 32 || [32]byte(p) != want {
		return permanent{fmt.Errorf("%w: DONE for another manifest", ErrProtocol)}
	}
	return nil
}

func failError(p []byte) error {
	f, err := parseFail(p)
	if err != nil {
		return permanent{err}
	}
	var base error
	switch f.code {
	case failUnknown:
		base = ErrUnknownJob
	case failPurged:
		base = ErrPurged
	case failQuota:
		base = ErrRemoteQuota
	case failDiskFull:
		base = ErrRemoteDiskFull
	case failCorrupt:
		base = ErrCorruptInTransit
	default:
		base = ErrRefused
	}
	return permanent{fmt.Errorf("%w: %s", base, f.msg)}
}

func (cs *chunkSender) init(store *ckpt.Store, cd *codec, mode Compression, corrupt func(ckpt.Hash, []byte)) {
	cs.store, cs.codec, cs.mode, cs.corrupt = store, cd, mode, corrupt
	cs.limiter = rate.NewLimiter(rate.Inf, 4*pieceSize)
}

// worker sends queued chunks on its own data stream. It opens the stream
// before it takes a chunk from the queue: a receiver that grants fewer
// streams than Config.Streams leaves the extra workers waiting here, holding
// nothing the granted streams could send.
func (cs *chunkSender) worker(ctx context.Context, conn *quic.Conn, queue *workQueue, sizes map[ckpt.Hash]int64) error {
	st, err := conn.OpenUniStreamSync(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("open data stream: %w", err)
	}
	defer st.Close()
	buf := make([]byte, 0, ckpt.DefaultChunker.Max+ckpt.DefaultChunker.Max/8)
	rawBuf := make([]byte, 0, ckpt.DefaultChunker.Max+1)
	for {
		h, ok := queue.pop(ctx)
		if !ok {
			return nil
		}
		if _, known := sizes[h]; !known {
			continue // not ours to send
		}
		raw, err := cs.store.ReadChunkInto(h, rawBuf)
		rawBuf = raw[:0]
		if err != nil {
			return permanent{fmt.Errorf("read local chunk: %w", err)}
		}
		enc, payload := cs.codec.encode(cs.mode, raw, buf, &cs.chooser)
		if enc != encRaw {
			buf = payload[:0]
			cs.compressed.Add(1)
			if enc == encShuffle {
				cs.shuffled.Add(1)
			}
		}
		head := appendFrameHeader(make([]byte, 0, frameHeaderLen+chunkHeaderLen), frameChunk, chunkHeaderLen+len(payload))
		head = appendChunkHeader(head, h, len(raw), enc)
		if cs.corrupt != nil {
			payload = append([]byte(nil), payload...)
			cs.corrupt(h, payload)
		}
		if err := cs.pacedWrite(ctx, st, head); err != nil {
			return err
		}
		if err := cs.pacedWrite(ctx, st, payload); err != nil {
			return err
		}
		cs.chunks.Add(1)
		cs.raw.Add(int64(len(raw)))
	}
}

// pacedWrite writes b in pieces, waiting for the rate limiter before each.
func (cs *chunkSender) pacedWrite(ctx context.Context, st *quic.SendStream, b []byte) error {
	for len(b) > 0 {
		n := min(len(b), pieceSize)
		if err := cs.limiter.WaitN(ctx, n); err != nil {
			return fmt.Errorf("pace: %w", err)
		}
		w0 := time.Now()
		_, err := st.Write(b[:n])
		cs.writeNanos.Add(int64(time.Since(w0)))
		if err != nil {
			return fmt.Errorf("write data stream: %w", err)
		}
		cs.wire.Add(int64(n))
		b = b[n:]
	}
	return nil
}
