package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// startTimeout bounds the set-up of a job's root and the start of its
// process.
const startTimeout = 30 * time.Second

// forwarded are the signals a job's init passes on: SIGTERM to every
// process of the job, the others (the checkpoint signals) to its main
// process.
var forwarded = []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
	syscall.SIGALRM, syscall.SIGTERM, syscall.SIGURG, syscall.SIGPWR, syscall.SIGWINCH, syscall.SIGCONT}

// Spec is one process of a job to start confined.
type Spec struct {
	// Name is the job's id; it names the job's cgroup.
	Name string
	// Identity is the job's uid and gid (Acquire).
	Identity *Identity
	// Argv is the command; a name without a slash is looked up on the
	// PATH of Env inside the job's root.
	Argv []string
	// Env is the job's whole environment.
	Env []string
	// Dir is the working directory; it must lie in Writable, ReadOnly or
	// the owner's read-only paths.
	Dir string
	// Writable are the job's own directories, bound read-write at the
	// same paths. The caller makes what the job writes to owned by it.
	Writable []string
	// ReadOnly are further directories the job sees read-only (the
	// checkpoint it resumes from).
	ReadOnly []string
	// GPUs are the indices of the GPUs assigned to the job (DevDir/nvidiaN):
	// only these are in its /dev and allowed by its device cgroup.
	GPUs []int
	// Limits are the job's memory, CPU and pids limits.
	Limits Limits
	// Output receives the job's stdout and stderr.
	Output *os.File
}

// Exit is how a job's main process ended.
type Exit struct {
	Code   int            // exit code; -1 when a signal killed it
	Signal syscall.Signal // the signal that killed it, or 0
}

// Process is a started job process: its init, the job's main process and
// everything they start, in one cgroup and one PID namespace.
type Process struct {
	// Constant after Start.
	sb    *Sandbox
	name  string // cgroup name
	g     *jobGroup
	cmd   *exec.Cmd
	life  *os.File // write end of the lifeline
	nspid int      // main process, in the job's PID namespace

	exited chan Exit     // buffered 1: the main process ended
	done   chan struct{} // closed once init is reaped

	mu      sync.Mutex // protects hostPID
	hostPID int
}

var nameChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// Start starts a confined process of a job and returns once the job's
// main process runs (or could not be started).
func (s *Sandbox) Start(sp Spec) (*Process, error) { return s.start(sp, false) }

func (s *Sandbox) start(sp Spec, probe bool) (*Process, error) {
	if sp.Identity == nil || sp.Identity.lockFile() == nil {
		return nil, errors.New("sandbox: start without a leased identity")
	}
	if len(sp.Argv) == 0 || sp.Argv[0] == "" {
		return nil, errors.New("sandbox: empty command")
	}
	if err := sp.Limits.Validate(); err != nil {
		return nil, err
	}
	var v view
	for _, p := range sp.Writable {
		r, err := canonical(p)
		if err != nil {
			return nil, fmt.Errorf("job directory: %w", err)
		}
		v.writable = append(v.writable, r)
	}
	v.readOnly = slices.Clone(s.readOnly)
	for _, p := range sp.ReadOnly {
		r, err := canonical(p)
		if err != nil {
			return nil, fmt.Errorf("job read-only directory: %w", err)
		}
		v.readOnly = append(v.readOnly, r)
	}
	dir, err := canonical(sp.Dir)
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	if !slices.ContainsFunc(append(slices.Clone(v.writable), v.readOnly...), func(d string) bool { return within(dir, d) }) {
		return nil, fmt.Errorf("working directory %s is not visible to the job: it must lie in its work directory or a guest read-only path", sp.Dir)
	}
	if v.gpus, err = gpuNodes(s.cfg.DevDir, sp.GPUs); err != nil {
		return nil, err
	}
	mounts, err := plan(v, s.hidden)
	if err != nil {
		return nil, err
	}
	devices, err := deviceRules(v.gpus)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.seq++
	name := fmt.Sprintf("%s.%d.%d", nameChars.ReplaceAllString(sp.Name, "_"), sp.Identity.UID, s.seq)
	s.live[name] = true
	s.mu.Unlock()
	p := &Process{sb: s, name: name, exited: make(chan Exit, 1), done: make(chan struct{})}
	if p.g, err = s.cg.create(name, sp.Limits, devices); err != nil {
		s.forget(name)
		return nil, err
	}
	sigs := make([]int, len(forwarded))
	for i, sg := range forwarded {
		sigs[i] = int(sg)
	}
	cfg := initConfig{Root: s.root, Mounts: mounts, Argv: sp.Argv, Env: sp.Env, Dir: dir,
		UID: sp.Identity.UID, GID: sp.Identity.GID, Seccomp: s.seccomp, Signals: sigs, Probe: probe}
	if err := p.launch(cfg, sp.Identity.lockFile(), sp.Output); err != nil {
		p.g.delete()
		s.forget(name)
		return nil, err
	}
	return p, nil
}

