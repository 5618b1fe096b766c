package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/reclaimnet/reclaimnet/campus"
	"github.com/reclaimnet/reclaimnet/examples/pytorch"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/web"
)

// Job kinds.
const (
	JobAuto      = "auto"      // PyTorch when /usr/bin/python3 can import torch, else synthetic
	JobPyTorch   = "pytorch"   // examples/pytorch/train.py (embedded in the binary)
	JobSynthetic = "synthetic" // the built-in job (reclaimnet demo-job)
)

// JobName is the ID of the demo's training job.
const JobName = "train"

// DefaultHTTP is where the demo serves the status page.
const DefaultHTTP = "127.0.0.1:7949"

// Config is one demo run.
type Config struct {
	// Binary is the reclaimnet binary the agents and the synthetic job run
	// (the demo's own: os.Executable()).
	Binary string
	// Dir is the work directory; empty: a new temporary one. It is removed
	// on exit unless Keep.
	Dir  string
	Keep bool
	// Loopback runs every node as a process on 127.0.0.1 with kernel
	// enforcement off; otherwise (root) each node gets its own network
	// namespace in a shaped campus with enforcement on.
	Loopback bool
	// Nodes and Buildings shape the campus (nodes spread over the
	// buildings in turn). At least 4 nodes: after both reclaims the
	// cluster must still hold a Raft quorum.
	Nodes, Buildings int
	// HTTP is where the status page is served ("127.0.0.1:0": any port).
	HTTP string
	// Duration is how long the campus stays up after the scenario; 0 means
	// until ctx ends (Ctrl-C).
	Duration time.Duration
	// Job is JobAuto, JobPyTorch or JobSynthetic; Python runs the PyTorch
	// job (default /usr/bin/python3, where Debian's python3-torch lives).
	Job    string
	Python string
	// Notice is the scheduled reclaim's notice.
	Notice time.Duration
	// Out receives the human timeline; Log progress details (nil: none).
	Out io.Writer
	Log *slog.Logger
}

// Result is what happened: the timeline and where the job ran.
type Result struct {
	Mode        string   `json:"mode"` // "namespaces" or "loopback"
	Enforcement bool     `json:"enforcement"`
	Nodes       []string `json:"nodes"`
	JobKind     string   `json:"job_kind"`
	Job         string   `json:"job"`
	StatusURL   string   `json:"status_url"`
	Dir         string   `json:"dir"`
	// Sandbox is how the nodes run the job, as their status says
	// ("sandbox on: ...").
	Sandbox string `json:"sandbox"`
	// Segments are the job's stretches on each node, in order.
	Segments []Segment `json:"segments"`
	// Scheduled and Emergency are the two reclaims.
	Scheduled *Reclaim `json:"scheduled,omitempty"`
	Emergency *Reclaim `json:"emergency,omitempty"`
	Events    []Event  `json:"events"`
}

// Reclaim is one of the demo's reclaims.
type Reclaim struct {
	Node    string `json:"node"`
	Command string `json:"command"`
	// Report is the owner's report the command (or --status) printed.
	Report *localapi.ReclaimReport `json:"report,omitempty"`
	// To is where the job ran next.
	To string `json:"to,omitempty"`
}

// Validate checks a configuration's values (the CLI turns errors into
// exit code 2).
func (c Config) Validate() error {
	switch c.Job {
	case JobAuto, JobPyTorch, JobSynthetic:
	default:
		return fmt.Errorf("--job %q: want auto, pytorch or synthetic", c.Job)
	}
	if c.Nodes < 4 || c.Nodes > 12 {
		return fmt.Errorf("--nodes %d: want 4 to 12 (after both reclaims the cluster must keep a Raft quorum)", c.Nodes)
	}
	if c.Buildings < 1 || c.Buildings > min(c.Nodes, 8) {
		return fmt.Errorf("--buildings %d: want 1 to %d", c.Buildings, min(c.Nodes, 8))
	}
	if c.Notice < 5*time.Second || c.Notice > 10*time.Minute {
		return fmt.Errorf("--notice %v: want 5s to 10m", c.Notice)
	}
	if c.Duration < 0 {
		return fmt.Errorf("--duration %v: must not be negative", c.Duration)
	}
	return nil
}

