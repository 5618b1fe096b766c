package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/supervisor"
	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/transfer"
)

// Config wires a Manager to its node.
type Config struct {
	// Node is this node's ID (its gossip name).
	Node policy.NodeID
	// Coord is the coordinator (a *raft.Coordinator).
	Coord state.Coordinator
	// Store is the node's checkpoint store; the transfer server that
	// receives into it must use TransferHooks.
	Store *ckpt.Store
	// Client sends checkpoints to other nodes.
	Client *transfer.Client
	// Supervisor starts job processes.
	Supervisor *supervisor.Supervisor
	// GPUs are the indices of this node's GPUs that a job can be given
	// (their device nodes exist); each job gets its own, up to the number
	// it asked for. Empty: jobs get none.
	GPUs []int
	// WorkDir holds one directory per job (the supervisor's work directory
	// and restore directories).
	WorkDir string
	// FetchTimeout is how long a recovering job waits for its freshest
	// committed version to reach this node before it falls back to the
	// newest version held here (or a fresh start). 2 minutes by default.
	FetchTimeout time.Duration
	// SubmitTimeout bounds one Submit (10 s by default).
	SubmitTimeout time.Duration
	// StopTimeout bounds waiting for a job to stop (the supervisor's grace
	// plus margin); 1 minute by default.
	StopTimeout time.Duration
	// PurgeEvery is how often ended jobs' results whose keep time passed
	// are dropped from the store (ckpt.Store.Purge); 1 minute by default.
	PurgeEvery time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock for catalogue times; nil means time.Now.
	Now func() time.Time
	// SecretEnv returns a job's secret variables (KEY=VALUE) for its
	// environment, opened for this node (run --secret-env); nil: a job
	// with secrets does not start.
	SecretEnv func(ctx context.Context, job state.JobRecord) ([]string, error)
	// Since is when this node's current membership began as gossip
	// announces it (the agent's start, mesh.Meta.Started). When set, the
	// manager starts no job and no push before the replicated registry
	// records that membership (see waitCurrent): a restarted node must
	// not act on the Raft state it replays locally. Zero skips the wait.
	Since time.Time
	// Observe receives durations for the node's histograms (the agent's
	// /metrics); a nil function records nothing.
	Observe Observers
}

// Observers receive what the manager measures.
type Observers struct {
	// CheckpointWrite is how long storing one checkpoint in the local
	// store took (chunking, compression, fsync).
	CheckpointWrite func(time.Duration)
	// Transfer is how long one completed push to another node took, from
	// its start to the receiver's commit.
	Transfer func(class policy.TrafficClass, d time.Duration)
	// HandoffDowntime is how long a job handed off to this node computed
	// nowhere: from its stop on the source (MoveJob.Stopped) to its
	// readiness here.
	HandoffDowntime func(time.Duration)
}

// Validate reports a configuration that cannot work (zero durations and a
// nil Logger or Now take their defaults).
func (c Config) Validate() error { return c.fill() }

// fill sets defaults on the receiver (New calls it on its own copy) and
// reports missing parts.
func (c *Config) fill() error {
	var errs []error
	if c.Node == "" {
		errs = append(errs, errors.New("jobs: no node ID"))
	}
	if c.Coord == nil {
		errs = append(errs, errors.New("jobs: no coordinator"))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("jobs: no checkpoint store"))
	}
	if c.Client == nil {
		errs = append(errs, errors.New("jobs: no transfer client"))
	}
	if c.Supervisor == nil {
		errs = append(errs, errors.New("jobs: no supervisor"))
	}
	if c.WorkDir == "" {
		errs = append(errs, errors.New("jobs: no work directory"))
	}
	if c.FetchTimeout <= 0 {
		c.FetchTimeout = 2 * time.Minute
	}
	if c.SubmitTimeout <= 0 {
		c.SubmitTimeout = 10 * time.Second
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = time.Minute
	}
	if c.PurgeEvery <= 0 {
		c.PurgeEvery = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return errors.Join(errs...)
}

