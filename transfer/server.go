package transfer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/policy"
)

// Hooks let the agent take part in receiving and serving. Each may be nil.
type Hooks struct {
	// Authorize may refuse an offer (for example a job this node was not
	// chosen for). peer is the sender's node name from its certificate.
	Authorize func(peer string, class policy.TrafficClass, m *ckpt.Manifest) error
	// OnCommit is called after a version is committed locally, before DONE
	// is sent: the place to record "replica complete" in the catalogue.
	OnCommit func(peer string, class policy.TrafficClass, m *ckpt.Manifest)
	// AuthorizeFetch decides whether peer may download job's outputs (and,
	// with checkpoint, its last checkpoint); its error is sent back as the
	// refusal. Nil refuses every fetch: a node serves outputs only once
	// the agent says whose they are.
	AuthorizeFetch func(peer, job string, checkpoint bool) error
}

// Server receives checkpoints on a fixed UDP port.
type Server struct {
	cfg   Config
	hooks Hooks
	codec *codec
	log   *slog.Logger
	udp   *net.UDPConn
	tr    *quic.Transport
	ln    *quic.Listener
	sem   chan struct{}

	// versions holds the state shared by the connections receiving each
	// (job, version) now; vmu also orders aborts and expiry against new
	// connections for the same version.
	vmu      sync.Mutex
	versions map[versionKey]*versionState

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// Listen binds addr (host:port; port 0 picks one) and starts accepting.
// Close stops it and waits for every connection handler.
func Listen(addr string, cfg Config, hooks Hooks) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	udp, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return Serve(udp, cfg, hooks)
}

// Serve starts accepting on udp, a socket bound beforehand (so its port
// can be announced before the hooks exist). The server owns udp from here,
// on error too.
func Serve(udp *net.UDPConn, cfg Config, hooks Hooks) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		udp.Close()
		return nil, err
	}
	addr := udp.LocalAddr().String()
	cd, err := newCodec(cfg.Streams)
	if err != nil {
		udp.Close()
		return nil, err
	}
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.Listen(cfg.TLS.ServerTLS(ALPN), cfg.quicConfig())
	if err != nil {
		cd.Close()
		tr.Close()
		udp.Close()
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	s := &Server{cfg: cfg, hooks: hooks, codec: cd, log: cfg.logger(), udp: udp, tr: tr, ln: ln, sem: make(chan struct{}, cfg.MaxTransfers), versions: map[versionKey]*versionState{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Go(s.acceptLoop)
	if age := cfg.pendingMaxAge(); age > 0 {
		s.wg.Go(func() { s.expireLoop(age) })
	}
	return s, nil
}

// Addr is the listening address.
func (s *Server) Addr() *net.UDPAddr { return s.udp.LocalAddr().(*net.UDPAddr) }

// Close stops accepting, ends every connection (their pending versions stay
// for a resume) and waits for the handlers. It is idempotent.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.cancel()
		s.ln.Close()
		s.wg.Wait()
		s.tr.Close()
		s.udp.Close()
		s.codec.Close()
	})
	return nil
}

func (s *Server) acceptLoop() {
	for {
		conn, err := s.ln.Accept(s.ctx)
		if err != nil {
			return
		}
		s.wg.Go(func() { s.handle(conn) })
	}
}

// gate guards stores into one pending version against its abort.
type gate struct {
	mu     sync.RWMutex
	closed bool
}

func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

type versionKey struct {
	job     string
	version uint64
}

// versionState is shared by every connection receiving one (job, version):
// a sender that resumes on a new connection before the receiver noticed the
// old one broke, or two senders of the same checkpoint.
type versionState struct {
	manifest [32]byte // hash of the manifest being received
	refs     int      // connections holding it
	gate     *gate    // closed when the version is aborted
}

// acquireVersion registers a connection receiving m. A different manifest
// under the same (job, version) while one is being received is refused.
func (s *Server) acquireVersion(m *ckpt.Manifest) (*versionState, error) {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	k := versionKey{m.JobID, m.Version}
	vs := s.versions[k]
	if vs == nil {
		vs = &versionState{manifest: m.Hash(), gate: &gate{}}
		s.versions[k] = vs
	} else if vs.manifest != m.Hash() {
		return nil, fmt.Errorf("%s v%d: another transfer with a different manifest is in progress", m.JobID, m.Version)
	}
	vs.refs++
	return vs, nil
}

// abortVersion removes the partial data of m, unless another connection is
// still receiving it (that one carries on and owns the clean-up). It
// reports whether it aborted.
func (s *Server) abortVersion(m *ckpt.Manifest, vs *versionState) bool {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	if vs.refs > 1 {
		return false
	}
	k := versionKey{m.JobID, m.Version}
	if s.versions[k] == vs {
		// A connection arriving from now on starts afresh.
		delete(s.versions, k)
	}
	vs.gate.close()
	if err := s.cfg.Store.AbortPending(m.JobID, m.Version); err != nil {
		s.log.Warn("transfer: abort", "job", m.JobID, "version", m.Version, "err", err)
	}
	return true
}

