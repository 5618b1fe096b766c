package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/owner"
	"github.com/reclaimnet/reclaimnet/localapi"
)

// ErrReclaimed is Serve's error when a reclaim made the node leave and the
// agent is to exit (Config.OnReclaim "exit", or a --dev node).
var ErrReclaimed = errors.New("the node was reclaimed and left the cluster; start the agent again to lend it")

// Serve runs the node on its owner's terms until ctx ends. While the owner
// policy lends the machine it runs the agent in the cluster (New, Run);
// when a reclaim has made the node leave, or the policy does not lend it
// (outside the lending windows, the owner's reclaim, the owner at work),
// the node is reclaimed: out of the cluster, the kill-switch left as the
// reclaim set it (hard), no guests, and only the control socket answers
// (lend, lend --status, reclaim --status) until the owner lends it or
// the policy does. Then the agent joins again as a new incarnation.
//
// With OnReclaim "exit" (and for a --dev node, whose state is thrown away)
// the first reclaim ends Serve with ErrReclaimed instead. ready is called
// each time an incarnation serves.
func Serve(ctx context.Context, cfg Config, logger *slog.Logger, ready func(*Agent, localapi.Info)) error {
	if logger == nil {
		logger = slog.Default()
	}
	exitOnReclaim := cfg.Dev || cfg.OnReclaim == OnReclaimExit
	for first := true; ; first = false {
		if !cfg.Dev {
			lent, err := standby(ctx, cfg, logger, first && exitOnReclaim)
			if err != nil || !lent {
				return err
			}
		}
		a, err := New(cfg, logger)
		if err != nil {
			return err
		}
		if err := a.Run(ctx, func(info localapi.Info) {
			if ready != nil {
				ready(a, info)
			}
		}); err != nil {
			return err
		}
		if !a.Reclaimed() || ctx.Err() != nil {
			return nil
		}
		if exitOnReclaim {
			return ErrReclaimed
		}
		logger.Info("reclaimed: staying up out of the cluster until lent again ('reclaimnet lend')", "node", cfg.Name)
	}
}

// standby waits, holding the data dir and answering the control socket,
// until the owner policy lends the node (true) or ctx ends (false). A node
// already lent returns at once. ownerStart: the owner started the agent by
// hand, which ends the hold of their last reclaim.
func standby(ctx context.Context, cfg Config, logger *slog.Logger, ownerStart bool) (bool, error) {
	if err := cfg.Validate(); err != nil {
		return false, fmt.Errorf("config: %w", err)
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return false, err
	}
	defer lock.release()
	log := logger.With("subsystem", "owner")
	l, err := openLending(cfg, nil, log)
	if err != nil {
		return false, fmt.Errorf("config: %w", err)
	}
	defer l.close()
	if ownerStart {
		l.startedByOwner()
	}
	if l.lent() || l.decide(ctx, time.Now()).Do == owner.Lend {
		return true, nil
	}
	ln, err := listenControl(cfg.DataDir)
	if err != nil {
		return false, err
	}
	s := &standbyNode{cfg: cfg, lending: l, lent: make(chan struct{})}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() { s.serve(ln, &wg) })
	st := l.status(time.Now())
	log.Info("reclaimed: out of the cluster until lent again", "state", st.State, "why", st.Why)
	tick := time.NewTicker(cfg.ownerCheck())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case <-s.lent:
			log.Info("lent by the owner (reclaimnet lend): joining the cluster")
			return true, nil
		case <-tick.C:
			if d := l.decide(ctx, time.Now()); d.Do == owner.Lend {
				log.Info("lent by the owner policy: joining the cluster", "reason", d.Reason)
				return true, nil
			}
		}
	}
}

// standbyNode answers the control socket of a reclaimed node.
type standbyNode struct {
	cfg      Config
	lending  *lending
	lentOnce sync.Once
	lent     chan struct{}
}

func (s *standbyNode) serve(ln net.Listener, wg *sync.WaitGroup) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		wg.Go(func() {
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(30 * time.Second))
			var req localapi.Request
			resp := localapi.Response{}
			if err := json.NewDecoder(io.LimitReader(bufio.NewReader(conn), 64<<10)).Decode(&req); err != nil {
				resp = localapi.Response{Error: fmt.Sprintf("bad request: %v", err), Kind: localapi.KindBadRequest}
			} else {
				resp = s.control(req)
			}
			json.NewEncoder(conn).Encode(resp)
		})
	}
}

func (s *standbyNode) control(req localapi.Request) localapi.Response {
	now := time.Now()
	switch req.Op {
	case localapi.OpLendStatus:
		st := s.lending.status(now)
		return lendResponse(st)
	case localapi.OpLend:
		st, err := s.lending.lend(req.Until, now)
		if err != nil {
			return localapi.Response{Error: "lend: " + err.Error(), Kind: localapi.KindBadRequest}
		}
		s.lentOnce.Do(func() { close(s.lent) })
		return lendResponse(st)
	case localapi.OpReclaimStatus, localapi.OpReclaim, localapi.OpReclaimNow:
		if req.Op != localapi.OpReclaimStatus {
			// Already out; the owner's reclaim still holds the node
			// back from the next window.
			s.lending.ownerReclaimed(now, now)
		}
		rep, err := localapi.ReadReport(s.cfg.DataDir)
		if err != nil {
			return localapi.Response{Error: err.Error(), Kind: localapi.KindInternal}
		}
		return localapi.Response{Reclaim: &localapi.ReclaimStatus{Node: s.cfg.Name, Complete: true, Report: rep, Reclaimed: true}}
	}
	return localapi.Response{Error: fmt.Sprintf("%s: node %s is reclaimed, out of the cluster ('reclaimnet lend' lends it again; 'reclaimnet lend --status' says when it will be)", req.Op, s.cfg.Name), Kind: localapi.KindReclaimed}
}