// Manager runs the jobs the replicated state places on one node.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	workers  map[policy.JobID]*worker
	finished map[policy.JobID]finish // jobs that must not be restarted as they are
	pushes   map[pushKey]*push       // recovery pushes this node makes as a holder
	// restoreRates is the rate each recovery push last went at.
	restoreRates map[pushKey]float64
	live         map[policy.JobID]bool    // jobs marked live in the store
	ended        map[policy.JobID]JobView // last view of workers that ended
	past         []TransferView           // finished transfers no longer listed, oldest first (at most pastTransfers)
	gpus         gpuSet
	running      bool
	// bundleSent is when a bundle last reached a node from here;
	// bundleBusy marks the pushes in flight (bundle.go).
	bundleSent map[bundleKey]time.Time
	bundleBusy map[bundleKey]bool
	// bundleFlows are the paced first-placement copies this node sends
	// (version 0 in the key); bundlesHere the decided bundle flows to
	// this node whose bundle arrived (bundle.go).
	bundleFlows map[pushKey]*push
	bundlesHere []string
	retired     map[policy.JobID]uint64 // ended jobs whose results are kept: the version retained (outputs.go)
}

// finish records why a worker ended without the job leaving this node, so
// the manager does not start it again while the record stays the same.
type finish struct {
	restarts int
	reason   string
}

type pushKey struct {
	job     policy.JobID
	version uint64
	to      policy.NodeID
}

// New checks cfg and returns a Manager; Run starts it.
func New(cfg Config) (*Manager, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &Manager{
		cfg: cfg, log: cfg.Logger.With("node", cfg.Node), gpus: gpuSet{devices: slices.Clone(cfg.GPUs)},
		workers: map[policy.JobID]*worker{}, finished: map[policy.JobID]finish{},
		pushes: map[pushKey]*push{}, restoreRates: map[pushKey]float64{}, live: map[policy.JobID]bool{}, ended: map[policy.JobID]JobView{},
		bundleSent: map[bundleKey]time.Time{}, bundleBusy: map[bundleKey]bool{}, bundleFlows: map[pushKey]*push{}, retired: map[policy.JobID]uint64{},
	}, nil
}

// Run acts on the replicated state until ctx ends, then stops every job it
// started and waits for its goroutines. It may be called once.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.running {
		m.mu.Unlock()
		return errors.New("jobs: manager already running")
	}
	m.running = true
	m.mu.Unlock()

	var wg sync.WaitGroup
	exits := make(chan *worker)
	defer func() {
		m.mu.Lock()
		for _, w := range m.workers {
			w.cancel()
		}
		for _, p := range m.pushes {
			if p.cancel != nil {
				p.cancel()
			}
		}
		for _, p := range m.bundleFlows {
			p.cancel()
		}
		m.mu.Unlock()
		go func() {
			for range exits {
			}
		}()
		wg.Wait()
		close(exits)
	}()
	if !m.waitCurrent(ctx) {
		return nil
	}
	purge := time.NewTicker(m.cfg.PurgeEvery)
	defer purge.Stop()
	for {
		ch := m.cfg.Coord.Changed()
		st := m.cfg.Coord.State()
		m.reconcile(ctx, st, &wg, exits)
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
		case <-purge.C:
			m.purge()
		case w := <-exits:
			m.mu.Lock()
			if m.workers[w.id] == w {
				delete(m.workers, w.id)
			}
			m.ended[w.id] = w.view(m.cfg.Now())
			m.archiveLocked(w.pushes...)
			if w.result.reason != "" {
				m.finished[w.id] = w.result
			}
			m.mu.Unlock()
		}
	}
}

// reconcile starts workers for jobs placed here, cancels those of jobs that
// left, hands the state to the others and starts the recovery pushes this
// node owes as a replica holder.
func (m *Manager) reconcile(ctx context.Context, st *state.State, wg *sync.WaitGroup, exits chan<- *worker) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, w := range m.workers {
		j, ok := st.Jobs[id]
		if !ok || j.Node != m.cfg.Node || (j.State != policy.JobRunning && j.State != policy.JobMigrating) {
			w.cancel()
			continue
		}
		w.update(st)
	}
	ids := make([]policy.JobID, 0, len(st.Jobs))
	for id := range st.Jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		j := st.Jobs[id]
		if j.State == policy.JobDone {
			m.retire(st, id, j)
		}
		if j.Node != m.cfg.Node || (j.State != policy.JobRunning && j.State != policy.JobMigrating) {
			delete(m.finished, id)
			if j.Node != m.cfg.Node || j.State != policy.JobDone {
				// A job that ended here (done, failed) keeps its last view:
				// how its run ended is this node's to show.
				delete(m.ended, id)
			}
			continue
		}
		if _, ok := m.workers[id]; ok {
			continue
		}
		if f, ok := m.finished[id]; ok {
			if f.restarts == j.Restarts && !(f.reason == reasonDegraded && !handoffPending(st, id, m.cfg.Node)) {
				continue
			}
			delete(m.finished, id) // a new placement, or a degraded hand-off that was withdrawn
		}
		wctx, cancel := context.WithCancel(ctx)
		w := newWorker(m, id, cancel, st)
		m.workers[id] = w
		wg.Go(func() {
			w.run(wctx)
			cancel()
			exits <- w // Run receives, or its drain once it is ending
		})
	}
	m.recoveryPushes(ctx, st, wg)
	m.holderCopies(ctx, st, wg)
	m.bundlePushes(ctx, st, wg)
}