// releaseVersion ends a connection's hold on m; the last one out restarts
// the pending version's expiry age.
func (s *Server) releaseVersion(m *ckpt.Manifest, vs *versionState) {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	vs.refs--
	k := versionKey{m.JobID, m.Version}
	if vs.refs == 0 && s.versions[k] == vs {
		delete(s.versions, k)
		s.cfg.Store.TouchPending(m.JobID, m.Version)
	}
}

// expireStale aborts pending versions that no connection holds and that
// saw no activity for the configured age (by the store's clock): senders
// that never came back.
func (s *Server) expireStale(age time.Duration) {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	expired, err := s.cfg.Store.ExpirePending(age, func(job string, version uint64) bool {
		return s.versions[versionKey{job, version}] != nil
	})
	for _, m := range expired {
		s.log.Info("transfer: stale pending version removed", "job", m.JobID, "version", m.Version, "max_age", age)
	}
	if err != nil {
		s.log.Warn("transfer: expiring stale pending versions", "err", err)
	}
}

// expireLoop runs expireStale at open and then every quarter of the age
// (at most every minute).
func (s *Server) expireLoop(age time.Duration) {
	s.expireStale(age)
	t := time.NewTicker(min(age/4, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.expireStale(age)
		case <-s.ctx.Done():
			return
		}
	}
}

var errAborted = errors.New("version aborted")

func (g *gate) put(st *ckpt.Store, h ckpt.Hash, raw []byte) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return errAborted
	}
	return st.PutChunk(h, raw)
}

// errUnknownChunk: a CHUNK frame names a hash the manifest does not.
var errUnknownChunk = fmt.Errorf("%w: chunk not in manifest", ErrProtocol)

// rxResult is what a data-stream reader reports for one chunk.
type rxResult struct {
	hash ckpt.Hash
	err  error
}

func (s *Server) handle(conn *quic.Conn) {
	peer, _ := pki.PeerNode(conn.ConnectionState().TLS)
	log := s.log.With("peer", peer, "remote", conn.RemoteAddr().String())
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	// Closing the connection when the server stops unblocks every read.
	s.wg.Go(func() {
		<-ctx.Done()
		conn.CloseWithError(codeFailed, "receiver closing")
	})

	actx, acancel := context.WithTimeout(ctx, s.cfg.HandshakeTimeout)
	ctl, err := conn.AcceptStream(actx)
	acancel()
	if err != nil {
		log.Debug("transfer: no control stream", "err", err)
		return
	}
	fail := func(code failCode, err error) {
		log.Warn("transfer: refused or failed", "code", code, "err", err)
		writeFrame(ctl, frameFail, encodeFail(code, err.Error()))
		// Give the FAIL frame a moment to leave before closing.
		select {
		case <-conn.Context().Done():
		case <-time.After(s.cfg.IdleTimeout):
		}
	}
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	default:
		fail(failRefused, fmt.Errorf("busy: %d transfers in progress", s.cfg.MaxTransfers))
		return
	}
	f, err := readFrame(ctl, maxControlFrame)
	if err != nil {
		log.Debug("transfer: no offer", "err", err)
		return
	}
	if f.typ == frameFetch {
		s.serveFetch(ctx, conn, ctl, f.payload, peer, log, fail)
		return
	}
	if f.typ != frameOffer {
		fail(failBad, fmt.Errorf("%w: want OFFER or FETCH, got %v", ErrProtocol, f.typ))
		return
	}
	off, err := parseOffer(f.payload)
	if err != nil {
		fail(failBad, err)
		return
	}
	m := off.manifest
	log = log.With("job", m.JobID, "version", m.Version, "class", off.class.String())
	if s.hooks.Authorize != nil {
		if err := s.hooks.Authorize(peer, off.class, m); err != nil {
			fail(failRefused, err)
			return
		}
	}
	store := s.cfg.Store
	vs, err := s.acquireVersion(m)
	if err != nil {
		fail(failRefused, err)
		return
	}
	defer s.releaseVersion(m, vs)
	if err := store.BeginPending(m); err != nil {
		s.failStore(fail, err)
		return
	}
	need := store.Missing(m.Chunks())
	wanted := make(map[ckpt.Hash]int64)
	for _, c := range m.Chunks() {
		wanted[c.Hash] = c.Size
	}
	outstanding := make(map[ckpt.Hash]bool, len(need))
	hs := make([]ckpt.Hash, len(need))
	for i, c := range need {
		hs[i] = c.Hash
		outstanding[c.Hash] = true
	}
	log.Debug("transfer: offer", "chunks", len(wanted), "need", len(need))
	if err := writeFrame(ctl, frameNeed, encodeHashes(hs)); err != nil {
		return
	}

	// The version's gate stops stream readers from storing chunks once the
	// version is aborted, so the abort's clean-up is final. An abort while
	// another connection still receives the version leaves it to that one.
	g := vs.gate
	abort := func() {
		if !s.abortVersion(m, vs) {
			log.Info("transfer: another connection still receives this version; its data stays")
		}
	}
	results := make(chan rxResult, 64)
	var readers sync.WaitGroup
	defer readers.Wait()
	defer cancel()
	readers.Go(func() {
		for {
			st, err := conn.AcceptUniStream(ctx)
			if err != nil {
				return
			}
			readers.Go(func() {
				readChunks(ctx, st, wanted, s.codec, func(h ckpt.Hash, raw []byte) error {
					err := g.put(store, h, raw)
					if err == nil && s.cfg.chunkStored != nil {
						s.cfg.chunkStored(len(raw))
					}
					return err
				}, results)
			})
		}
	})

	retries := map[ckpt.Hash]int{}
	for len(outstanding) > 0 {
		select {
		case r := <-results:
			switch {
			case r.err == nil:
				delete(outstanding, r.hash)
			case errors.Is(r.err, errUnknownChunk):
				// The sender broke the protocol; a new connection resumes.
				log.Warn("transfer: closing connection", "err", r.err)
				conn.CloseWithError(codeFailed, r.err.Error())
				return
			case errors.Is(r.err, ckpt.ErrDiskFull) || errors.Is(r.err, ckpt.ErrQuota):
				abort()
				s.failStore(fail, r.err)
				return
			case !outstanding[r.hash]:
				// A corrupt copy of a chunk already stored: nothing to do.
			default:
				retries[r.hash]++
				if retries[r.hash] > maxChunkRetries {
					abort()
					fail(failCorrupt, fmt.Errorf("chunk %s corrupt %d times: %w", r.hash, retries[r.hash], r.err))
					return
				}
				log.Warn("transfer: chunk rejected, asking again", "chunk", r.hash.String(), "err", r.err)
				if err := writeFrame(ctl, frameNeed, encodeHashes([]ckpt.Hash{r.hash})); err != nil {
					return
				}
			}
		case <-conn.Context().Done():
			cause := context.Cause(conn.Context())
			var ae *quic.ApplicationError
			if errors.As(cause, &ae) && ae.Remote && ae.ErrorCode == codeCancelled {
				log.Info("transfer: cancelled by sender; partial data removed")
				abort()
			} else {
				log.Info("transfer: connection lost; keeping received chunks for a resume", "missing", len(outstanding), "err", cause)
			}
			return
		}
	}
	t0 := time.Now()
	if err := store.Commit(m); err != nil {
		abort()
		s.failStore(fail, err)
		return
	}
	log.Info("transfer: committed", "bytes", m.TotalSize(), "commit", time.Since(t0))
	if s.hooks.OnCommit != nil {
		s.hooks.OnCommit(peer, off.class, m)
	}
	h := m.Hash()
	if err := writeFrame(ctl, frameDone, h[:]); err != nil {
		return
	}
	// Wait for the sender to close after reading DONE.
	select {
	case <-conn.Context().Done():
	case <-time.After(s.cfg.IdleTimeout):
		conn.CloseWithError(codeOK, "done")
	case <-ctx.Done():
	}
}