// Topology spreads Nodes over Buildings named a, b, c, ... with the
// campus's default link rates.
func (c Config) Topology() campus.Topology {
	t := campus.DefaultTopology()
	t.Buildings = nil
	for i := range c.Buildings {
		n := c.Nodes / c.Buildings
		if i < c.Nodes%c.Buildings {
			n++
		}
		t.Buildings = append(t.Buildings, campus.Building{Name: string(rune('a' + i)), Nodes: n})
	}
	return t
}

// run is one demo in progress.
type run struct {
	cfg    Config
	log    *slog.Logger
	agents *campus.Agents
	tl     *timeline
	res    *Result
	jobDir string // where the job's files are: guest jobs may read it
	// bundleDir is the job's bundle (run --workdir): the PyTorch
	// example's files, or an empty directory for the synthetic job (the
	// binary it runs is on every node).
	bundleDir string

	mu       sync.Mutex
	status   *web.Status // the latest status document
	observer string      // the node the status is read from
	avoid    map[string]bool
	logs     map[string]*jobLog
	segs     []*Segment
}

// Run runs the demo: it starts the campus, runs the job, reclaims its
// node with notice and then the next one without, prints the timeline and
// keeps the status page up for Duration (0: until ctx ends). Everything it
// started (namespaces, processes, the work directory unless Keep) is gone
// when it returns, also on error or when ctx ends early. The result holds
// what happened so far, also on error.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Binary == "" {
		return nil, errors.New("demo: no reclaimnet binary")
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Python == "" {
		cfg.Python = "/usr/bin/python3"
	}
	if cfg.HTTP == "" {
		cfg.HTTP = DefaultHTTP
	}
	if !cfg.Loopback && os.Geteuid() != 0 {
		cfg.Loopback = true
	}
	r := &run{
		cfg:   cfg,
		log:   cfg.Log,
		tl:    &timeline{start: time.Now(), out: cfg.Out},
		res:   &Result{Mode: "namespaces", Enforcement: !cfg.Loopback, Job: JobName},
		avoid: map[string]bool{},
		logs:  map[string]*jobLog{},
	}
	if cfg.Loopback {
		r.res.Mode = "loopback"
	}
	var cleanup []error  // errors of the clean-up, reported even after Ctrl-C
	var cleaned []string // what the clean-up did, confirmed in one line at the end
	defer func() {
		if err != nil && ctx.Err() != nil {
			// Ctrl-C before the end: what failed is only the wait it cut short.
			err = errors.Join(append([]error{errors.New("interrupted before the scenario finished; everything the demo started was stopped and removed")},
				cleanup...)...)
		}
		r.res.Events = r.tl.snapshot()
		r.mu.Lock()
		for _, s := range r.segs {
			r.res.Segments = append(r.res.Segments, *s)
		}
		r.mu.Unlock()
		res = r.res
	}()

	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "reclaimnet-demo-"); err != nil {
			return nil, fmt.Errorf("work dir: %w", err)
		}
	} else {
		// The demo removes its work dir: never one that holds something else.
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			return nil, fmt.Errorf("work dir %s is not empty: give a new or empty directory", dir)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("work dir: %w", err)
		}
	}
	r.res.Dir = dir
	defer func() {
		if cfg.Keep {
			fmt.Fprintf(cfg.Out, "work dir kept: %s (agent logs %s/NODE.log, job output %s/NODE/data/jobs/%s/run/job.log)\n", dir, dir, dir, JobName)
		} else if rerr := os.RemoveAll(dir); rerr != nil {
			rerr = fmt.Errorf("remove work dir: %w", rerr)
			cleanup = append(cleanup, rerr)
			err = errors.Join(err, rerr)
		} else {
			cleaned = append(cleaned, "removed "+dir)
		}
		if len(cleaned) > 0 {
			fmt.Fprintf(cfg.Out, "clean-up done: %s\n", strings.Join(cleaned, ", "))
		}
	}()

	// Stopping: the scenario's context ends on Ctrl-C; cleanup runs on a
	// fresh one so it is never cut short.
	var wg sync.WaitGroup
	bg, stopBG := context.WithCancel(context.Background())
	defer func() {
		stopBG()
		wg.Wait()
		if r.agents != nil {
			fmt.Fprintln(cfg.Out, "stopping the campus...")
			namespaces := len(r.agents.NetNSNames())
			if cerr := r.agents.Close(); cerr != nil {
				cerr = fmt.Errorf("stop the campus: %w", cerr)
				cleanup = append(cleanup, cerr)
				err = errors.Join(err, cerr)
			} else {
				cleaned = append(cleaned, fmt.Sprintf("stopped %d agents", len(r.agents.Names())))
				if namespaces > 0 {
					cleaned = append(cleaned, fmt.Sprintf("removed %d network namespaces and the pinned BPF objects", namespaces))
				}
			}
		}
		if n := killLeftovers(dir); n > 0 {
			fmt.Fprintf(cfg.Out, "killed %d job process(es) left behind\n", n)
		}
	}()

	if err := r.prepareJob(ctx, dir); err != nil {
		return r.res, err
	}
	r.intro()
	// The status address first: a taken port fails before the campus is built.
	url, err := serveProxy(bg, cfg.HTTP, newStatusProxy(r.proxyTarget, r.dial, cfg.Log), &wg)
	if err != nil {
		return r.res, err
	}
	r.res.StatusURL = "http://" + url + "/"
	r.tl.addf(KindDemo, "", "", "starting %d agents (%s)...", cfg.Nodes, r.res.Mode)
	agents, err := campus.StartAgents(ctx, campus.AgentsConfig{
		Binary:   cfg.Binary,
		Dir:      dir,
		Loopback: cfg.Loopback,
		Topology: cfg.Topology(),
		Log:      cfg.Log,
		// The ~20 s until the cluster forms, step by step.
		Progress: func(step string) { r.tl.addf(KindDemo, "", "", "%s", step) },
		GPUs:     []string{"DemoGPU:24GiB:8.6"},
		// The job runs in each agent's sandbox, which shows it the host's
		// system directories and, as an owner shows a dataset, its files.
		ExtraArgs: []string{"--guest-ro-path", r.jobDir},
	})
	if err != nil {
		if !cfg.Loopback {
			err = fmt.Errorf("%w (network namespaces and BPF need root, iproute2 and a mounted bpffs; 'reclaimnet demo --loopback' runs without them)", err)
		}
		return r.res, err
	}
	r.mu.Lock()
	r.agents = agents
	r.mu.Unlock()
	r.res.Nodes = agents.Names()
	fmt.Fprintf(cfg.Out, "\nStatus page: %s  (a live node's page: the leader, or another live node after reclaims; read-only)\n\n", r.res.StatusURL)
	r.observe(bg, &wg)
	if err := r.scenario(ctx); err != nil {
		return r.res, err
	}
	r.summary()
	if cfg.Duration > 0 {
		fmt.Fprintf(cfg.Out, "\nThe campus stays up for %s: look at %s (Ctrl-C stops earlier).\n", cfg.Duration, r.res.StatusURL)
		select {
		case <-ctx.Done():
		case <-time.After(cfg.Duration):
		}
	} else {
		fmt.Fprintf(cfg.Out, "\nThe campus stays up: look at %s; Ctrl-C stops it and cleans up.\n", r.res.StatusURL)
		<-ctx.Done()
	}
	return r.res, nil
}

