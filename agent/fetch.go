package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/transfer"
)

// fetchTimeout bounds one OpFetch (transfer.Client.FetchChunks resumes a
// broken connection within it; a fetch cut short keeps what arrived, on
// the client's side, for the next).
const fetchTimeout = time.Hour

// streamFetch answers OpFetch on conn: it checks that the caller may have
// the job's results, fetches them from a node that holds its newest
// version over the mesh (QUIC, mutual TLS; this node's own transfer
// server included, the holders of the newest version first) and relays
// the chunks the client lacks to it (localapi.Fetch). The client writes
// the files as its own user; this agent writes nothing for it. r reads
// what the client sends after its request.
func (a *Agent) streamFetch(conn net.Conn, r io.Reader, req localapi.Request, who caller) {
	conn.SetDeadline(time.Now().Add(fetchTimeout))
	end := a.fetchFor(conn, r, req, who)
	b, err := json.Marshal(end)
	if err != nil {
		b, _ = json.Marshal(localapi.FetchEnd{Error: err.Error(), Kind: localapi.KindInternal})
	}
	localapi.WriteFrame(conn, localapi.FrameEnd, b)
}

func (a *Agent) fetchFor(conn net.Conn, r io.Reader, req localapi.Request, who caller) localapi.FetchEnd {
	c := a.Coordinator()
	if c == nil {
		return localapi.FetchEnd{Error: "coordinator not running", Kind: localapi.KindInternal}
	}
	job := req.JobID
	if err := localapi.ValidJobName(job); err != nil {
		return localapi.FetchEnd{Error: "fetch: " + err.Error(), Kind: localapi.KindBadRequest}
	}
	st := c.State()
	j, ok := st.Jobs[policy.JobID(job)]
	if !ok {
		return localapi.FetchEnd{Error: fmt.Sprintf("no job %q", job), Kind: localapi.KindUnknownJob}
	}
	if !a.mayManage(who, j) {
		return localapi.FetchEnd{Error: fmt.Sprintf("fetch: job %s belongs to %s; user %s@%s is neither its owner nor a cluster admin", job, j.Owner, who.Name, a.cfg.Name),
			Kind: localapi.KindForbidden}
	}
	holders := resultHolders(st, policy.JobID(job), policy.NodeID(a.cfg.Name))
	if len(holders) == 0 {
		return localapi.FetchEnd{Error: fmt.Sprintf("job %s has no version any active node holds (no checkpoint yet, or its holders left)", job),
			Kind: localapi.KindNoOutputs}
	}
	checkpoint := req.Fetch != nil && req.Fetch.Checkpoint
	ctx, cancel := context.WithTimeout(context.Background(), fetchTimeout)
	defer cancel()
	relay := &fetchRelay{w: conn, r: r, cancel: cancel}
	var errs []error
	for _, h := range holders {
		res, err := a.jobs.client.FetchChunks(ctx, string(h), st.Nodes[h].TransferAddr, job, checkpoint, relay)
		if err == nil {
			_, outs, _ := ckpt.SplitOutputs(res.Manifest.Files)
			info := &localapi.FetchInfo{Job: job, Version: res.Manifest.Version, From: string(h),
				Received: res.Received, AlreadyHad: res.AlreadyHad, ReceivedBytes: res.ReceivedBytes}
			for _, f := range outs {
				if !f.IsDir() {
					info.Files++
					info.Bytes += f.Size
				}
			}
			return localapi.FetchEnd{Fetched: info, Manifest: res.Manifest.Encode()}
		}
		if relay.err != nil {
			return localapi.FetchEnd{Error: fmt.Sprintf("fetch %s: the client went away: %v", job, relay.err), Kind: localapi.KindInternal}
		}
		if errors.Is(err, transfer.ErrCancelled) || ctx.Err() != nil {
			return localapi.FetchEnd{Error: fmt.Sprintf("fetch %s: %v", job, err), Kind: localapi.KindInternal}
		}
		errs = append(errs, fmt.Errorf("from %s: %w", h, err))
	}
	err := errors.Join(errs...)
	kind := localapi.KindInternal
	if slices.ContainsFunc(errs, func(e error) bool { return errors.Is(e, transfer.ErrPurged) }) {
		kind = localapi.KindPurged
	}
	return localapi.FetchEnd{Error: fmt.Sprintf("fetch %s: no holder could serve it: %v", job, err), Kind: kind}
}

