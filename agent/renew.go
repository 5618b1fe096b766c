package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/pki/enroll"
)

// renewLoop renews the node's certificate two thirds into its life
// (pki.RenewAt) through a voter, which holds the CA key, and retries a
// failed attempt as pki.NextRenewal says. A certificate from a campus's
// own PKI cannot renew here (no voter holds its CA key): the node logs
// each refusal and keeps its certificate until someone replaces it.
func (a *Agent) renewLoop(ctx context.Context) {
	for {
		leaf := a.identity.Bundle().Leaf
		wait := time.Until(pki.NextRenewal(leaf, time.Now()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if !pki.RenewDue(a.identity.Bundle().Leaf, time.Now()) {
			continue
		}
		if err := a.renewCertificate(ctx); err != nil {
			a.logger.Warn("certificate renewal failed; retrying", "err", err, "expires", leaf.NotAfter,
				"next", pki.NextRenewal(leaf, time.Now()))
		}
	}
}

// renewCertificate asks a voter (the leader first; this node too, when it
// holds the CA key) for a certificate on a fresh key, writes it to the TLS
// dir and makes it current: listeners and dialers present it from their
// next handshake, without a restart.
func (a *Agent) renewCertificate(ctx context.Context) error {
	var errs []error
	for _, s := range a.votersLeaderFirst() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		nc, err := (&enroll.Client{}).Renew(cctx, s.Addr, a.identity.Bundle())
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		nb, err := nc.Bundle(time.Now())
		if err != nil {
			return fmt.Errorf("renewed certificate: %w", err)
		}
		if err := nc.Write(a.cfg.TLSDir); err != nil {
			return fmt.Errorf("renewed certificate: %w", err)
		}
		if err := a.identity.Replace(nb); err != nil {
			return err
		}
		a.logger.Info("certificate renewed", "by", s.ID, "serial", pki.Serial(nb.Leaf), "expires", nb.Leaf.NotAfter)
		return nil
	}
	if len(errs) == 0 {
		return errors.New("no voter to ask")
	}
	return errors.Join(errs...)
}
