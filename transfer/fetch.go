package transfer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/reclaimnet/reclaimnet/ckpt"
)

// Errors a fetch returns besides ErrRefused, ErrCancelled and ckpt's
// ErrDiskFull (match with errors.Is).
var (
	// ErrUnknownJob: the holder has no version of the job.
	ErrUnknownJob = errors.New("no such job here")
	// ErrPurged: the job's outputs were kept for their time and then
	// purged.
	ErrPurged = errors.New("outputs purged")
	// ErrDestExists: a destination exists and is not an empty directory.
	ErrDestExists = errors.New("destination exists")
)

// FetchRequest says what to download, from which holder, to where.
type FetchRequest struct {
	// Addr and Node are a holder's transfer address and node name (its
	// certificate must name it).
	Addr string
	Node string
	// JobID is the job whose newest version the holder serves.
	JobID string
	// Dest receives the job's outputs. It must not exist or be an empty
	// directory; it appears complete or not at all.
	Dest string
	// CheckpointDest, when set, receives the checkpoint files of the same
	// version, under the same rules.
	CheckpointDest string
}

// FetchResult tells what a fetch did.
type FetchResult struct {
	// Manifest is the version delivered.
	Manifest *ckpt.Manifest
	// Attempts is the number of connections made.
	Attempts int
	// Chunks is how many distinct chunks the delivered parts have;
	// AlreadyHad of them were in the staging directory (received and
	// verified by an earlier, interrupted fetch) and Received came over
	// the network in this call.
	Chunks, AlreadyHad, Received int
	// ReceivedBytes is the raw size of the chunks received.
	ReceivedBytes int64
}

// StagingDir is where a fetch to dest keeps what it received and verified
// until it completes: a hidden directory beside dest, removed on success
// and kept on failure, so that a retry to the same dest fetches only the
// rest.
func StagingDir(dest string) string {
	dest = filepath.Clean(dest)
	return filepath.Join(filepath.Dir(dest), "."+filepath.Base(dest)+".fetch")
}

// Fetch downloads the outputs of req.JobID (and, with CheckpointDest, its
// checkpoint) from a holder over QUIC with mutual TLS. Chunks are verified
// as they arrive and kept in StagingDir(Dest); a broken connection is
// retried (Config.Attempts) and a later call resumes, asking only for what
// is still missing. The files are written into temporary directories
// beside the destinations and renamed into place, so a destination is
// either complete or absent. The Client's Store is not used.
func (c *Client) Fetch(ctx context.Context, req FetchRequest) (FetchResult, error) {
	res, err := c.fetch(ctx, req)
	if err != nil {
		return res, fmt.Errorf("fetch %s from %s: %w", req.JobID, req.Node, err)
	}
	return res, nil
}

func (c *Client) fetch(ctx context.Context, req FetchRequest) (FetchResult, error) {
	if err := ckpt.ValidJobID(req.JobID); err != nil {
		return FetchResult{}, err
	}
	return Stage(req.Dest, req.CheckpointDest, c.log, func(staging ChunkStore) (FetchResult, error) {
		return c.fetchChunks(ctx, req.Node, req.Addr, req.JobID, req.CheckpointDest != "", staging)
	})
}

