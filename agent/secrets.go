package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"crypto/x509"

	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/pki/enroll"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
)

// Job secrets (run --secret-env, docs/trust.md): sealed by the submitting
// node to the cluster secrets key, so the log holds ciphertext only;
// released by a voter, resealed to the certificate of the node that runs
// the job, into the job's environment and nowhere else.

// sealSecrets seals a job's secret variables for the replicated state.
func sealSecrets(st *state.State, job string, secrets map[string]string) ([]state.SealedSecret, error) {
	if len(secrets) == 0 {
		return nil, nil
	}
	if len(st.SecretsKey) == 0 {
		return nil, errors.New("the cluster has no secrets key (it was not started with 'reclaimnet agent --bootstrap'), so it cannot keep secrets")
	}
	names := make([]string, 0, len(secrets))
	for k := range secrets {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]state.SealedSecret, 0, len(names))
	for _, k := range names {
		sealed, err := pki.SealSecret(st.SecretsKey, job, k, []byte(secrets[k]))
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", k, err)
		}
		out = append(out, state.SealedSecret{Name: k, Sealed: sealed})
	}
	return out, nil
}

// releaseSecret is the voter's side: job's secret name, resealed to peer,
// if the replicated state says peer runs the job.
func (a *Agent) releaseSecret(c *raft.Coordinator, peer *x509.Certificate, job, name string) ([]byte, error) {
	vk := a.voterKeys.Load()
	if vk == nil || vk.Secrets == nil {
		return nil, fmt.Errorf("%w: node %s holds no secrets key (only voters do)", enroll.ErrNotServed, a.cfg.Name)
	}
	j, ok := c.Store().Job(policy.JobID(job))
	if !ok || j.State == policy.JobDone || string(j.Node) != peer.Subject.CommonName {
		return nil, fmt.Errorf("%w: job %s does not run on %s", enroll.ErrNotHost, job, peer.Subject.CommonName)
	}
	i := slices.IndexFunc(j.Spec.Secrets, func(s state.SealedSecret) bool { return s.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("%w: job %s has no secret %s", enroll.ErrBadRequest, job, name)
	}
	return vk.Secrets.ResealSecret(job, name, j.Spec.Secrets[i].Sealed, peer)
}

// secretEnv is the host's side: the job's secret variables as KEY=VALUE,
// opened with this node's own secrets key on a voter, otherwise fetched
// from a voter (the leader first), retrying until ctx ends.
func (a *Agent) secretEnv(ctx context.Context, j state.JobRecord) ([]string, error) {
	env := make([]string, 0, len(j.Spec.Secrets))
	for _, sec := range j.Spec.Secrets {
		v, err := a.openSecret(ctx, string(j.ID), sec)
		if err != nil {
			return nil, fmt.Errorf("secret %s of job %s: %w", sec.Name, j.ID, err)
		}
		env = append(env, sec.Name+"="+string(v))
	}
	return env, nil
}

func (a *Agent) openSecret(ctx context.Context, job string, sec state.SealedSecret) ([]byte, error) {
	if vk := a.voterKeys.Load(); vk != nil && vk.Secrets != nil {
		return vk.Secrets.OpenSecret(job, sec.Name, sec.Sealed)
	}
	for {
		var errs []error
		for _, s := range a.votersLeaderFirst() {
			if string(s.ID) == a.cfg.Name {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			v, err := (&enroll.Client{}).JobSecret(cctx, s.Addr, a.identity.Bundle(), job, sec.Name)
			cancel()
			if err == nil {
				return v, nil
			}
			errs = append(errs, err)
		}
		err := errors.Join(errs...)
		if err == nil {
			err = errors.New("no voter to ask")
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Second):
		}
	}
}
