package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/reclaimnet/reclaimnet/agent/sandbox"
)

// process is one started process of a job and everything it starts: a
// sandbox (a cgroup and a PID namespace) or, with the sandbox off, a
// process group.
type process interface {
	// pid is the job's main process (host PID); 0 when unknown.
	pid() int
	// exited delivers how the main process ended, once.
	exited() <-chan exitInfo
	// signal sends the checkpoint signal to the main process only.
	signal(sig syscall.Signal) error
	// terminate sends SIGTERM to every process of the job.
	terminate() error
	// kill sends SIGKILL to every process of the job.
	kill() error
	// members lists the job's live processes.
	members() ([]int, error)
	// release frees what the process held once no member is left, and
	// returns how many processes the OOM killer ended.
	release() uint64
}

// groupProcess is an unconfined job: a process group.
type groupProcess struct {
	cmd  *exec.Cmd
	exit chan exitInfo
}

// startGroup starts an unconfined process of the job in its own process
// group with its output on out.
func startGroup(argv []string, dir string, env []string, out *os.File) (*groupProcess, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	g := &groupProcess{cmd: cmd, exit: make(chan exitInfo, 1)}
	go func() { // owned by this process: ends when it is reaped
		cmd.Wait()
		g.exit <- exitInfoOf(cmd.ProcessState)
	}()
	return g, nil
}

func (g *groupProcess) pid() int                        { return g.cmd.Process.Pid }
func (g *groupProcess) exited() <-chan exitInfo         { return g.exit }
func (g *groupProcess) signal(sig syscall.Signal) error { return syscall.Kill(g.pid(), sig) }
func (g *groupProcess) terminate() error                { return signalGroup(g.pid(), syscall.SIGTERM) }
func (g *groupProcess) kill() error                     { return signalGroup(g.pid(), syscall.SIGKILL) }
func (g *groupProcess) members() ([]int, error)         { return groupMembers(g.pid()) }
func (g *groupProcess) release() uint64                 { return 0 }

// sandboxProcess is a confined job.
type sandboxProcess struct {
	p    *sandbox.Process
	exit chan exitInfo
}

func startSandboxed(sb *sandbox.Sandbox, spec sandbox.Spec) (*sandboxProcess, error) {
	p, err := sb.Start(spec)
	if err != nil {
		return nil, err
	}
	s := &sandboxProcess{p: p, exit: make(chan exitInfo, 1)}
	go func() { // owned by this process: ends when its main process has ended
		e := <-p.Exited()
		ex := exitInfo{code: e.Code}
		if e.Signal != 0 {
			ex = exitInfo{code: -1, signal: e.Signal.String()}
		}
		s.exit <- ex
	}()
	return s, nil
}

func (s *sandboxProcess) pid() int                        { return s.p.PID() }
func (s *sandboxProcess) exited() <-chan exitInfo         { return s.exit }
func (s *sandboxProcess) signal(sig syscall.Signal) error { return s.p.Signal(sig) }
func (s *sandboxProcess) terminate() error                { return s.p.Terminate() }
func (s *sandboxProcess) kill() error                     { return s.p.Kill() }
func (s *sandboxProcess) members() ([]int, error)         { return s.p.Procs() }

func (s *sandboxProcess) release() uint64 {
	n := s.p.OOMKills()
	s.p.Close()
	return n
}

// groupMembers returns the live (not zombie) processes whose process group
// is pgid, read from /proc. Zombies are excluded: they hold no resources
// and, once the job's leader is gone, are reaped by whoever adopted them.
func groupMembers(pgid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		state, pg, ok := parseStat(b)
		if ok && pg == pgid && state != 'Z' && state != 'X' {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// parseStat reads the state and process group from /proc/PID/stat. The
// command name (field 2) may contain spaces and parentheses, so fields are
// counted after the last ')'.
func parseStat(b []byte) (state byte, pgrp int, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	// f[0] state, f[1] ppid, f[2] pgrp
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, false
	}
	pg, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], pg, true
}

// signalGroup sends sig to every process of the group; a group that is
// already empty is not an error.
func signalGroup(pgid int, sig syscall.Signal) error {
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