// needTimeout bounds how long the client may take to say which chunks it
// lacks (it looks them up in its staging store).
const needTimeout = time.Minute

// fetchRelay is the ChunkStore of a fetch for a local client: it asks the
// client which chunks it lacks and hands each chunk on, kept nowhere here.
// A client that goes away cancels the fetch.
type fetchRelay struct {
	mu     sync.Mutex // one frame at a time; the fetch's readers run in parallel
	w      net.Conn
	r      io.Reader
	cancel context.CancelFunc
	err    error // the first failure to reach the client
}

func (f *fetchRelay) fail(err error) {
	if f.err == nil {
		f.err = err
	}
	f.cancel()
}

// Missing asks the client which of refs it lacks; only refs it offered
// count. When the client cannot be asked, the fetch is cancelled.
func (f *fetchRelay) Missing(refs []ckpt.ChunkRef) []ckpt.ChunkRef {
	f.mu.Lock()
	defer f.mu.Unlock()
	offer := localapi.FetchOffer{Chunks: make([]localapi.ChunkRef, len(refs))}
	byHash := make(map[string]ckpt.ChunkRef, len(refs))
	for i, r := range refs {
		offer.Chunks[i] = localapi.ChunkRef{Hash: r.Hash.String(), Size: r.Size}
		byHash[offer.Chunks[i].Hash] = r
	}
	b, err := json.Marshal(offer)
	if err == nil {
		err = localapi.WriteFrame(f.w, localapi.FrameOffer, b)
	}
	var need localapi.FetchNeed
	if err == nil {
		// The client is any local user: its answer is bounded by the
		// offer and must come soon.
		f.w.SetReadDeadline(time.Now().Add(needTimeout))
		var typ byte
		if typ, b, err = localapi.ReadFrame(f.r, len(b)+1024); err == nil && typ != localapi.FrameNeed {
			err = fmt.Errorf("client sent frame %q, want its need", typ)
		}
	}
	if err == nil {
		err = json.Unmarshal(b, &need)
	}
	if err != nil {
		f.fail(err)
		return refs
	}
	var out []ckpt.ChunkRef
	for _, c := range need.Chunks {
		if r, ok := byHash[c.Hash]; ok {
			out = append(out, r)
			delete(byHash, c.Hash)
		}
	}
	return out
}

// PutChunk hands a chunk the fetch received to the client, after checking
// it against its hash (a corrupt one is asked for again).
func (f *fetchRelay) PutChunk(h ckpt.Hash, data []byte) error {
	if ckpt.Sum(data) != h {
		return fmt.Errorf("chunk %s: %w", h, ckpt.ErrHashMismatch)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if err := localapi.WriteFrame(f.w, localapi.FrameChunk, append(h[:], data...)); err != nil {
		f.fail(err)
		return fmt.Errorf("relay chunk %s to the client: %w", h, err)
	}
	return nil
}

// resultHolders lists the active nodes with a transfer address that hold
// a version of job, those holding the newest first (self first among
// equals: no network hop).
func resultHolders(st *state.State, job policy.JobID, self policy.NodeID) []policy.NodeID {
	var out []policy.NodeID
	cps := st.Checkpoints[job]
	for i := len(cps) - 1; i >= 0; i-- {
		hs := slices.Clone(cps[i].Holders)
		slices.SortStableFunc(hs, func(a, b policy.NodeID) int {
			switch {
			case a == self:
				return -1
			case b == self:
				return 1
			}
			return 0
		})
		for _, h := range hs {
			if n, ok := st.Nodes[h]; ok && n.State == state.NodeActive && n.TransferAddr != "" && !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
	}
	return out
}
