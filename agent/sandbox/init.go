package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// initArg0 is the name the binary is started under to become a job's
// init: the agent runs /proc/self/exe with it (the re-exec pattern, so a
// test binary that links this package works the same way).
const initArg0 = "reclaimnet-sandbox-init"

// The init's inherited descriptors.
const (
	fdConfig   = 3 // reads its initConfig, JSON, until EOF
	fdStatus   = 4 // writes status lines
	fdLifeline = 5 // read end of a pipe only the agent writes to: EOF = the agent died
	fdLease    = 6 // the uid lease (held, never used)
)

// initConfig is what the agent tells a job's init.
type initConfig struct {
	Root    string // mount point of the job's root (a directory of the host)
	Mounts  []mountOp
	Argv    []string
	Env     []string
	Dir     string
	UID     uint32
	GID     uint32
	Seccomp []byte
	// Signals are forwarded to the job's main process; SIGTERM goes to
	// every process of the job.
	Signals []int
	// Probe stops after the set-up: the agent checks that confinement
	// works on this machine.
	Probe bool
}

// Status lines the init writes on fdStatus.
const (
	stStarted = "started" // started NSPID: the job's main process runs
	stProbed  = "probed"  // the set-up worked (Probe)
	stError   = "error"   // error MESSAGE: set-up or start failed
	stExit    = "exit"    // exit CODE: the main process exited
	stSignal  = "signal"  // signal NUMBER: a signal killed it
)

func init() {
	if len(os.Args) > 0 && os.Args[0] == initArg0 {
		os.Exit(runInit())
	}
}

// runInit is a job's init: PID 1 of the job's PID namespace, root in its
// own mount namespace. It builds the job's root, drops every privilege on
// the way to the job's process, then reaps and forwards signals until the
// last process of the job has ended.
func runInit() int {
	// The thread that drops privileges is the one that forks the job.
	runtime.LockOSThread()
	status := os.NewFile(fdStatus, "status")
	fail := func(err error) int {
		fmt.Fprintf(status, "%s %s\n", stError, strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	for fd := fdConfig; fd <= fdLease; fd++ {
		syscall.CloseOnExec(fd)
	}
	var cfg initConfig
	if err := json.NewDecoder(os.NewFile(fdConfig, "config")).Decode(&cfg); err != nil {
		return fail(fmt.Errorf("read sandbox config: %w", err))
	}
	sigs := make(chan os.Signal, 16)
	for _, s := range cfg.Signals {
		signal.Notify(sigs, syscall.Signal(s))
	}
	go func() {
		// The agent holds the only write end: EOF means it died.
		io.Copy(io.Discard, os.NewFile(fdLifeline, "lifeline"))
		unix.Kill(-1, unix.SIGKILL)
		os.Exit(137)
	}()
	if err := buildRoot(cfg); err != nil {
		return fail(err)
	}
	if err := dropPrivileges(cfg.Seccomp); err != nil {
		return fail(err)
	}
	if cfg.Probe {
		fmt.Fprintf(status, "%s\n", stProbed)
		return 0
	}
	pid, err := startJob(cfg)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(status, "%s %d\n", stStarted, pid)
	go func() {
		for s := range sigs {
			if s == syscall.SIGTERM {
				unix.Kill(-1, unix.SIGTERM)
			} else {
				unix.Kill(pid, s.(syscall.Signal))
			}
		}
	}()
	mainDone := false
	for {
		var ws unix.WaitStatus
		p, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ECHILD) {
			return 0
		}
		if err != nil {
			return fail(fmt.Errorf("wait: %w", err))
		}
		if p == pid && !mainDone {
			mainDone = true
			if ws.Signaled() {
				fmt.Fprintf(status, "%s %d\n", stSignal, int(ws.Signal()))
			} else {
				fmt.Fprintf(status, "%s %d\n", stExit, ws.ExitStatus())
			}
		}
	}
}

// buildRoot makes the job's root on a tmpfs at cfg.Root and pivots into
// it; nothing propagates back to the host.
func buildRoot(cfg initConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	root := cfg.Root
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("root tmpfs on %s: %w", root, err)
	}
	var readOnlyLater []string
	for _, op := range cfg.Mounts {
		masked, err := applyMount(root, op)
		if err != nil {
			return err
		}
		if masked {
			readOnlyLater = append(readOnlyLater, filepath.Join(root, op.Dst))
		}
	}
	for _, p := range append(readOnlyLater, filepath.Join(root, "dev"), root) {
		if err := setAttr(p, false, unix.MOUNT_ATTR_RDONLY); err != nil {
			return fmt.Errorf("make %s read-only: %w", p, err)
		}
	}
	if err := unix.Chdir(root); err != nil {
		return err
	}
	// The old root is stacked under the new one and detached: nothing of
	// the host is reachable from here but what was bound.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := unix.Chdir(cfg.Dir); err != nil {
		return fmt.Errorf("working directory %s: %w", cfg.Dir, err)
	}
	return nil
}