// Stage is the receiving end of a fetch into dest (and checkpointDest,
// "": not wanted): both must be absent or empty directories. get fills
// the staging store (StagingDir(dest), kept when get fails so that the
// next call to the same dest asks only for the rest) and returns the
// version it delivered; Stage then writes the parts into temporary
// directories beside the destinations and renames each into place, so a
// destination is complete or absent. 'reclaimnet fetch' runs it as its
// caller, with get relaying through the agent.
func Stage(dest, checkpointDest string, log *slog.Logger, get func(ChunkStore) (FetchResult, error)) (FetchResult, error) {
	var res FetchResult
	if dest == "" {
		return res, errors.New("no destination")
	}
	for _, d := range []string{dest, checkpointDest} {
		if err := checkDest(d); err != nil {
			return res, err
		}
	}
	stagingDir := StagingDir(dest)
	staging, err := ckpt.Open(ckpt.Config{Root: stagingDir, Logger: log})
	if err != nil {
		return res, fmt.Errorf("staging: %w", diskFull(err))
	}
	defer func() {
		staging.Close()
		// A staging directory that holds nothing is no use to a retry.
		if staging.Usage() == 0 {
			os.RemoveAll(stagingDir)
		}
	}()
	if res, err = get(staging); err != nil {
		return res, err
	}
	if res.Manifest == nil {
		return res, errors.New("fetch delivered no manifest")
	}
	if err := place(staging, res.Manifest, dest, checkpointDest); err != nil {
		return res, err
	}
	staging.Close()
	if err := os.RemoveAll(stagingDir); err != nil {
		log.Warn("transfer: removing the fetch's staging directory", "err", err)
	}
	return res, nil
}

// ChunkStore keeps the chunks a fetch receives: a ckpt.Store, or a relay
// to the process that keeps them (the agent's to 'reclaimnet fetch', which
// writes the files as its caller).
type ChunkStore interface {
	// Missing returns the refs it does not hold yet.
	Missing(refs []ckpt.ChunkRef) []ckpt.ChunkRef
	// PutChunk keeps one chunk, verified against its hash by the fetch.
	PutChunk(h ckpt.Hash, data []byte) error
}

// FetchChunks downloads the newest version of job from the holder node at
// addr into store: the outputs' chunks, and with checkpoint the
// checkpoint's, only those store lacks, verified as they arrive. A broken
// connection is retried (Config.Attempts). It returns once store holds
// every chunk of the parts; placing the files is the caller's (Stage).
// The Client's Store is not used and nothing is written to disk here.
func (c *Client) FetchChunks(ctx context.Context, node, addr, job string, checkpoint bool, store ChunkStore) (FetchResult, error) {
	res, err := c.fetchChunks(ctx, node, addr, job, checkpoint, store)
	if err != nil {
		return res, fmt.Errorf("fetch %s from %s: %w", job, node, err)
	}
	return res, nil
}

func (c *Client) fetchChunks(ctx context.Context, node, addr, job string, checkpoint bool, store ChunkStore) (FetchResult, error) {
	var res FetchResult
	if err := ckpt.ValidJobID(job); err != nil {
		return res, err
	}
	udpAddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return res, fmt.Errorf("resolve %s: %w", addr, err)
	}
	udp, err := net.ListenUDP("udp", nil)
	if err != nil {
		return res, fmt.Errorf("socket: %w", err)
	}
	defer udp.Close()
	tr := &quic.Transport{Conn: udp}
	defer tr.Close()

	f := &fetcher{c: c, node: node, job: job, checkpoint: checkpoint, staging: store, tr: tr, addr: udpAddr, res: &res}
	var m *ckpt.Manifest
	for attempt := 1; attempt <= c.cfg.Attempts; attempt++ {
		res.Attempts = attempt
		if c.cfg.fetchAttempt != nil {
			c.cfg.fetchAttempt(attempt)
		}
		m, err = f.session(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return res, fmt.Errorf("%w (what arrived is kept for a retry)", ErrCancelled)
		}
		var p permanent
		if errors.As(err, &p) || isTLSFailure(err) {
			return res, err
		}
		if attempt < c.cfg.Attempts {
			c.log.Info("transfer: fetch connection lost, resuming", "job", job, "attempt", attempt, "err", err)
			select {
			case <-time.After(c.cfg.RetryBackoff):
			case <-ctx.Done():
			}
		}
	}
	if err != nil {
		return res, err
	}
	res.Manifest = m
	return res, nil
}

// checkDest refuses a destination that exists and is not an empty
// directory ("" is no destination).
func checkDest(d string) error {
	if d == "" {
		return nil
	}
	ents, err := os.ReadDir(d)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		if st, serr := os.Lstat(d); serr == nil && !st.IsDir() {
			return fmt.Errorf("%s: %w (not a directory)", d, ErrDestExists)
		}
		return err
	case len(ents) > 0:
		return fmt.Errorf("%s: %w (not empty)", d, ErrDestExists)
	}
	return nil
}

