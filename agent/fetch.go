package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/transfer"
)

// fetchTimeout bounds one OpFetch (transfer.Client.Fetch resumes a broken
// connection within it; a fetch cut short keeps what arrived for the next).
const fetchTimeout = time.Hour

// fetchResults downloads job's outputs (and with req.CheckpointOut its
// checkpoint) from a node that holds its newest version: over the mesh
// (QUIC, mutual TLS), this node's own transfer server included, the
// holders of the newest version first.
func (a *Agent) fetchResults(job string, req *localapi.FetchRequest) localapi.Response {
	c := a.Coordinator()
	if c == nil {
		return localapi.Response{Error: "coordinator not running", Kind: localapi.KindInternal}
	}
	if req == nil || !filepath.IsAbs(req.Out) || (req.CheckpointOut != "" && !filepath.IsAbs(req.CheckpointOut)) {
		return localapi.Response{Error: "fetch: want absolute destinations", Kind: localapi.KindBadRequest}
	}
	st := c.State()
	if _, ok := st.Jobs[policy.JobID(job)]; !ok {
		return localapi.Response{Error: fmt.Sprintf("no job %q", job), Kind: localapi.KindUnknownJob}
	}
	holders := resultHolders(st, policy.JobID(job), policy.NodeID(a.cfg.Name))
	if len(holders) == 0 {
		return localapi.Response{Error: fmt.Sprintf("job %s has no version any active node holds (no checkpoint yet, or its holders left)", job),
			Kind: localapi.KindNoOutputs}
	}
	ctx, cancel := context.WithTimeout(context.Background(), fetchTimeout)
	defer cancel()
	var errs []error
	for _, h := range holders {
		res, err := a.jobs.client.Fetch(ctx, transfer.FetchRequest{Addr: st.Nodes[h].TransferAddr, Node: string(h), JobID: job,
			Dest: req.Out, CheckpointDest: req.CheckpointOut})
		if err == nil {
			_, outs, _ := ckpt.SplitOutputs(res.Manifest.Files)
			info := &localapi.FetchInfo{Job: job, Version: res.Manifest.Version, From: string(h), Out: req.Out, CheckpointOut: req.CheckpointOut,
				Received: res.Received, AlreadyHad: res.AlreadyHad, ReceivedBytes: res.ReceivedBytes}
			for _, f := range outs {
				if !f.IsDir() {
					info.Files++
					info.Bytes += f.Size
				}
			}
			return localapi.Response{Fetched: info}
		}
		switch {
		case errors.Is(err, transfer.ErrDestExists):
			return localapi.Response{Error: "fetch: " + err.Error(), Kind: localapi.KindBadRequest}
		case errors.Is(err, ckpt.ErrDiskFull), errors.Is(err, ckpt.ErrQuota):
			return localapi.Response{Error: fmt.Sprintf("fetch %s: %v (what arrived is kept in %s for the next fetch)", job, err, transfer.StagingDir(req.Out)),
				Kind: localapi.KindDiskFull}
		case errors.Is(err, transfer.ErrCancelled), ctx.Err() != nil:
			return localapi.Response{Error: fmt.Sprintf("fetch %s: %v", job, err), Kind: localapi.KindInternal}
		}
		errs = append(errs, fmt.Errorf("from %s: %w", h, err))
	}
	err := errors.Join(errs...)
	kind := localapi.KindInternal
	if slices.ContainsFunc(errs, func(e error) bool { return errors.Is(e, transfer.ErrPurged) }) {
		kind = localapi.KindPurged
	}
	return localapi.Response{Error: fmt.Sprintf("fetch %s: no holder could serve it: %v", job, err), Kind: kind}
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