func handoffPending(st *state.State, id policy.JobID, node policy.NodeID) bool {
	for _, h := range st.Decisions.Handoffs {
		if h.Job == id && h.From == node {
			return true
		}
	}
	_, ok := st.Reclaims[node]
	return ok
}

// recoveryPushes sends, for each job whose restore order names this node as
// the holder (state.JobRecord.Restore, set by the recovery placement), that
// version to the job's new node (see the package doc: the holder pushes).
// The order lasts until the new node has the copy, so a failed push is
// retried on the next state change; it is paced at the restore flow's
// decided rate, or at the rate of the previous attempt once the decision
// that placed the job has been replaced.
func (m *Manager) recoveryPushes(ctx context.Context, st *state.State, wg *sync.WaitGroup) {
	wanted := map[pushKey]bool{}
	var keys []pushKey
	for id, j := range st.Jobs {
		if j.Restore.From == m.cfg.Node && j.State != policy.JobDone && j.Node != "" && j.Node != m.cfg.Node {
			key := pushKey{id, j.Restore.Version, j.Node}
			wanted[key] = true
			keys = append(keys, key)
		}
	}
	for key, p := range m.pushes {
		switch {
		case p.done && !wanted[key]:
			m.archiveLocked(p)
			delete(m.pushes, key) // its order is history
			delete(m.restoreRates, key)
		case !p.done && !wanted[key] && p.class == policy.ClassMigration:
			p.cancel() // the job was placed again: this copy is no longer wanted
		}
	}
	slices.SortFunc(keys, func(a, b pushKey) int { return cmp.Compare(a.job, b.job) })
	for _, key := range keys {
		if p, ok := m.pushes[key]; ok {
			// Under way: follow the leader's rate for it (it counts the
			// restore on every link until the copy arrives).
			if rate, fl := flowRate(st, restoreFlow(key.job), m.cfg.Node, key.to); fl != nil && paced(st) && !p.done {
				m.restoreRates[key] = rate
				m.repaceLocked(p, rate)
			}
			continue
		}
		cp, ok := st.CheckpointVersion(key.job, key.version)
		if !ok || slices.Contains(cp.Holders, key.to) {
			continue
		}
		if !m.holds(key.job, cp) {
			m.log.Warn("restore order names this node as holder but the version is not here", "job", key.job, "version", key.version)
			continue
		}
		rate, fl := flowRate(st, restoreFlow(key.job), m.cfg.Node, key.to)
		if last, ok := m.restoreRates[key]; fl == nil && paced(st) && ok {
			rate = last
		}
		m.restoreRates[key] = rate
		m.holderPush(ctx, wg, st, cp, key, restoreFlow(key.job), policy.ClassMigration, rate, "recovery push failed")
	}
}