// applyMount performs one step; masked reports a tmpfs mask to be made
// read-only once everything inside it is bound.
func applyMount(root string, op mountOp) (masked bool, err error) {
	dst := filepath.Join(root, op.Dst)
	wrap := func(err error) error {
		if err == nil {
			return nil
		}
		return fmt.Errorf("%s %s: %w", op.Kind, op.Dst, err)
	}
	switch op.Kind {
	case mSymlink:
		if err := mkdirs(root, filepath.Dir(op.Dst)); err != nil {
			return false, wrap(err)
		}
		return false, wrap(os.Symlink(op.Src, dst))
	case mProc:
		if err := mkdirs(root, op.Dst); err != nil {
			return false, wrap(err)
		}
		return false, wrap(unix.Mount("proc", dst, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""))
	case mSysfs:
		if err := mkdirs(root, op.Dst); err != nil {
			return false, wrap(err)
		}
		return false, wrap(unix.Mount("sysfs", dst, "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""))
	case mTmpfs:
		if err := mkdirs(root, op.Dst); err != nil {
			return false, wrap(err)
		}
		flags := uintptr(unix.MS_NOSUID)
		if !op.Dev {
			flags |= unix.MS_NODEV
		}
		if !op.Exec {
			flags |= unix.MS_NOEXEC
		}
		return false, wrap(unix.Mount("tmpfs", dst, "tmpfs", flags, fmt.Sprintf("mode=%o", op.Mode)))
	case mMask:
		st, err := os.Lstat(dst)
		if err != nil {
			return false, nil // not visible: nothing to hide
		}
		if st.IsDir() {
			return true, wrap(unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"))
		}
		if err := unix.Mount("/dev/null", dst, "", unix.MS_BIND, ""); err != nil {
			return false, wrap(err)
		}
		return false, wrap(setAttr(dst, false, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC))
	case mBind:
		st, err := os.Stat(op.Src)
		if err != nil {
			if op.Optional && errors.Is(err, fs.ErrNotExist) {
				return false, nil
			}
			return false, wrap(err)
		}
		if _, err := os.Lstat(dst); err != nil {
			if st.IsDir() {
				err = mkdirs(root, op.Dst)
			} else if err = mkdirs(root, filepath.Dir(op.Dst)); err == nil {
				var f *os.File
				if f, err = os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
					f.Close()
				}
			}
			if err != nil {
				return false, wrap(err)
			}
		}
		if err := unix.Mount(op.Src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return false, wrap(err)
		}
		attr := uint64(unix.MOUNT_ATTR_NOSUID)
		if op.RO {
			attr |= unix.MOUNT_ATTR_RDONLY
		}
		if !op.Dev {
			attr |= unix.MOUNT_ATTR_NODEV
		}
		if !op.Exec {
			attr |= unix.MOUNT_ATTR_NOEXEC
		}
		return false, wrap(setAttr(dst, true, attr))
	}
	return false, fmt.Errorf("unknown mount step %q", op.Kind)
}

// setAttr sets mount attributes on the mount at p (and, recursive, every
// mount below it: a bound /usr may carry others).
func setAttr(p string, recursive bool, attr uint64) error {
	var flags uint
	if recursive {
		flags = unix.AT_RECURSIVE
	}
	return unix.MountSetattr(-1, p, flags, &unix.MountAttr{Attr_set: attr})
}

// mkdirs creates rel under root one component at a time and refuses a
// symlink on the way (it could lead out of the job's root).
func mkdirs(root, rel string) error {
	cur := root
	for _, c := range strings.Split(strings.Trim(rel, "/"), "/") {
		if c == "" {
			continue
		}
		cur = filepath.Join(cur, c)
		st, err := os.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(cur, 0o755); err != nil {
				return err
			}
		case err != nil:
			return err
		case st.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("%s is a symlink", strings.TrimPrefix(cur, root))
		case !st.IsDir():
			return fmt.Errorf("%s is not a directory", strings.TrimPrefix(cur, root))
		}
	}
	return nil
}

// dropPrivileges empties the capability bounding and inheritable sets,
// sets no_new_privs and loads the seccomp filter, all on this thread: the
// job's process, forked from it, inherits them, and its uid change clears
// the rest (permitted, effective, ambient).
func dropPrivileges(prog []byte) error {
	last, err := lastCap()
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear inheritable capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return loadSeccomp(prog)
}

func lastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// startJob forks and execs the job's main process as the guest: its own
// process group, no supplementary groups, stdin /dev/null, output on the
// init's stdout and stderr.
func startJob(cfg initConfig) (int, error) {
	argv0, err := lookPath(cfg.Argv[0], cfg.Env)
	if err != nil {
		return 0, err
	}
	null, err := os.Open("/dev/null")
	if err != nil {
		return 0, err
	}
	defer null.Close()
	pid, err := syscall.ForkExec(argv0, cfg.Argv, &syscall.ProcAttr{
		Dir:   cfg.Dir,
		Env:   cfg.Env,
		Files: []uintptr{null.Fd(), 1, 2},
		Sys: &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: cfg.UID, Gid: cfg.GID, Groups: []uint32{}},
			Setpgid:    true,
			Pdeathsig:  syscall.SIGKILL,
		},
	})
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", cfg.Argv[0], err)
	}
	return pid, nil
}

// lookPath finds a command without a slash on the job's PATH, inside the
// job's root.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("start %s: not found on PATH %s", name, path)
}

// readStatus parses one status line.
func readStatus(r *bufio.Reader) (kind, arg string, err error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", "", err
	}
	kind, arg, _ = strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	return kind, arg, nil
}