// intro says plainly what kind of campus this is.
func (r *run) intro() {
	t := r.cfg.Topology()
	var bs []string
	for _, b := range t.Buildings {
		var ns []string
		for j := 1; j <= b.Nodes; j++ {
			ns = append(ns, b.Name+strconv.Itoa(j))
		}
		bs = append(bs, b.Name+": "+strings.Join(ns, " "))
	}
	w := r.cfg.Out
	fmt.Fprintf(w, "ReclaimNet demo: a campus of %d nodes in %d buildings (%s).\n", r.cfg.Nodes, r.cfg.Buildings, strings.Join(bs, "; "))
	if r.cfg.Loopback {
		why := "--loopback"
		if os.Geteuid() != 0 {
			why = "not root"
		}
		fmt.Fprintf(w, "Mode: loopback (%s): every node is a process on 127.0.0.1; links are NOT shaped and kernel\n"+
			"enforcement (rate ceilings, kill-switch) is OFF. Run as root for namespaces, shaped links and enforcement.\n", why)
	} else {
		fmt.Fprintf(w, "Mode: network namespaces: each node in its own namespace, links shaped (%s access, %s building uplinks),\n"+
			"kernel enforcement ON (BPF rate ceilings and the kill-switch on every node).\n", t.AccessRate, t.UplinkRate)
	}
	fmt.Fprintf(w, "Each node declares one simulated GPU (DemoGPU); the job runs on the CPU. Job: %s.\n", r.res.JobKind)
	fmt.Fprintf(w, "Work dir: %s\n", r.res.Dir)
}

