package agent

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reclaimnet/reclaimnet/agent/enforce"
	"github.com/reclaimnet/reclaimnet/agent/jobs"
	"github.com/reclaimnet/reclaimnet/agent/reclaim"
	"github.com/reclaimnet/reclaimnet/agent/view"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/web"
)

// Version is reported in the status; the CLI sets it from its own.
var Version = "dev"

// Subsystem is an optional part of the node (job supervisor, transfers,
// BPF enforcement) that the agent starts after the control
// plane and stops before it, in reverse order of Subsystems.
type Subsystem interface {
	Name() string
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Agent is one running node.
type Agent struct {
	// Subsystems are started in order by Run and stopped in reverse order
	// during shutdown. Append to them between New and Run: New puts the
	// kernel-enforcement subsystem first (it protects the ports of what
	// starts after it and outlives it at shutdown).
	Subsystems []Subsystem
	// HTTPMux serves the HTTP address; subsystems may add handlers to it
	// between New and Run. The status page (web.Handler: /, /ui/, /v1/,
	// /metrics) is mounted at "/", so more specific patterns win.
	HTTPMux *http.ServeMux

	// Constant after New.
	cfg        Config
	logger     *slog.Logger
	started    time.Time
	lock       *dirLock
	tmpDir     string // removed at shutdown (--dev)
	tls        *pki.Bundle
	gossipKeys [][]byte
	mesh       *mesh.Mesh
	enforce    *enforce.Subsystem // kernel enforcement; first of Subsystems
	jobs       *jobSystem         // checkpoint store, transfers, job manager
	// raftConfig, when set (tests), adjusts the coordinator's config
	// before it opens (policy parameters for short intervals).
	raftConfig func(*raft.Config)
	// jobsConfig, when set (tests), adjusts the job manager's config
	// before it is built (a short purge period).
	jobsConfig func(*jobs.Config)
	// protocols are this node's own protocol settings (used when it
	// leads); set when the coordinator opens.
	protocols state.Protocols
	// view is the node's status view (set by Run).
	view *view.View
	// telemetry is the leader's view of gossip (raft.Telemetry), also
	// what the status page and trace export read the links from.
	telemetry view.Gossip
	coord     *raft.Coordinator // nil until Run opens it
	registry  *prometheus.Registry
	hist      histograms   // on registry
	web       *web.Handler // status page, /v1 and /metrics
	ctlLn     net.Listener
	raftLn    net.Listener // handed to the coordinator by Run
	httpLn    net.Listener
	httpSrv   *http.Server
	info      localapi.Info
	gpus      int // GPUs found at start
	// gpuIndices are their device indices (NVML's, or 0..N-1 declared).
	gpuIndices []int
	// sampleLoad reads the host's load for telemetry (hostLoad; tests on
	// a loaded machine pin it, since P2 rejects nodes above θ).
	sampleLoad func() float64

	wg sync.WaitGroup // every goroutine the agent starts

	// abandon makes shutdown skip the graceful steps (leadership
	// transfer, gossip leave): an emergency reclaim, where the provider's
	// right to the machine comes before the cluster.
	abandon atomic.Bool

	// reclaim is the owner's reclaim of this node (set by Run).
	reclaim *reclaim.Flow
	// lending is the owner policy (set by New).
	lending *lending
	// meta is the node's gossip metadata; metaMu orders its updates (the
	// owner outlook).
	metaMu sync.Mutex
	meta   mesh.Meta

	// identity is the node's certificate as it renews (a.tls is the one
	// it started with); every listener and dialer presents its current one.
	identity *pki.Identity
	// voterKeys are the CA and secrets keys, held by voters only (nil
	// elsewhere); set at start or when this voter fetches them, dropped
	// when it is demoted (identityLoop).
	voterKeys atomic.Pointer[pki.VoterKeys]
	// enrollCoord is coord for the enrollment handler, which runs on the
	// coordinator's own listener and so may be called before coord is set.
	enrollCoord atomic.Pointer[raft.Coordinator]

	mu     sync.Mutex
	joined bool // a join (or a join by a peer) succeeded
}

// New prepares a node: validates cfg, locks the data dir, loads the TLS
// material, starts gossip and opens the control socket and HTTP listener.
// Nothing is served until Run. On error everything opened is closed.
func New(cfg Config, logger *slog.Logger) (_ *Agent, err error) {
	if logger == nil {
		logger = slog.Default()
	}
	a := &Agent{cfg: cfg, logger: logger, started: time.Now(), HTTPMux: http.NewServeMux(), sampleLoad: hostLoad}
	if cfg.FixedLoad != nil {
		load := *cfg.FixedLoad
		a.sampleLoad = func() float64 { return load }
	}
	defer func() {
		if err != nil {
			a.closeAll()
		}
	}()
	if a.cfg.GossipKeyFile != "" && a.cfg.GossipKey != "" {
		return nil, errors.New("config: give the gossip key or the gossip key file, not both")
	}
	if err := a.cfg.identityDefaults(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := a.cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if a.cfg.Enforce == enforce.ModeOn {
		// Before anything is created: a node told to enforce that cannot
		// must not half start.
		if err := enforce.Check(); err != nil {
			return nil, fmt.Errorf("--enforce on: %w (run as root, or use --enforce auto or off)", err)
		}
	}
	if a.cfg.Dev {
		if err := a.prepareDev(); err != nil {
			return nil, err
		}
	}
	if a.lock, err = lockDataDir(a.cfg.DataDir); err != nil {
		return nil, err
	}
	if err := a.prepareIdentity(); err != nil {
		return nil, err
	}
	if a.cfg.GossipKeyFile != "" {
		key, err := ReadGossipKeyFile(a.cfg.GossipKeyFile)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		a.cfg.GossipKey = key
	}
	if a.tls == nil {
		if a.tls, err = pki.LoadNode(a.cfg.TLSDir); err != nil {
			return nil, fmt.Errorf("load TLS material from %s: %w", a.cfg.TLSDir, err)
		}
	}
	if a.tls.Node != a.cfg.Name {
		return nil, fmt.Errorf("certificate in %s is for node %q, not %q (issue one with 'reclaimnet tls cert create --node %s')", a.cfg.TLSDir, a.tls.Node, a.cfg.Name, a.cfg.Name)
	}
	// Every TLS configuration made from the bundle (Raft, forwarding,
	// transfers) consults the deny list, which follows the replicated one.
	a.tls.Deny = pki.NewDenyList()
	a.identity = pki.NewIdentity(a.tls)
	if err := a.loadVoterKeys(); err != nil {
		return nil, err
	}
	if a.gossipKeys == nil {
		k, _ := DecodeGossipKey(a.cfg.GossipKey)
		a.gossipKeys = [][]byte{k}
	}
	if a.ctlLn, err = listenControl(a.cfg.DataDir); err != nil {
		return nil, err
	}
	if a.cfg.HTTPAddr != "" {
		if a.httpLn, err = net.Listen("tcp", a.cfg.HTTPAddr); err != nil {
			return nil, fmt.Errorf("http listener: %w", err)
		}
	}
	if a.raftLn, err = a.listenRaft(); err != nil {
		return nil, err
	}
	a.cfg.RaftPort = a.raftLn.Addr().(*net.TCPAddr).Port
	// The transfer port is bound before gossip announces it.
	if a.jobs, err = a.newJobSystem(); err != nil {
		return nil, err
	}
	if err := a.startMesh(); err != nil {
		return nil, err
	}
	if a.lending, err = openLending(a.cfg, a.gpuIndices, logger.With("subsystem", "owner")); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	a.telemetry = view.Gossip{Mesh: a.mesh, Outgoing: a.flowProgress, Uplink: a.cfg.UplinkCapacity.Of}
	a.registry = a.newRegistry()
	if a.web, err = a.newWebHandler(); err != nil {
		return nil, err
	}
	a.HTTPMux.Handle("/", a.web)
	a.HTTPMux.HandleFunc("GET /v1/trace", func(w http.ResponseWriter, r *http.Request) { a.view.ServeTrace(w, r) })
	if err := a.registerEnforcement(); err != nil {
		return nil, err
	}
	a.Subsystems = append(a.Subsystems, a.jobs)
	return a, nil
}

// prepareDev fills in what --dev makes up: a temporary data dir, a gossip
// key, a throwaway CA and certificate, loopback, fast gossip.
func (a *Agent) prepareDev() error {
	c := &a.cfg
	if c.DataDir == "" {
		dir, err := os.MkdirTemp("", "reclaimnet-dev-")
		if err != nil {
			return fmt.Errorf("dev data dir: %w", err)
		}
		c.DataDir, a.tmpDir = dir, dir
	}
	if c.GossipKey == "" {
		k := make([]byte, 32)
		rand.Read(k)
		a.gossipKeys = [][]byte{k}
	}
	if c.TLSDir == "" {
		dev, err := pki.NewDev()
		if err != nil {
			return fmt.Errorf("dev CA: %w", err)
		}
		if a.tls, err = dev.Node(c.Name); err != nil {
			return fmt.Errorf("dev certificate: %w", err)
		}
	}
	c.LocalTimings = true
	return nil
}

// Run serves until ctx is cancelled, then shuts down in the documented
// order and returns. ready, if not nil, is called once the node serves.
// Running the node lends it: the hold of an owner's earlier reclaim ends
// (Serve runs it only once the owner policy lends it).
func (a *Agent) Run(ctx context.Context, ready func(localapi.Info)) error {
	defer a.closeAll()
	a.lending.startedByOwner()
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The coordinator first, then the job manager on it: the loops and
	// handlers below read both.
	ln := a.raftLn
	a.raftLn = nil // the coordinator owns it from here
	if err := a.startCoordinator(ln); err != nil {
		ln.Close()
		return err
	}
	if err := a.jobs.open(a.coord); err != nil {
		_ = a.coord.Shutdown()
		return err
	}
	a.reclaim = reclaim.New(reclaim.Config{Node: a.cfg.Name, DataDir: a.cfg.DataDir, Coord: a.coord, Jobs: a.Jobs(),
		Switch: timedSwitch{a.enforce, a.hist.isolate}, Abandon: a.Abandon, RetryPeriod: max(time.Duration(a.cfg.TelemetryInterval), 100*time.Millisecond),
		Afterwards: a.lendingAfter,
		Logger:     a.logger.With("subsystem", "reclaim")})
	a.view = a.newView()
	reclaimCtx, stopReclaim := context.WithCancel(context.Background())
	reclaimDone := make(chan struct{})
	go func() {
		defer close(reclaimDone)
		a.reclaim.Run(reclaimCtx)
	}()
	if a.httpLn != nil {
		a.httpSrv = &http.Server{Handler: a.HTTPMux, ReadHeaderTimeout: 10 * time.Second}
		a.wg.Go(func() {
			if err := a.httpSrv.Serve(a.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.logger.Error("http server", "err", err)
			}
		})
	}
	ctlLn := a.ctlLn
	a.wg.Go(func() { a.serveControl(ctlLn) })
	a.wg.Go(func() { a.telemetryLoop(runCtx) })
	a.wg.Go(func() { a.eventLoop(runCtx) })
	a.wg.Go(func() { a.watchProtocols(runCtx) })
	a.wg.Go(func() { a.view.Run(runCtx) })
	a.wg.Go(func() { a.identityLoop(runCtx) })
	if a.cfg.TLSDir != "" { // --dev's throwaway certificate is not renewed
		a.wg.Go(func() { a.renewLoop(runCtx) })
	}
	if len(a.cfg.Join) > 0 {
		a.wg.Go(func() { a.retryJoin(runCtx) })
	}
	var startErr error
	var startedSubs []Subsystem
	for _, s := range a.Subsystems {
		if err := s.Start(runCtx); err != nil {
			startErr = fmt.Errorf("start %s: %w", s.Name(), err)
			break
		}
		startedSubs = append(startedSubs, s)
	}
	if startErr == nil {
		if a.lending.lent() {
			// A node that starts lent takes guests: a kill-switch its
			// last reclaim left on goes off.
			a.killSwitchOff()
		}
		a.wg.Go(func() { a.ownerLoop(runCtx) })
		a.reconcile()
		a.info = a.makeInfo()
		if err := a.writeInfo(); err != nil {
			a.logger.Warn("write agent info", "err", err)
		}
		a.logger.Info("agent running", "node", a.cfg.Name, "gossip", a.info.GossipAddr, "http", a.info.HTTPAddr, "data_dir", a.cfg.DataDir,
			"sandbox", a.Sandbox().String())
		if ready != nil {
			ready(a.info)
		}
		select {
		case <-ctx.Done():
		case <-a.reclaim.Leaving(): // a reclaim's deadline or emergency
			// Peers remember a departed member's metadata: it says from
			// when the node may be lent again.
			a.publishOutlook(time.Now())
		}
		a.logger.Info("shutting down", "node", a.cfg.Name)
	}
	// The reclaim flow answers until the control socket closes, but its
	// deadline no longer fires.
	a.reclaim.Close()
	a.shutdown(startedSubs, cancel)
	stopReclaim()
	<-reclaimDone
	return startErr
}

// Reclaimed reports whether Run returned because a reclaim made the node
// leave (its deadline, or an emergency) rather than because its context
// ended.
func (a *Agent) Reclaimed() bool {
	if a.reclaim == nil {
		return false
	}
	select {
	case <-a.reclaim.Leaving():
		return true
	default:
		return false
	}
}

// Abandon makes the coming shutdown skip leadership transfer and the
// gossip leave, so peers see a failure (an emergency departure). Call it
// before cancelling Run's context.
func (a *Agent) Abandon() { a.abandon.Store(true) }

// shutdown runs the documented order (see the package comment).
func (a *Agent) shutdown(subs []Subsystem, cancelLoops context.CancelFunc) {
	timeout := time.Duration(a.cfg.LeaveTimeout)
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
	defer cancel()
	graceful := !a.abandon.Load()
	// 1. Leadership transfer, so the cluster does not wait for an election.
	if a.coord != nil && graceful {
		if err := leaveLeadership(a.coord); err != nil {
			a.logger.Warn("leadership transfer", "err", err)
		}
	}
	// Stop the loops first: a telemetry report published after the
	// leave intent would hide it.
	cancelLoops()
	// 2. Gossip leave: peers see a departure, not a failure.
	if graceful {
		if err := a.mesh.Leave(timeout); err != nil {
			a.logger.Warn("gossip leave", "err", err)
		}
	}
	// 3. Raft, 4. gossip.
	if a.coord != nil {
		if err := a.coord.Shutdown(); err != nil {
			a.logger.Warn("coordinator shutdown", "err", err)
		}
	}
	a.mesh.Shutdown()
	// 5. Optional subsystems, newest first.
	for i := len(subs) - 1; i >= 0; i-- {
		if err := subs[i].Stop(ctx); err != nil {
			a.logger.Warn("stop subsystem", "name", subs[i].Name(), "err", err)
		}
	}
	// 6. Control socket, then HTTP.
	a.ctlLn.Close()
	if a.httpSrv != nil {
		a.httpSrv.Shutdown(ctx)
	}
	a.wg.Wait()
	a.logger.Info("agent stopped", "node", a.cfg.Name)
}

// closeAll releases what New opened; safe after a partial New and after
// shutdown.
func (a *Agent) closeAll() {
	if a.lending != nil {
		a.lending.close()
		a.lending = nil
	}
	if a.mesh != nil {
		a.mesh.Shutdown()
	}
	if a.ctlLn != nil {
		a.ctlLn.Close()
	}
	if a.raftLn != nil {
		a.raftLn.Close()
	}
	if a.jobs != nil {
		a.jobs.close()
	}
	if a.httpLn != nil {
		a.httpLn.Close()
	}
	if a.cfg.DataDir != "" && a.lock != nil {
		os.Remove(filepath.Join(a.cfg.DataDir, localapi.InfoFile))
	}
	a.lock.release()
	a.lock = nil
	if a.tmpDir != "" {
		os.RemoveAll(a.tmpDir)
		a.tmpDir = ""
	}
}
