package owner

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Guests tells guest jobs' processes from the owner's by their cgroup: a
// process whose /proc/PID/cgroup puts it, in any hierarchy, at Parent or
// below is a guest's. Hierarchies count alike, so the test holds on
// cgroup v2 (the one "0::" line) and on the hybrid layout (v1
// controllers plus a v2 hierarchy), wherever the sandbox placed the job.
// Moving a process into the guests' cgroup takes root, so an owner's
// process cannot pass for a guest's.
type Guests struct {
	// ProcRoot is where proc is mounted ("/proc").
	ProcRoot string
	// Parent is the guests' parent cgroup as /proc/PID/cgroup writes it
	// ("/reclaimnet/guests").
	Parent string
}

// NewGuests checks parent (absolute, not the root cgroup) and returns the
// classifier; an empty procRoot is /proc.
func NewGuests(procRoot, parent string) (Guests, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	p := path.Clean(parent)
	if parent == "" || !path.IsAbs(p) || p == "/" {
		return Guests{}, fmt.Errorf("guests' cgroup %q: want an absolute cgroup path below the root, as /proc/PID/cgroup shows it (e.g. /reclaimnet/guests)", parent)
	}
	return Guests{ProcRoot: procRoot, Parent: p}, nil
}

// IsGuest reports whether process pid is a guest's. A process that is gone
// gives an error for which gone is true.
func (g Guests) IsGuest(pid int) (bool, error) {
	b, err := os.ReadFile(filepath.Join(g.ProcRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return false, fmt.Errorf("read cgroup of process %d: %w", pid, err)
	}
	return underCgroup(b, g.Parent), nil
}

// underCgroup reports whether a /proc/PID/cgroup text ("ID:CONTROLLERS:PATH"
// lines) places the process at parent or below in any hierarchy.
func underCgroup(text []byte, parent string) bool {
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		if p := f[2]; p == parent || strings.HasPrefix(p, parent+"/") {
			return true
		}
	}
	return false
}

// gone reports whether err means the process exited (its /proc entry
// vanished, or went away while being read).
func gone(err error) bool { return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) }

// procComm returns a process's command name, "" when unknown.
func procComm(procRoot string, pid int) string {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