func (s *Sandbox) forget(name string) {
	s.mu.Lock()
	delete(s.live, name)
	s.mu.Unlock()
}

// launch starts the init in its namespaces and cgroup, hands it its
// configuration and waits for its first word.
func (p *Process) launch(cfg initConfig, lease, output *os.File) (err error) {
	var closeAfter []*os.File
	defer func() {
		for _, f := range closeAfter {
			f.Close()
		}
	}()
	pipe := func() (r, w *os.File) {
		if err != nil {
			return nil, nil
		}
		r, w, err = os.Pipe()
		return r, w
	}
	cfgR, cfgW := pipe()
	stR, stW := pipe()
	lifeR, lifeW := pipe()
	if err != nil {
		return err
	}
	closeAfter = append(closeAfter, cfgR, stW, lifeR)
	cgDir, err := p.g.v2Dir()
	if err != nil {
		cfgW.Close()
		stR.Close()
		lifeW.Close()
		return err
	}
	attr := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		Pdeathsig:  syscall.SIGKILL,
		Setpgid:    true,
	}
	if cgDir != nil {
		closeAfter = append(closeAfter, cgDir)
		attr.UseCgroupFD, attr.CgroupFD = true, int(cgDir.Fd())
	}
	if output == nil {
		output, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		closeAfter = append(closeAfter, output)
	}
	p.cmd = &exec.Cmd{
		Path: "/proc/self/exe",
		Args: []string{initArg0},
		// No asynchronous preemption: the runtime's SIGURGs would reach
		// the job as checkpoint requests when URG is its signal.
		Env:         []string{"GODEBUG=asyncpreemptoff=1"},
		Stdout:      output,
		Stderr:      output,
		ExtraFiles:  []*os.File{cfgR, stW, lifeR, lease},
		SysProcAttr: attr,
	}
	var startErr error
	onStarterThread(func() { startErr = p.cmd.Start() })
	if startErr != nil {
		cfgW.Close()
		stR.Close()
		lifeW.Close()
		return fmt.Errorf("start the job's init: %w", startErr)
	}
	for _, f := range closeAfter {
		f.Close()
	}
	closeAfter = nil
	p.life = lifeW
	initDone := make(chan struct{})
	go func() { // owned by the init: ends when it is reaped
		p.cmd.Wait()
		close(initDone)
	}()
	fail := func(err error) error {
		p.cmd.Process.Kill()
		<-initDone
		p.life.Close()
		stR.Close()
		return err
	}
	if err := p.g.addV1(p.cmd.Process.Pid); err != nil {
		cfgW.Close()
		return fail(err)
	}
	err = json.NewEncoder(cfgW).Encode(cfg)
	cfgW.Close()
	if err != nil {
		return fail(fmt.Errorf("configure the job's init: %w", err))
	}
	type word struct{ kind, arg string }
	first := make(chan word, 1)
	st := bufio.NewReader(stR)
	go func() {
		k, a, err := readStatus(st)
		if err != nil {
			k, a = stError, "the job's init ended during set-up"
		}
		first <- word{k, a}
	}()
	var w word
	select {
	case w = <-first:
	case <-time.After(startTimeout):
		return fail(fmt.Errorf("the job's init did not start the job within %s", startTimeout))
	}
	switch {
	case w.kind == stProbed && cfg.Probe:
		<-initDone
		stR.Close()
		close(p.exited)
		close(p.done)
		return nil
	case w.kind == stStarted:
		if p.nspid, err = strconv.Atoi(w.arg); err != nil {
			return fail(fmt.Errorf("the job's init said %q", w.arg))
		}
	default:
		return fail(errors.New(w.arg))
	}
	go p.watch(st, stR, initDone)
	return nil
}