// place writes the fetched parts into temporary directories beside the
// destinations and renames each into place.
func place(staging *ckpt.Store, m *ckpt.Manifest, dest, checkpointDest string) error {
	var tmps []string
	defer func() {
		for _, t := range tmps {
			os.RemoveAll(t)
		}
	}()
	tmpFor := func(d string) (string, error) {
		if d == "" {
			return "", nil
		}
		if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
			return "", diskFull(err)
		}
		t, err := os.MkdirTemp(filepath.Dir(d), "."+filepath.Base(d)+".partial-")
		if err != nil {
			return "", diskFull(err)
		}
		tmps = append(tmps, t)
		return t, nil
	}
	outTmp, err := tmpFor(dest)
	if err != nil {
		return err
	}
	ckTmp, err := tmpFor(checkpointDest)
	if err != nil {
		return err
	}
	if err := staging.RestoreCheckpoint(m, ckTmp, outTmp); err != nil {
		return err
	}
	for _, p := range []struct{ tmp, dst string }{{outTmp, dest}, {ckTmp, checkpointDest}} {
		if p.dst == "" {
			continue
		}
		if err := os.Chmod(p.tmp, 0o755); err != nil {
			return err
		}
		// rename(2) replaces an empty directory and fails on any other
		// (os.Rename refuses every existing directory).
		if err := syscall.Rename(p.tmp, p.dst); err != nil {
			if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTDIR) {
				return fmt.Errorf("%s: %w", p.dst, ErrDestExists)
			}
			return fmt.Errorf("rename into %s: %w", p.dst, err)
		}
		if d, err := os.Open(filepath.Dir(p.dst)); err == nil {
			d.Sync()
			d.Close()
		}
	}
	return nil
}

// diskFull makes ENOSPC and EDQUOT match ckpt.ErrDiskFull.
func diskFull(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w", ckpt.ErrDiskFull, err)
	}
	return err
}

// fetcher runs the connections of one fetch.
type fetcher struct {
	c          *Client
	node, job  string
	checkpoint bool
	staging    ChunkStore
	tr         *quic.Transport
	addr       *net.UDPAddr
	res        *FetchResult
	counted    bool // AlreadyHad was set by the first NEED
}