// prepareJob picks the job and writes its files.
func (r *run) prepareJob(ctx context.Context, dir string) error {
	kind := r.cfg.Job
	if kind == JobAuto || kind == JobPyTorch {
		fmt.Fprintf(r.cfg.Out, "Checking whether %s can import torch (the first import can take a while)...\n", r.cfg.Python)
		err := torchWorks(ctx, r.cfg.Python)
		switch {
		case err == nil:
			kind = JobPyTorch
		case kind == JobPyTorch:
			return fmt.Errorf("--job pytorch: %w", err)
		default:
			fmt.Fprintf(r.cfg.Out, "PyTorch is not importable from %s (%v): running the built-in synthetic job instead.\n", r.cfg.Python, err)
			kind = JobSynthetic
		}
	}
	r.res.JobKind = kind
	r.jobDir = filepath.Join(dir, "job")
	if err := os.MkdirAll(r.jobDir, 0o755); err != nil {
		return fmt.Errorf("job dir: %w", err)
	}
	r.bundleDir = r.jobDir
	if kind != JobPyTorch {
		r.bundleDir = filepath.Join(r.jobDir, "bundle")
		if err := os.Mkdir(r.bundleDir, 0o755); err != nil {
			return fmt.Errorf("job bundle dir: %w", err)
		}
		// A copy of the binary: the demo's own may lie where guest jobs
		// see nothing (go run builds it under the temporary directory).
		return copyFile(r.cfg.Binary, filepath.Join(r.jobDir, "reclaimnet"), 0o755)
	}
	return fs.WalkDir(pytorch.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := pytorch.Files.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(r.jobDir, p), b, 0o644)
	})
}

// copyFile copies src to dst with mode perm.
func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// torchWorks checks that python can import torch (slow the first time).
func torchWorks(ctx context.Context, python string) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c", "import torch").CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("%s -c 'import torch': %w: %s", python, err, lines[len(lines)-1])
	}
	return nil
}

// jobCommand is the job's command line and its checkpoint size hint. The
// PyTorch example runs from its bundle: train.py resolves in the bundle's
// layout on whichever node runs it.
func (r *run) jobCommand() ([]string, string) {
	if r.res.JobKind == JobPyTorch {
		// Width 512: ~3 MiB checkpoints (model + Adam state), a watchable pace.
		return []string{r.cfg.Python, "-u", "train.py", "--width", "512", "--step-time", "0.2"}, "4MiB"
	}
	return []string{filepath.Join(r.jobDir, "reclaimnet"), "demo-job", "--state", "8MiB", "--step-time", "100ms"}, "8MiB"
}

// killLeftovers kills job processes whose checkpoint directory lies under
// dir (a safety net: the agents stop their jobs, but a job of an agent
// killed hard could outlive it). It returns how many it killed.
func killLeftovers(dir string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	needle := []byte("RECLAIMNET_CKPT_DIR=" + dir + string(filepath.Separator))
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !containsVar(env, needle) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

func containsVar(environ, prefix []byte) bool {
	for _, kv := range splitNUL(environ) {
		if len(kv) >= len(prefix) && string(kv[:len(prefix)]) == string(prefix) {
			return true
		}
	}
	return false
}

func splitNUL(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := slices.Index(b, 0)
		if i < 0 {
			return append(out, b)
		}
		out = append(out, b[:i])
		b = b[i+1:]
	}
	return out
}

// decodeReport reads an owner's report printed by 'reclaim --now --json'
// (a report) or 'reclaim --status --json' (a status holding one).
func decodeReport(out string) *localapi.ReclaimReport {
	// --now prints what it did to the kill-switch before the JSON.
	if i := strings.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var st localapi.ReclaimStatus
	if json.Unmarshal([]byte(out), &st) == nil && st.Report != nil {
		return st.Report
	}
	var rep localapi.ReclaimReport
	if json.Unmarshal([]byte(out), &rep) == nil && rep.Node != "" {
		return &rep
	}
	return nil
}