// watch delivers the main process's exit and closes done once the init is
// reaped (it ends after the last process of the job).
func (p *Process) watch(st *bufio.Reader, stR *os.File, initDone <-chan struct{}) {
	defer close(p.done)
	defer stR.Close()
	sent := false
	for !sent {
		kind, arg, err := readStatus(st)
		if err != nil {
			break
		}
		n, _ := strconv.Atoi(arg)
		switch kind {
		case stExit:
			p.exited <- Exit{Code: n}
			sent = true
		case stSignal:
			p.exited <- Exit{Code: -1, Signal: syscall.Signal(n)}
			sent = true
		}
	}
	<-initDone
	if !sent {
		// The init died before the main process did (killed with the
		// whole job): the job died of the same signal.
		ex := Exit{Code: p.cmd.ProcessState.ExitCode()}
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ex = Exit{Code: -1, Signal: ws.Signal()}
		}
		p.exited <- ex
	}
}

// Name is the job's cgroup, relative to the hierarchies' parent.
func (p *Process) Name() string { return p.name }

// Cgroup is the job's cgroup path under each hierarchy's root
// ("/reclaimnet/NAME").
func (p *Process) Cgroup() string { return p.g.path }

// InitPID is the host PID of the job's init.
func (p *Process) InitPID() int { return p.cmd.Process.Pid }

// PID is the host PID of the job's main process; 0 once it has ended.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hostPID == 0 {
		ps, _ := p.g.procs()
		for _, pid := range ps {
			if nsPID(pid) == p.nspid {
				p.hostPID = pid
			}
		}
	}
	return p.hostPID
}

// nsPID is pid's PID in its innermost PID namespace (NSpid in status).
func nsPID(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(line, "NSpid:"); ok {
			fs := strings.Fields(f)
			if len(fs) == 0 {
				return 0
			}
			n, _ := strconv.Atoi(fs[len(fs)-1])
			return n
		}
	}
	return 0
}

// Exited delivers how the main process ended, once.
func (p *Process) Exited() <-chan Exit { return p.exited }

// Done is closed once every process of the job has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Signal sends sig to the job's main process (the init forwards it).
func (p *Process) Signal(sig syscall.Signal) error {
	if !slices.Contains(forwarded, sig) || sig == syscall.SIGTERM {
		return fmt.Errorf("signal %v is not forwarded to a job's main process", sig)
	}
	return ignoreGone(p.cmd.Process.Signal(sig))
}

// Terminate sends SIGTERM to every process of the job.
func (p *Process) Terminate() error { return ignoreGone(p.cmd.Process.Signal(syscall.SIGTERM)) }

// Kill kills every process of the job at once.
func (p *Process) Kill() error {
	err := p.g.kill()
	// The init's death ends its PID namespace: the kernel kills the rest.
	p.cmd.Process.Kill()
	return err
}

func ignoreGone(err error) error {
	if errors.Is(err, os.ErrProcessDone) || errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

// Procs lists the live processes of the job (host PIDs), its init
// included.
func (p *Process) Procs() ([]int, error) {
	ps, err := p.g.procs()
	out := ps[:0]
	for _, pid := range ps {
		if alive(pid) {
			out = append(out, pid)
		}
	}
	return out, err
}

func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// OOMKills is how many of the job's processes the kernel killed for
// reaching its memory limit (or the guests' cap).
func (p *Process) OOMKills() uint64 {
	n, _ := p.g.oomKills()
	return n
}

// Close waits until every process of the job has ended (Kill ends them),
// then removes the job's cgroup and ends the lifeline.
func (p *Process) Close() error {
	<-p.done
	if p.life != nil {
		p.life.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := p.g.killAndRemove(ctx)
	p.sb.forget(p.name)
	return err
}
