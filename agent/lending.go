package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/owner"
	"github.com/reclaimnet/reclaimnet/gpu"
	"github.com/reclaimnet/reclaimnet/localapi"
)

// OwnerSource is where the owner policy reads the machine's activity each
// round: an owner.Observer over the real sources, or a test's fakes.
type OwnerSource interface {
	Observe(ctx context.Context) owner.Observations
}

// lending is the owner policy at run time: the validated policy, its state
// (kept in the data dir, so an owner's reclaim and the hourly cap survive a
// restart) and the activity sources. The agent and the reclaimed node's
// standby both run one.
type lending struct {
	policy *owner.Policy
	path   string
	source OwnerSource
	// unwatched says why the configured activities are not watched (no
	// source here); it is listed among the problems every round.
	unwatched string
	closer    func() error
	log       *slog.Logger

	mu    sync.Mutex
	state owner.State
}

// openLending builds the policy and the sources from cfg and loads the
// state. gpus are the lent GPUs' indexes (nil: all).
func openLending(cfg Config, gpus []int, logger *slog.Logger) (*lending, error) {
	p, err := cfg.Owner.Policy()
	if err != nil {
		return nil, err
	}
	l := &lending{policy: p, path: filepath.Join(cfg.DataDir, localapi.OwnerStateFile), log: logger}
	if err := l.load(); err != nil {
		return nil, err
	}
	if cfg.OwnerSource != nil {
		l.source = cfg.OwnerSource
		return l, nil
	}
	opts := owner.SourceOptions{LentGPUs: gpus}
	var specs gpu.SpecList
	for _, g := range cfg.GPUs {
		specs.Set(g) // checked by Validate
	}
	opts.GPUs = gpu.Auto(gpu.Options{Declared: specs.Devices})
	if cfg.Sandbox != "off" {
		// Guests are known by their cgroup; with the sandbox off they
		// run as the agent and look like the owner.
		parent, err := cgroupParent(cfg.Name, cfg.DataDir)
		if err != nil {
			return nil, err
		}
		opts.GuestCgroup = "/" + parent
	}
	obs, err := owner.NewObserver(p, opts)
	if err != nil {
		// The node still lends on its windows; the owner sees why their
		// activity is not watched in the log and in lend --status.
		l.unwatched = "owner activity not watched: " + err.Error()
		logger.Warn("owner activity not watched", "err", err)
		l.source = &owner.Observer{}
		return l, nil
	}
	l.source, l.closer = obs, obs.Close
	return l, nil
}

func (l *lending) close() {
	if l.closer != nil {
		l.closer()
	}
}

func (l *lending) load() error {
	b, err := os.ReadFile(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("owner state: %w", err)
	}
	if err := json.Unmarshal(b, &l.state); err != nil {
		// A damaged file loses the cap and an owner's hold, never more:
		// the next round decides from scratch.
		l.log.Warn("owner state unreadable; starting from a clean state", "path", l.path, "err", err)
		l.state = owner.State{}
	}
	return nil
}

// save writes the state (best effort: the policy goes on in memory).
func (l *lending) save() {
	b, err := json.MarshalIndent(l.state, "", "  ")
	if err == nil {
		err = os.WriteFile(l.path+".tmp", b, 0o600)
	}
	if err == nil {
		err = os.Rename(l.path+".tmp", l.path)
	}
	if err != nil {
		l.log.Warn("write owner state", "err", err)
	}
}

// decide runs one round: the sources, then the policy.
func (l *lending) decide(ctx context.Context, now time.Time) owner.Decision {
	obs := l.source.Observe(ctx)
	if l.unwatched != "" {
		obs.Problems = append(obs.Problems, l.unwatched)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st, d := l.policy.Decide(l.state, obs, now)
	l.state = st
	l.save()
	return d
}

// lend is the owner's reclaimnet lend [--until UNTIL].
func (l *lending) lend(until string, now time.Time) (owner.Status, error) {
	var end time.Time
	if until != "" {
		t, err := l.policy.ParseUntil(until, now)
		if err != nil {
			return owner.Status{}, fmt.Errorf("%w: %w", owner.ErrCannotLend, err)
		}
		end = t
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st, _, err := l.policy.Lend(l.state, end, now)
	if err != nil {
		return owner.Status{}, err
	}
	l.state = st
	l.save()
	return l.policy.Status(l.state, now), nil
}

// ownerReclaimed records the owner's reclaimnet reclaim (deadline now for
// --now): nothing lends the node again before the owner or the next
// window does.
func (l *lending) ownerReclaimed(deadline, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state = l.policy.OwnerReclaimed(l.state, deadline, now)
	l.save()
}

// reclaimCancelled records reclaimnet reclaim --cancel.
func (l *lending) reclaimCancelled(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state = l.policy.ReclaimCancelled(l.state, now)
	l.save()
}

func (l *lending) status(now time.Time) owner.Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.policy.Status(l.state, now)
	if l.unwatched != "" && len(st.Problems) == 0 {
		st.Problems = []string{l.unwatched}
	}
	return st
}

// unfinished returns the reclaim the policy itself decided that the node
// has not carried out yet: with its deadline while its notice runs, or
// with now set once it is due at once (an emergency, or a notice that
// ran out). The owner's own reclaims are the owner's commands' business.
func (l *lending) unfinished() (deadline time.Time, now bool, reason string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state
	switch {
	case s.Kind == owner.KindOwner || s.Kind == "":
		return time.Time{}, false, "", false
	case s.Phase == owner.PhaseReclaiming:
		return s.Deadline, false, s.Reason, true
	case s.Phase == owner.PhaseUnlent:
		return time.Time{}, true, s.Reason, true
	}
	return time.Time{}, false, "", false
}

// lent reports whether guests may run here now (lent, not reclaiming).
func (l *lending) lent() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state.Phase == owner.PhaseLent
}

// startedByOwner: starting an agent that exits at a reclaim is the
// owner's lend, so the hold of their last reclaim ends (the windows still
// apply).
func (l *lending) startedByOwner() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state.OwnerHold {
		l.state.OwnerHold, l.state.HoldUntil = false, time.Time{}
		l.save()
	}
}