// session runs one connection: FETCH, MANIFEST, NEED, chunks, DONE. It
// returns the manifest once every chunk of the wanted parts is staged.
func (f *fetcher) session(ctx context.Context) (_ *ckpt.Manifest, err error) {
	cfg := f.c.cfg
	dctx, dcancel := context.WithTimeout(ctx, cfg.HandshakeTimeout)
	conn, err := f.tr.Dial(dctx, f.addr, cfg.TLS.ClientTLS(f.node, ALPN), cfg.quicConfig())
	dcancel()
	if err != nil {
		if isTLSFailure(err) {
			return nil, permanent{fmt.Errorf("handshake: %w", err)}
		}
		return nil, fmt.Errorf("dial: %w", err)
	}
	defer func() {
		if err != nil {
			conn.CloseWithError(codeFailed, "fetch failed")
		}
	}()
	ctl, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("open control stream: %w", err)
	}
	if err := writeFrame(ctl, frameFetch, encodeFetch(f.job, f.checkpoint)); err != nil {
		return nil, fmt.Errorf("send fetch: %w", err)
	}
	first, err := readFrame(ctl, maxControlFrame)
	if err != nil {
		return nil, fmt.Errorf("read answer: %w", err)
	}
	switch first.typ {
	case frameFail:
		return nil, failError(first.payload)
	case frameManifest:
	default:
		return nil, permanent{fmt.Errorf("%w: unexpected %v", ErrProtocol, first.typ)}
	}
	m, err := ckpt.ParseManifest(first.payload)
	if err != nil {
		return nil, permanent{fmt.Errorf("%w: %w", ErrProtocol, err)}
	}
	if m.JobID != f.job {
		return nil, permanent{fmt.Errorf("%w: asked for %s, got a manifest of %s", ErrProtocol, f.job, m.JobID)}
	}
	ck, out := fetchParts(m, f.checkpoint)
	if err := ckpt.CheckLinks(out); err != nil {
		return nil, permanent{fmt.Errorf("%w: outputs: %w", ErrProtocol, err)}
	}
	wanted := chunkSizes(ck, out)
	refs := make([]ckpt.ChunkRef, 0, len(wanted))
	for h, n := range wanted {
		refs = append(refs, ckpt.ChunkRef{Hash: h, Size: n})
	}
	missing := f.staging.Missing(refs)
	if !f.counted {
		f.counted = true
		f.res.Chunks, f.res.AlreadyHad = len(wanted), len(wanted)-len(missing)
	}
	need := make([]ckpt.Hash, len(missing))
	outstanding := make(map[ckpt.Hash]bool, len(missing))
	for i, r := range missing {
		need[i] = r.Hash
		outstanding[r.Hash] = true
	}
	if err := writeFrame(ctl, frameNeed, encodeHashes(need)); err != nil {
		return nil, fmt.Errorf("send need: %w", err)
	}

	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	results := make(chan rxResult, 64)
	readersDone := make(chan struct{})
	go func() {
		defer close(readersDone)
		var readers sync.WaitGroup
		defer readers.Wait()
		for {
			st, err := conn.AcceptUniStream(rctx)
			if err != nil {
				return
			}
			readers.Go(func() { readChunks(rctx, st, wanted, f.c.codec, f.staging.PutChunk, results) })
		}
	}()
	defer func() {
		// Closing the connection ends the readers' stream reads.
		rcancel()
		if err != nil {
			conn.CloseWithError(codeFailed, "fetch failed")
		}
		<-readersDone
	}()
	// The server's FAILs (e.g. a chunk it can no longer read) end the
	// session.
	ctlErr := make(chan error, 1)
	go func() {
		for {
			fr, err := readFrame(ctl, maxControlFrame)
			if err != nil {
				ctlErr <- fmt.Errorf("control stream: %w", err)
				return
			}
			if fr.typ == frameFail {
				ctlErr <- failError(fr.payload)
				return
			}
		}
	}()
	retries := map[ckpt.Hash]int{}
	for len(outstanding) > 0 {
		select {
		case r := <-results:
			switch {
			case r.err == nil:
				if outstanding[r.hash] {
					delete(outstanding, r.hash)
					f.res.Received++
					f.res.ReceivedBytes += wanted[r.hash]
					if cfg.chunkStored != nil {
						cfg.chunkStored(int(wanted[r.hash]))
					}
				}
			case errors.Is(r.err, errUnknownChunk):
				return nil, r.err
			case errors.Is(r.err, ckpt.ErrDiskFull):
				return nil, permanent{r.err}
			case !outstanding[r.hash]:
			default:
				if retries[r.hash]++; retries[r.hash] > maxChunkRetries {
					return nil, permanent{fmt.Errorf("chunk %s corrupt %d times: %w: %w", r.hash, retries[r.hash], ErrCorruptInTransit, r.err)}
				}
				if err := writeFrame(ctl, frameNeed, encodeHashes([]ckpt.Hash{r.hash})); err != nil {
					return nil, fmt.Errorf("send need: %w", err)
				}
			}
		case err := <-ctlErr:
			return nil, err
		case <-conn.Context().Done():
			return nil, fmt.Errorf("connection lost with %d chunks to go: %w", len(outstanding), context.Cause(conn.Context()))
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	h := m.Hash()
	if err := writeFrame(ctl, frameDone, h[:]); err == nil {
		// Let the server close after it read DONE.
		select {
		case <-conn.Context().Done():
		case <-time.After(cfg.IdleTimeout):
		}
	}
	conn.CloseWithError(codeOK, "done")
	return m, nil
}