// holderCopies carries out the leader's holder-to-holder flows from this
// node: evacuations (policy.EvacuationPrefix: a replica holder under a
// scheduled reclaim sends a job's freshest committed version to the job's
// standby, because no node that stays holds it) and replica copies
// (policy.ReplicaPrefix: a holder sends that version to the next of the
// job's k holders, docs/design.md P2.7, so the host's uplink carries each version
// once). Each is paced at the flow's rate, unpaced with P3 off, and
// retried on the next state change until the destination holds it.
func (m *Manager) holderCopies(ctx context.Context, st *state.State, wg *sync.WaitGroup) {
	due := holderCopiesDue(st, m.cfg.Node)
	type jobTo struct {
		job policy.JobID
		to  policy.NodeID
	}
	wanted := map[pushKey]bool{}
	copyTo := map[jobTo]bool{} // decided replica copies, by job and target
	for _, e := range due {
		wanted[pushKey{e.cp.Job, e.cp.Version, e.to}] = true
		if strings.HasPrefix(e.flow, policy.ReplicaPrefix) {
			copyTo[jobTo{e.cp.Job, e.to}] = true
		}
	}
	older := map[jobTo]*push{} // replica copies of an older version still under way
	for key, p := range m.pushes {
		if p.done || wanted[key] || p.class != policy.ClassPresync {
			continue
		}
		if jt := (jobTo{key.job, key.to}); strings.HasPrefix(p.flow, policy.ReplicaPrefix) && copyTo[jt] {
			// A newer version was committed while the copy ran: the
			// copy finishes first (it holds most of the newer one's
			// chunks, which are not sent again), then the newer follows.
			older[jt] = p
			continue
		}
		// No longer decided (another standby or holder, or the job is
		// being recovered): a copy the leader does not account for any
		// more must not keep its share of the links.
		p.cancel()
	}
	for _, e := range due {
		key := pushKey{e.cp.Job, e.cp.Version, e.to}
		rate := e.rate
		if !paced(st) {
			rate = transfer.Unlimited
		}
		if p, ok := m.pushes[key]; ok {
			if !p.done {
				m.repaceLocked(p, rate) // the leader re-rates it every period
			}
			continue
		}
		if p := older[jobTo{key.job, key.to}]; p != nil {
			m.repaceLocked(p, rate)
			continue
		}
		if !m.holds(e.cp.Job, e.cp) {
			continue
		}
		if strings.HasPrefix(e.flow, policy.EvacuationPrefix) {
			m.log.Info("evacuating a replica before this node leaves", "job", e.cp.Job, "version", e.cp.Version, "to", e.to)
			m.holderPush(ctx, wg, st, e.cp, key, e.flow, policy.ClassPresync, rate, "replica evacuation failed")
			continue
		}
		m.log.Debug("copying a replica to another holder", "job", e.cp.Job, "version", e.cp.Version, "to", e.to)
		m.holderPush(ctx, wg, st, e.cp, key, e.flow, policy.ClassPresync, rate, "replica copy failed")
	}
}

// holderCopy is one committed version to send to another node.
type holderCopy struct {
	flow string // the decided flow's ID
	cp   state.Checkpoint
	to   policy.NodeID
	rate float64
}

// holderCopiesDue lists the decided evacuation and replica flows from
// self whose destination lacks the job's freshest committed version,
// sorted by job, evacuations first.
func holderCopiesDue(st *state.State, self policy.NodeID) []holderCopy {
	var out []holderCopy
	for _, f := range st.Decisions.Flows {
		if f.From != self || !strings.HasPrefix(f.ID, policy.EvacuationPrefix) && !strings.HasPrefix(f.ID, policy.ReplicaPrefix) {
			continue
		}
		if j, ok := st.Jobs[f.Job]; !ok || j.State == policy.JobDone {
			continue
		}
		cp, ok := st.FreshestCommitted(f.Job)
		if !ok || slices.Contains(cp.Holders, f.To) {
			continue
		}
		out = append(out, holderCopy{flow: f.ID, cp: cp, to: f.To, rate: f.Rate})
	}
	slices.SortFunc(out, func(a, b holderCopy) int { return cmp.Or(cmp.Compare(a.cp.Job, b.cp.Job), cmp.Compare(a.flow, b.flow)) })
	return out
}

// holderPush starts sending cp (a version this node holds) to key.to; a
// failed push is dropped so that the next state change retries it. Called
// with m.mu held.
func (m *Manager) holderPush(ctx context.Context, wg *sync.WaitGroup, st *state.State, cp state.Checkpoint, key pushKey,
	flow string, class policy.TrafficClass, rate float64, failure string) {
	addr := st.Nodes[key.to].TransferAddr
	pctx, cancel := context.WithCancel(ctx)
	ps := &push{key: key, flow: flow, class: class, rate: rate, started: m.cfg.Now(), cancel: cancel}
	m.pushes[key] = ps
	wg.Go(func() {
		defer cancel()
		err := m.send(pctx, ps, addr, cp)
		m.mu.Lock()
		ps.err = err
		ps.done = true
		if err != nil {
			m.archiveLocked(ps)
			delete(m.pushes, key) // the next state change retries
		}
		m.mu.Unlock()
		if err != nil && pctx.Err() == nil {
			m.log.Warn(failure, "job", key.job, "version", key.version, "to", key.to, "err", err)
		}
	})
}

