package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// systemDirs are the host directories a job sees read-only: programs,
// libraries (a Python with torch from the host works), configuration.
// Everything else of the host (/home, /root, /var, /run, /srv, /mnt,
// /media, /work...) is absent unless the owner lists it in ReadOnlyPaths.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// alwaysHidden are host files no job sees, whatever the configuration.
var alwaysHidden = []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-"}

// stdDevices are the device nodes of every job's /dev.
var stdDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// gpuShared are the NVIDIA control nodes a job with a GPU needs besides
// its /dev/nvidiaN.
var gpuShared = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}

type mountKind string

const (
	mBind    mountKind = "bind"    // Src onto Dst
	mTmpfs   mountKind = "tmpfs"   // a fresh tmpfs at Dst
	mProc    mountKind = "proc"    // the job's own /proc (its PID namespace)
	mSysfs   mountKind = "sysfs"   // a fresh, read-only /sys
	mSymlink mountKind = "symlink" // Dst -> Src
	mMask    mountKind = "mask"    // hide Dst if the job would see it
)

// mountOp is one step of building a job's root, applied in order by its
// init. Dst is the path inside the job's view.
type mountOp struct {
	Kind     mountKind
	Src, Dst string
	RO       bool   // read-only
	Dev      bool   // device nodes work (only /dev); else nodev
	Exec     bool   // programs may run from it; else noexec
	Mode     uint32 // tmpfs root mode
	Optional bool   // skip when Src is missing
}

// view is what one job sees besides the system: its own directories.
type view struct {
	writable []string // bound read-write (its work directory)
	readOnly []string // bound read-only (its restore directory, the owner's paths)
	gpus     []string // host device nodes of its GPUs
}

// canonical resolves p to an absolute path without symlinks, so that the
// job's root can be built without following any (a symlink there could
// point anywhere on the host).
func canonical(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("path %q is not absolute", p)
	}
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	return filepath.Clean(r), nil
}

// within reports whether p is dir or inside it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// plan lists the mounts of a job's root: the system read-only, its own
// /proc, /sys, /dev and /tmp, hidden paths masked, then the job's own
// directories (shallowest first, so nested ones land inside their
// parents).
func plan(v view, hidden []string) ([]mountOp, error) {
	var ops []mountOp
	for _, d := range systemDirs {
		st, err := os.Lstat(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return nil, err
			}
			ops = append(ops, mountOp{Kind: mSymlink, Src: target, Dst: d})
		case st.IsDir():
			ops = append(ops, mountOp{Kind: mBind, Src: d, Dst: d, RO: true, Exec: true})
		}
	}
	// A resolv.conf that links outside the system directories (systemd-
	// resolved's, under /run) is bound at its target, so name lookups work.
	if r, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && !slices.ContainsFunc(systemDirs, func(d string) bool { return within(r, d) }) {
		ops = append(ops, mountOp{Kind: mBind, Src: r, Dst: r, RO: true, Optional: true})
	}
	ops = append(ops,
		mountOp{Kind: mProc, Dst: "/proc"},
		mountOp{Kind: mSysfs, Dst: "/sys"},
		mountOp{Kind: mTmpfs, Dst: "/dev", Mode: 0o755, Dev: true},
	)
	for _, d := range stdDevices {
		ops = append(ops, mountOp{Kind: mBind, Src: "/dev/" + d, Dst: "/dev/" + d, Dev: true})
	}
	for i, name := range []string{"stdin", "stdout", "stderr"} {
		ops = append(ops, mountOp{Kind: mSymlink, Src: fmt.Sprintf("/proc/self/fd/%d", i), Dst: "/dev/" + name})
	}
	ops = append(ops,
		mountOp{Kind: mSymlink, Src: "/proc/self/fd", Dst: "/dev/fd"},
		mountOp{Kind: mTmpfs, Dst: "/dev/shm", Mode: 0o1777, Exec: true},
	)
	for _, g := range v.gpus {
		ops = append(ops, mountOp{Kind: mBind, Src: g, Dst: "/dev/" + filepath.Base(g), Dev: true})
	}
	ops = append(ops, mountOp{Kind: mTmpfs, Dst: "/tmp", Mode: 0o1777, Exec: true})

	type bind struct {
		path string
		rw   bool
	}
	var binds []bind
	for _, p := range v.readOnly {
		binds = append(binds, bind{p, false})
	}
	for _, p := range v.writable {
		binds = append(binds, bind{p, true})
	}
	slices.SortStableFunc(binds, func(a, b bind) int {
		return strings.Count(a.path, "/") - strings.Count(b.path, "/")
	})
	for _, h := range hidden {
		ops = append(ops, mountOp{Kind: mMask, Dst: h})
	}
	for _, b := range binds {
		ops = append(ops, mountOp{Kind: mBind, Src: b.path, Dst: b.path, RO: !b.rw, Exec: true})
	}
	// Hidden paths inside the job's own directories are masked once
	// those are bound.
	for _, h := range hidden {
		if slices.ContainsFunc(binds, func(b bind) bool { return h != b.path && within(h, b.path) }) {
			ops = append(ops, mountOp{Kind: mMask, Dst: h})
		}
	}
	return ops, nil
}

// deviceRules are the device cgroup rules of a job: nothing but the
// standard nodes and its own GPUs.
func deviceRules(gpus []string) ([]specs.LinuxDeviceCgroup, error) {
	rules := []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}
	paths := make([]string, 0, len(stdDevices)+len(gpus))
	for _, d := range stdDevices {
		paths = append(paths, "/dev/"+d)
	}
	paths = append(paths, gpus...)
	for _, p := range paths {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return nil, fmt.Errorf("device %s: %w", p, err)
		}
		typ := "c"
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFCHR:
		case syscall.S_IFBLK:
			typ = "b"
		default:
			return nil, fmt.Errorf("device %s is not a device node", p)
		}
		major, minor := int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		rules = append(rules, specs.LinuxDeviceCgroup{Allow: true, Type: typ, Major: &major, Minor: &minor, Access: "rwm"})
	}
	return rules, nil
}

// gpuNodes returns the host device nodes of the GPUs with these indices
// (dev/nvidiaN) and, when there is one, the shared control nodes that
// exist.
func gpuNodes(dev string, gpus []int) ([]string, error) {
	if len(gpus) == 0 {
		return nil, nil
	}
	var out []string
	for _, i := range gpus {
		p := filepath.Join(dev, fmt.Sprintf("nvidia%d", i))
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("gpu %d: %w", i, err)
		}
		out = append(out, p)
	}
	for _, n := range gpuShared {
		p := filepath.Join(dev, n)
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}
