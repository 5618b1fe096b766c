package owner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on
// every Linux architecture's user ABI.
const clockTicks = 100

// pfKthread marks kernel threads in /proc/PID/stat's flags.
const pfKthread = 0x00200000

// ProcCPU measures the owner's CPU load from /proc: the CPU time, per
// second of the interval between two calls, of every process that is
// not a guest's (Guests), not a kernel thread and not excluded (the
// agent itself). A process that exits between two calls takes its last
// interval's time with it, so the figure errs low, never high.
type ProcCPU struct {
	Guests Guests
	// Exclude are processes that are neither the owner's nor guests'
	// (the agent's own PID).
	Exclude []int

	mu sync.Mutex // guards the previous sample below
	// prev is each process's CPU ticks at the previous call, by PID and
	// start time (a PID reused by a new process is a new key).
	prev   map[procKey]uint64
	prevUp float64
	primed bool
}

type procKey struct {
	pid   int
	start uint64
}

// procStat is what ProcCPU reads of /proc/PID/stat.
type procStat struct {
	comm  string
	flags uint64
	ticks uint64 // utime + stime
	start uint64 // start time, ticks after boot
}

// OwnerCPU returns the owner's load since the previous call; ok is false
// on the first call (there is no interval yet).
func (c *ProcCPU) OwnerCPU(ctx context.Context) (load CPULoad, ok bool, err error) {
	sm, err := c.sample(ctx)
	if err != nil || sm.elapsed <= 0 {
		return CPULoad{}, false, err
	}
	var total, top uint64
	for pid, d := range sm.ticks {
		total += d
		if d > top || d == top && d > 0 && pid < load.TopPID {
			top, load.TopPID, load.TopName = d, pid, sm.comm[pid]
		}
	}
	load.Cores = float64(total) / clockTicks / sm.elapsed
	return load, true, nil
}

// cpuSample is one interval: the owner's processes' CPU ticks in it, by
// PID, and its length in seconds (0 on the first call).
type cpuSample struct {
	ticks   map[int]uint64
	comm    map[int]string
	elapsed float64
}

func (c *ProcCPU) sample(ctx context.Context) (cpuSample, error) {
	up, err := readUptime(c.Guests.ProcRoot)
	if err != nil {
		return cpuSample{}, err
	}
	entries, err := os.ReadDir(c.Guests.ProcRoot)
	if err != nil {
		return cpuSample{}, fmt.Errorf("read %s: %w", c.Guests.ProcRoot, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	sm := cpuSample{ticks: map[int]uint64{}, comm: map[int]string{}}
	cur := make(map[procKey]uint64, len(c.prev))
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return cpuSample{}, err
		}
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || slices.Contains(c.Exclude, pid) {
			continue
		}
		st, err := readProcStat(c.Guests.ProcRoot, pid)
		if gone(err) {
			continue
		}
		if err != nil {
			return cpuSample{}, err
		}
		if st.flags&pfKthread != 0 {
			continue
		}
		guest, err := c.Guests.IsGuest(pid)
		if gone(err) {
			continue
		}
		if err != nil {
			return cpuSample{}, err
		}
		if guest {
			continue
		}
		k := procKey{pid, st.start}
		cur[k] = st.ticks
		var d uint64
		if before, seen := c.prev[k]; seen {
			d = st.ticks - min(before, st.ticks)
		} else if c.primed && float64(st.start) >= c.prevUp*clockTicks {
			// Started since the previous call: all of its time is new.
			d = st.ticks
		}
		if d > 0 {
			sm.ticks[pid], sm.comm[pid] = d, st.comm
		}
	}
	if c.primed {
		sm.elapsed = up - c.prevUp
	}
	c.prev, c.prevUp, c.primed = cur, up, true
	return sm, nil
}

// readUptime reads the seconds since boot from /proc/uptime: a monotonic
// clock in the same epoch as the processes' start times.
func readUptime(procRoot string) (float64, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "uptime"))
	if err != nil {
		return 0, fmt.Errorf("read uptime: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, errors.New("read uptime: empty")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("read uptime: %w", err)
	}
	return v, nil
}

func readProcStat(procRoot string, pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, fmt.Errorf("read stat of process %d: %w", pid, err)
	}
	st, err := parseProcStat(b)
	if err != nil {
		return procStat{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return st, nil
}

// parseProcStat reads /proc/PID/stat (proc(5)): "PID (COMM) STATE ..."
// where COMM may hold spaces and parentheses, so the fields are counted
// from the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	open, shut := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || shut < open {
		return procStat{}, errors.New("stat: no (comm)")
	}
	f := strings.Fields(string(b[shut+1:]))
	// After the comm: state(3) ... flags(9) ... utime(14) stime(15) ...
	// starttime(22); f[0] is field 3.
	const (
		flags = 9 - 3
		utime = 14 - 3
		stime = 15 - 3
		start = 22 - 3
	)
	if len(f) <= start {
		return procStat{}, fmt.Errorf("stat: %d fields after the comm, want more than %d", len(f), start)
	}
	var st procStat
	st.comm = string(b[open+1 : shut])
	var vals [4]uint64
	for i, idx := range []int{flags, utime, stime, start} {
		v, err := strconv.ParseUint(f[idx], 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("stat: field %d %q: %w", idx+3, f[idx], err)
		}
		vals[i] = v
	}
	st.flags, st.ticks, st.start = vals[0], vals[1]+vals[2], vals[3]
	return st, nil
}