// repaceLocked gives a push in flight a new assigned rate when it changed
// (once its transfer started: the start reads the rate it was created
// with). Called with m.mu held.
func (m *Manager) repaceLocked(p *push, rate float64) {
	if p.tr != nil && p.rate != rate {
		p.rate = rate
		p.tr.SetRate(rate)
	}
}

// holds reports whether the local store has cp's version with cp's manifest.
func (m *Manager) holds(job policy.JobID, cp state.Checkpoint) bool {
	mf, err := m.cfg.Store.Manifest(string(job), cp.Version)
	return err == nil && mf.Hash().String() == cp.ManifestHash
}

// send pushes one committed version and, once the receiver answered DONE,
// records the receiver as a holder (the receiver records it too; the command
// is idempotent).
func (m *Manager) send(ctx context.Context, ps *push, addr string, cp state.Checkpoint) error {
	if addr == "" {
		return fmt.Errorf("send %s v%d to %s: no transfer address in the registry", ps.key.job, ps.key.version, ps.key.to)
	}
	tr, err := m.cfg.Client.Start(ctx, transfer.Request{Addr: addr, Node: string(ps.key.to), JobID: string(ps.key.job),
		Version: ps.key.version, Class: ps.class, Rate: ps.rate})
	if err != nil {
		return fmt.Errorf("send %s v%d to %s: %w", ps.key.job, ps.key.version, ps.key.to, err)
	}
	m.mu.Lock()
	ps.tr = tr
	m.mu.Unlock()
	if err := tr.Wait(); err != nil {
		return fmt.Errorf("send %s v%d to %s: %w", ps.key.job, ps.key.version, ps.key.to, err)
	}
	if f := m.cfg.Observe.Transfer; f != nil {
		f(ps.class, m.cfg.Now().Sub(ps.started))
	}
	return m.submit(ctx, state.ReplicaComplete{Job: ps.key.job, Version: cp.Version, ManifestHash: cp.ManifestHash,
		Size: cp.Size, Source: cp.Source, Holder: ps.key.to, At: m.cfg.Now()})
}

func (m *Manager) submit(ctx context.Context, cmd state.Command) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.SubmitTimeout)
	defer cancel()
	if _, err := m.cfg.Coord.Submit(ctx, cmd); err != nil {
		return fmt.Errorf("submit %s: %w", cmd.Kind(), err)
	}
	return nil
}

// The IDs of the flows this node's transfers carry (policy.FlowDecision.ID).
func checkpointFlow(job policy.JobID) string { return policy.CheckpointPrefix + string(job) }
func handoffFlow(job policy.JobID) string    { return policy.HandoffPrefix + string(job) }
func restoreFlow(job policy.JobID) string    { return policy.RestorePrefix + string(job) }

// flowRate returns the pacing rate of a transfer from → to that carries
// flow id, and the decided flow: the flow's rate (0, no room this period,
// holds the transfer at transfer.PausedRate); transfer.Unlimited with P3
// off (no flow is paced) or when the decisions hold no such flow (a flow
// the leader moved to another destination is not this transfer's).
func flowRate(st *state.State, id string, from, to policy.NodeID) (float64, *policy.FlowDecision) {
	f, ok := st.Flow(id)
	if !ok || f.From != from || f.To != to {
		return transfer.Unlimited, nil
	}
	if !paced(st) {
		return transfer.Unlimited, &f
	}
	return f.Rate, &f
}

// paced reports whether transfers are paced at their assigned rates: P3
// is on in the protocol settings in force. With P3 off there is no
// admission and no enforcement, so every transfer runs unpaced.
func paced(st *state.State) bool { return st.Protocols().Switches.P3 }

