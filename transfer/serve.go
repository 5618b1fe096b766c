package transfer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/quic-go/quic-go"
	"github.com/reclaimnet/reclaimnet/ckpt"
)

// fetchParts returns the entries of m a fetch delivers: the outputs (paths
// relative to the output directory) and, with checkpoint, the checkpoint
// files.
func fetchParts(m *ckpt.Manifest, checkpoint bool) (ck, out []ckpt.File) {
	ck, out, _ = ckpt.SplitOutputs(m.Files)
	if !checkpoint {
		ck = nil
	}
	return ck, out
}

// chunkSizes maps every distinct chunk of files to its size.
func chunkSizes(parts ...[]ckpt.File) map[ckpt.Hash]int64 {
	sizes := map[ckpt.Hash]int64{}
	for _, files := range parts {
		for _, f := range files {
			for _, c := range f.Chunks {
				sizes[c.Hash] = c.Size
			}
		}
	}
	return sizes
}

// serveFetch answers a FETCH: it sends the manifest of the job's newest
// version here and then the chunks the requester asks for (only chunks of
// the parts it may have), until the requester sends DONE or goes away.
func (s *Server) serveFetch(ctx context.Context, conn *quic.Conn, ctl *quic.Stream, payload []byte, peer string, log *slog.Logger, fail func(failCode, error)) {
	req, err := parseFetch(payload)
	if err != nil {
		fail(failBad, err)
		return
	}
	log = log.With("fetch", req.job, "checkpoint", req.checkpoint)
	if s.hooks.AuthorizeFetch == nil {
		fail(failRefused, errors.New("this node serves no fetches"))
		return
	}
	if err := s.hooks.AuthorizeFetch(peer, req.job, req.checkpoint); err != nil {
		fail(failRefused, err)
		return
	}
	store := s.cfg.Store
	m, err := store.Latest(req.job)
	if _, bundle := ckpt.IsBundleKey(req.job); err != nil || bundle {
		if at, ok := store.Purged(req.job); ok {
			fail(failPurged, fmt.Errorf("job %s: its outputs were purged at %s", req.job, at.UTC().Format("2006-01-02 15:04:05Z")))
			return
		}
		fail(failUnknown, fmt.Errorf("job %s: no outputs here", req.job))
		return
	}
	if err := writeFrame(ctl, frameManifest, m.Encode()); err != nil {
		return
	}
	sizes := chunkSizes(fetchParts(m, req.checkpoint))
	f, err := readFrame(ctl, maxControlFrame)
	if err != nil {
		return
	}
	if f.typ != frameNeed {
		fail(failBad, fmt.Errorf("%w: want NEED, got %v", ErrProtocol, f.typ))
		return
	}
	need, err := parseHashes(f.payload)
	if err != nil {
		fail(failBad, err)
		return
	}
	if err := allowed(need, sizes); err != nil {
		fail(failBad, err)
		return
	}
	log.Debug("transfer: serving fetch", "version", m.Version, "chunks", len(need))
	var cs chunkSender
	cs.init(store, s.codec, s.cfg.Compression, s.cfg.corruptChunk)
	queue := newWorkQueue(need)
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	finished := make(chan error, 1+s.cfg.Streams)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer scancel()
	wg.Go(func() {
		for {
			f, err := readFrame(ctl, maxControlFrame)
			if err != nil {
				finished <- err
				return
			}
			switch f.typ {
			case frameNeed:
				hs, err := parseHashes(f.payload)
				if err == nil {
					err = allowed(hs, sizes)
				}
				if err != nil {
					finished <- err
					return
				}
				queue.push(hs)
			case frameDone:
				finished <- nil
				return
			default:
				finished <- fmt.Errorf("%w: unexpected %v", ErrProtocol, f.typ)
				return
			}
		}
	})
	for i := 0; i < s.cfg.Streams; i++ {
		wg.Go(func() {
			if err := cs.worker(sctx, conn, queue, sizes); err != nil {
				finished <- err
			}
		})
	}
	select {
	case err = <-finished:
	case <-sctx.Done():
		err = context.Cause(sctx)
	}
	if err != nil {
		log.Info("transfer: fetch ended early", "err", err)
		conn.CloseWithError(codeFailed, "fetch ended")
		return
	}
	log.Info("transfer: fetch served", "version", m.Version, "chunks", cs.chunks.Load(), "bytes", cs.raw.Load())
	conn.CloseWithError(codeOK, "done")
}

// allowed checks that every hash asked for is one of sizes.
func allowed(hs []ckpt.Hash, sizes map[ckpt.Hash]int64) error {
	for _, h := range hs {
		if _, ok := sizes[h]; !ok {
			return fmt.Errorf("%w: chunk %s is not part of what was asked for", ErrProtocol, h)
		}
	}
	return nil
}
