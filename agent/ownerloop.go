package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/enforce"
	"github.com/reclaimnet/reclaimnet/agent/owner"
	"github.com/reclaimnet/reclaimnet/bpf"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/mesh"
)

// ownerCheck is how often the owner policy looks at the machine.
func (c Config) ownerCheck() time.Duration {
	if c.OwnerCheck > 0 {
		return time.Duration(c.OwnerCheck)
	}
	return DefaultOwnerCheck
}

// ownerLoop runs the owner policy while the node is in the cluster: every
// check it reads the owner's activity and acts on the decision through the
// same reclaim path as the owner's own commands.
func (a *Agent) ownerLoop(ctx context.Context) {
	tick := time.NewTicker(a.cfg.ownerCheck())
	defer tick.Stop()
	for {
		a.ownerRound(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-a.reclaim.Leaving():
			return
		case <-tick.C:
		}
	}
}

// ownerRound is one decision and what the agent does for it.
func (a *Agent) ownerRound(ctx context.Context, now time.Time) {
	d := a.lending.decide(ctx, now)
	defer a.publishOutlook(now)
	switch {
	case d.Do == owner.Reclaim && d.Now:
		a.logger.Warn("owner policy: reclaim now", "reason", d.Reason)
		if resp := a.reclaim.Now(d.Reason); resp.Error != "" {
			a.logger.Error("owner policy: reclaim now", "err", resp.Error)
		}
	case d.Do == owner.Reclaim:
		a.logger.Info("owner policy: reclaim", "notice", d.Notice, "reason", d.Reason)
		if resp := a.reclaim.Announce(d.Deadline, d.Reason); resp.Error != "" {
			a.logger.Warn("owner policy: reclaim not announced", "err", resp.Error)
		}
	case d.Do == owner.Lend:
		a.logger.Info("owner policy: lent", "reason", d.Reason)
		a.lendNow()
	default:
		a.finishReclaim(now)
	}
}

// finishReclaim carries out a reclaim the policy decided earlier that the
// reclaim flow does not run (its announcement failed: no leader then): a
// node the policy no longer lends must not stay in the cluster.
func (a *Agent) finishReclaim(now time.Time) {
	deadline, due, reason, ok := a.lending.unfinished()
	if !ok {
		return
	}
	if pending, leaving := a.reclaim.Pending(); pending || leaving {
		return
	}
	if due || !now.Before(deadline) {
		a.logger.Warn("owner policy: reclaim due, carrying it out now", "reason", reason)
		a.reclaim.Now(reason)
		return
	}
	if resp := a.reclaim.Announce(deadline, reason); resp.Error != "" {
		a.logger.Warn("owner policy: reclaim not announced yet", "err", resp.Error)
	}
}

// publishOutlook puts the owner policy's outlook at now (lent until when,
// or lendable again from when) in the node's gossip metadata when it
// changed: the leader keeps P2 off a node whose lending ends soon, and the
// members list and the page show it.
func (a *Agent) publishOutlook(now time.Time) {
	b, err := a.lending.status(now).Outlook().Encode()
	if err != nil {
		a.logger.Warn("owner outlook", "err", err)
		return
	}
	a.metaMu.Lock()
	defer a.metaMu.Unlock()
	if bytes.Equal(b, a.meta.Outlook) {
		return
	}
	meta := a.meta
	meta.Outlook = b
	if err := a.mesh.UpdateMeta(meta, time.Second); err != nil {
		a.logger.Warn("publish owner outlook", "err", err)
		return
	}
	a.meta = meta
}

// lendingAfter is the owner policy's state once the node has left at at,
// and when it may be lent again, for the owner's report and the history.
func (a *Agent) lendingAfter(at time.Time) (string, time.Time) {
	o := a.lending.status(at).Outlook()
	return string(o.State), o.From
}

// lendNow makes the running node lent: a pending reclaim is withdrawn and
// the kill-switch turned off.
func (a *Agent) lendNow() error {
	if pending, _ := a.reclaim.Pending(); pending {
		if resp := a.reclaim.Handle(localapi.Request{Op: localapi.OpReclaimCancel}); resp.Error != "" {
			return errors.New(resp.Error)
		}
		return nil
	}
	return a.killSwitchOff()
}

// killSwitchOff turns the kernel kill-switch off where it is on: a lent
// node takes guests and their traffic.
func (a *Agent) killSwitchOff() error {
	if a.enforce == nil || !a.enforce.Enabled() {
		return nil
	}
	if mode, _ := a.enforce.KillSwitch(); mode == mesh.KillSwitchOff {
		return nil
	}
	if err := a.enforce.SetKillSwitch(bpf.ModeOff); err != nil && !errors.Is(err, enforce.ErrOff) {
		a.logger.Error("lend: kill-switch off", "err", err)
		return err
	}
	return nil
}

// ownerControl answers the lending operations and notes the owner's own
// reclaims in the owner policy's state.
func (a *Agent) ownerControl(req localapi.Request) localapi.Response {
	now := time.Now()
	switch req.Op {
	case localapi.OpLendStatus:
		st := a.lending.status(now)
		return lendResponse(st)
	case localapi.OpLend:
		st, err := a.lending.lend(req.Until, now)
		if err != nil {
			return localapi.Response{Error: "lend: " + err.Error(), Kind: localapi.KindBadRequest}
		}
		if _, leaving := a.reclaim.Pending(); !leaving {
			if err := a.lendNow(); err != nil {
				return localapi.Response{Error: "lend: " + err.Error(), Kind: localapi.KindInternal}
			}
		}
		// A node already leaving comes back at once: the agent sees the
		// lend when it has left.
		a.publishOutlook(now)
		st = a.lending.status(now)
		return lendResponse(st)
	case localapi.OpReclaimNow:
		// Recorded first: the node leaves right after.
		a.lending.ownerReclaimed(now, now)
		return a.reclaim.Handle(req)
	case localapi.OpReclaim:
		resp := a.reclaim.Handle(req)
		if resp.Error == "" && resp.Reclaim != nil {
			a.lending.ownerReclaimed(resp.Reclaim.Deadline, now)
		}
		return resp
	case localapi.OpReclaimCancel:
		resp := a.reclaim.Handle(req)
		if resp.Error == "" {
			a.lending.reclaimCancelled(now)
		}
		return resp
	}
	return a.reclaim.Handle(req)
}

// lendResponse carries the owner policy's status to the CLI.
func lendResponse(st owner.Status) localapi.Response {
	b, err := json.Marshal(st)
	if err != nil {
		return localapi.Response{Error: fmt.Sprintf("lend status: %v", err), Kind: localapi.KindInternal}
	}
	return localapi.Response{Lend: b}
}