// TransferHooks are the hooks the node's transfer server must be created
// with: offers for jobs the catalogue does not know are refused, and every
// version committed here is recorded as a replica (ReplicaComplete).
func (m *Manager) TransferHooks() transfer.Hooks {
	return transfer.Hooks{
		Authorize: func(peer string, class policy.TrafficClass, mf *ckpt.Manifest) error {
			return m.authorizeFresh(func(st *state.State) error {
				if b, ok := ckpt.IsBundleKey(mf.JobID); ok {
					return authorizeBundle(st, b)
				}
				j, ok := st.Jobs[policy.JobID(mf.JobID)]
				if !ok {
					return fmt.Errorf("job %q: %w", mf.JobID, state.ErrUnknownJob)
				}
				if j.State == policy.JobDone {
					return fmt.Errorf("job %q is done", mf.JobID)
				}
				return nil
			})
		},
		// Results go to any node of the cluster: only root on a node can
		// ask its agent for them (the control socket is 0600).
		AuthorizeFetch: func(peer, job string, checkpoint bool) error {
			st := m.cfg.Coord.State()
			if _, ok := st.Nodes[policy.NodeID(peer)]; !ok {
				return fmt.Errorf("node %q is not in the registry", peer)
			}
			if _, ok := st.Jobs[policy.JobID(job)]; !ok {
				return fmt.Errorf("job %q: %w", job, state.ErrUnknownJob)
			}
			return nil
		},
		OnCommit: func(peer string, class policy.TrafficClass, mf *ckpt.Manifest) {
			if b, ok := ckpt.IsBundleKey(mf.JobID); ok {
				m.pinBundle(m.cfg.Coord.State(), b)
				return
			}
			m.recordReplica(policy.NodeID(peer), mf)
		},
	}
}

// stateLagGrace is how long an offer this node's copy of the state does
// not allow waits for that copy to catch up before it is refused: the
// sender acts on a decision (a first placement's bundle copy, a checkpoint
// of a job just submitted) its own copy has applied, and a follower's copy
// can be a few log entries behind it.
const stateLagGrace = 3 * time.Second

// authorizeFresh returns check's verdict on this node's newest state,
// checking again for up to stateLagGrace while it refuses.
func (m *Manager) authorizeFresh(check func(*state.State) error) error {
	until := time.Now().Add(stateLagGrace)
	for {
		err := check(m.cfg.Coord.State())
		if err == nil || !time.Now().Before(until) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// recordReplica submits ReplicaComplete for a version committed here. The
// source is the catalogue's (a recovery push comes from a holder that is not
// the source); a version the catalogue does not list yet came from its
// source.
func (m *Manager) recordReplica(peer policy.NodeID, mf *ckpt.Manifest) {
	job := policy.JobID(mf.JobID)
	source := peer
	for _, cp := range m.cfg.Coord.State().Checkpoints[job] {
		if cp.Version == mf.Version {
			source = cp.Source
		}
	}
	m.mu.Lock()
	if !m.live[job] {
		if err := m.cfg.Store.SetLive(mf.JobID, true); err != nil {
			m.log.Warn("pin replica", "job", job, "err", err)
		} else {
			m.live[job] = true
		}
	}
	m.mu.Unlock()
	err := m.submit(context.Background(), state.ReplicaComplete{Job: job, Version: mf.Version,
		ManifestHash: mf.Hash().String(), Size: mf.TotalSize(), Source: source, Holder: m.cfg.Node, At: m.cfg.Now()})
	if err != nil {
		// The sender records the same replica after DONE.
		m.log.Warn("record replica", "job", job, "version", mf.Version, "err", err)
	}
}

// markLive pins a job's newest version in the store.
func (m *Manager) markLive(job policy.JobID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live[job] {
		return
	}
	if err := m.cfg.Store.SetLive(string(job), true); err != nil {
		m.log.Warn("pin job", "job", job, "err", err)
		return
	}
	m.live[job] = true
}

// pastTransfers bounds the finished transfers a manager remembers.
const pastTransfers = 256

// archiveLocked keeps the final view of transfers that stop being listed
// (their worker ended, a newer push replaced them, their placement is
// history), so that what a node sent can still be added up afterwards
// (the owner's report of a reclaim). Called with m.mu held.
func (m *Manager) archiveLocked(ps ...*push) {
	now := m.cfg.Now()
	for _, p := range ps {
		m.past = append(m.past, p.view(now))
	}
	if over := len(m.past) - pastTransfers; over > 0 {
		m.past = slices.Delete(m.past, 0, over)
	}
}