func (s *Server) failStore(fail func(failCode, error), err error) {
	switch {
	case errors.Is(err, ckpt.ErrDiskFull):
		fail(failDiskFull, err)
	case errors.Is(err, ckpt.ErrQuota):
		fail(failQuota, err)
	case errors.Is(err, ckpt.ErrBadManifest):
		fail(failBad, err)
	default:
		fail(failInternal, err)
	}
}

// readChunks decodes CHUNK frames from one data stream, hands each chunk
// of the size wanted names to put (which verifies its hash and stores it)
// and reports each on results.
func readChunks(ctx context.Context, st *quic.ReceiveStream, wanted map[ckpt.Hash]int64, cd *codec, put func(ckpt.Hash, []byte) error, results chan<- rxResult) {
	report := func(r rxResult) bool {
		select {
		case results <- r:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var buf []byte
	for {
		f, err := readFrameInto(st, maxChunkFrame, buf)
		if cap(f.payload) > cap(buf) {
			buf = f.payload[:0]
		}
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				return // stream or connection closed
			}
			st.CancelRead(1)
			return
		}
		if f.typ != frameChunk {
			st.CancelRead(1)
			return
		}
		c, err := parseChunk(f.payload)
		if err != nil {
			st.CancelRead(1)
			return
		}
		size, ok := wanted[c.hash]
		if !ok {
			report(rxResult{hash: c.hash, err: fmt.Errorf("%w: %s", errUnknownChunk, c.hash)})
			return
		}
		var r rxResult
		r.hash = c.hash
		if int64(c.rawSize) != size {
			r.err = fmt.Errorf("chunk size %d, manifest says %d: %w", c.rawSize, size, ckpt.ErrHashMismatch)
		} else if raw, err := cd.decode(c.enc, c.data, c.rawSize); err != nil {
			r.err = fmt.Errorf("decode: %w", err)
		} else {
			r.err = put(c.hash, raw)
		}
		if !report(r) {
			return
		}
	}
}
